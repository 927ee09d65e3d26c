"""The worker's protocol lines as event dicts, read in bounded chunks from a hostile writer.

Once it has read its input the worker is treated as hostile: its output is read in chunks of
at most 1 MiB and never held beyond one line, each line is bounded in bytes and in what its
parsed form may hold, and the whole job's output is bounded, so a worker that floods cannot
grow this process. Anything but one JSON event object a line is a `ProtocolViolation`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

MAX_LINE_BYTES = 64 << 20
"""One protocol line: an inspect result repeats every tensor record (about 1 KiB each), so
this admits some 60,000 tensors while bounding what one line can make this process hold."""
LINE_BUDGET = {b"{[": MAX_LINE_BYTES // 64, b",:": MAX_LINE_BYTES // 8, b'"': MAX_LINE_BYTES // 12}
"""What one line may hold besides bytes: containers, items (commas and colons) and quote
marks (two per string), counted before parsing (inside strings too, which only errs towards
refusing). The parsed form of `[{},{},...]` is 25 times its text, so the byte bound alone let
a 48 MiB line grow this process by 1.3 GiB. A real inspect result (about 120 bytes per
container, 6 per item, 30 per quote mark) of 60,000 tensors stays inside them; the costliest
line they admit grows the client by about 0.5 GiB (measured in tests/test_jail_args.py;
docs/security.md), and nesting deeper than the interpreter's recursion limit (1,000) is
refused by the parser itself."""
MAX_OUTPUT_BYTES = 1 << 30
"""Everything a worker may write on the protocol descriptor in one job."""


class ProtocolViolation(Exception):
    """The worker broke the protocol; the message says how."""


def read_events(fd: int) -> Iterator[dict]:
    """The worker's protocol lines as event dicts; raises ProtocolViolation on anything else."""
    for raw in _bounded_lines(fd, MAX_LINE_BYTES, MAX_OUTPUT_BYTES):
        for marks, bound in LINE_BUDGET.items():
            if sum(raw.count(bytes([m])) for m in marks) > bound:
                raise ProtocolViolation(f"a line with more than {bound:,} of {marks.decode()!r}")
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):  # the parser recurses once per nested bracket
            raise ProtocolViolation(f"an unparsable line ({raw[:80]!r})") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ProtocolViolation("a line that is not an event object")
        yield event


def _bounded_lines(fd: int, max_line: int, max_total: int) -> Iterator[bytes]:
    """Newline-terminated lines read from `fd` in chunks, never holding more than a line."""
    buf = bytearray()
    total = 0
    scanned = 0  # bytes of buf already known to hold no newline
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > max_total:
            raise ProtocolViolation(f"more than {max_total >> 20} MiB of output")
        buf += chunk
        pos = 0
        while (newline := buf.find(b"\n", max(pos, scanned))) >= 0:
            if newline - pos > max_line:
                raise ProtocolViolation(f"a line longer than {max_line >> 20} MiB")
            yield bytes(buf[pos:newline])
            pos = newline + 1
        del buf[:pos]
        scanned = len(buf)
        if len(buf) > max_line:
            raise ProtocolViolation(f"a line longer than {max_line >> 20} MiB")
