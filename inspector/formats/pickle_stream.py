"""Pickle streams: one pickle or several back to back (`pickle.load`, joblib), and torch's
legacy stream (before 1.6: five pickles opened by its magic number, which `torch.load` reads).

The built-in chain names them `pytorch-legacy` (torch's magic number first), `pickle` (a PROTO
opcode), `pickle?` (a protocol 0/1 opening) or `unknown`: every one of them is read as a stream,
since the C unpickler takes any opcode first. `fold_pickles`, `carve`, `pickle_starts` and
`scan_stream` are the pickle reading the other format modules call for their members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.core.vocabulary import Format, Severity
from inspector.formats.registry import FormatSpec, register
from inspector.layout.stack_check import check_stack
from inspector.scan.budget import MAX_FORKS, MAX_LISTED_PICKLES
from inspector.scan.pickles.walker import PickleScan, imports_or_stops, looks_like_pickle

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

_WALKED_ONLY = 1 << 20  # a legacy data pickle larger than this is judged by the walk alone


LEGACY_MAGIC_LONG = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def scan_stream(ctx: FormatContext, buf, member: str | None, torch_format: bool,
                start: int = 0) -> bool:
    """Walk back-to-back pickles from `start`; False if the first is not a pickle.

    `torch_format`: the bytes are a whole file torch.load may read (legacy stream or not).
    """
    first = ctx.walk(buf, start)
    # a PROTO opcode first makes it a pickle to every unpickler, however broken the rest is
    if not (looks_like_pickle(first) or (first.protocol >= 2 and pickle_head(
            bytes(buf[start:start + 2])))):
        return False
    # The magic-number pickle, whatever protocol wrote it: a lone LONG1 of torch's magic.
    legacy = (torch_format and first.stopped and not first.globals and first.end <= 40
              and LEGACY_MAGIC_LONG in bytes(buf[:first.end]))
    # torch's legacy loader unpickles five pickles: magic, protocol, sys_info, data, keys.
    count = fold_pickles(ctx, buf, member, first, 5 if legacy else 0)
    if torch_format:
        ctx.result.format = Format.PYTORCH_LEGACY if legacy else Format.PICKLE
        if legacy and count < 5:
            ctx.block("legacy stream has fewer than five pickles")
        refusal = legacy_refusal(buf, ctx.result.pickles) if legacy else None
        if refusal is not None:
            ctx.find(Severity.SUSPICIOUS, "legacy-refused", f"torch.load refuses this legacy "
                     f"stream: {refusal}")
            ctx.block(f"torch.load refuses the legacy stream: {refusal}")
    return True


LEGACY_NUMBERS = (0x1950A86A20F9469CFC6C, 1001)  # torch's magic number, its protocol version


_NUMBER_OPCODES = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
                             "FLOAT", "BINFLOAT"})


def legacy_refusal(buf, pickles: list[dict]) -> str | None:
    """Why torch's legacy loader refuses a stream the walk reads without fault: its first two
    pickles are not exactly the magic number and protocol version torch compares them with, or
    one of the five it unpickles cannot finish (a stray STOP on an empty stack, a missing memo
    key: `check_stack` follows the stack without running anything, as `pickletools.dis` does).
    None if it loads."""
    import pickletools

    chain, pos = [], 0
    for p in pickles:
        if p["member"] is None and p["offset"] == pos and len(chain) < 5:
            chain.append(p)
            pos = p["end"]
    for i, p in enumerate(chain):
        if i == 3 and p["end"] - p["offset"] > _WALKED_ONLY:
            continue  # the data pickle itself: the walk read it
        data = bytes(buf[p["offset"]:p["end"]])
        try:
            check_stack(data)
        except ValueError as exc:
            if "stack not empty after STOP" not in str(exc):  # unpicklers ignore what is left
                return f"pickle {i + 1} cannot be unpickled ({exc})"
        if i < 2:
            values = [(op.name, arg) for op, arg, _ in pickletools.genops(data)
                      if op.name not in ("PROTO", "FRAME", "STOP")]
            name, value = values[0] if len(values) == 1 else ("", None)
            # torch compares with ==: 1001.0 passes, (1001,) and "1001" do not
            if name not in _NUMBER_OPCODES or value != LEGACY_NUMBERS[i]:
                what = ("magic number", "protocol version")[i]
                return f"its {what} pickle is not {LEGACY_NUMBERS[i]}"
    return None


def fold_pickles(ctx: FormatContext, buf, member: str | None, first: PickleScan,
                  torch_pickles: int, depth: int = 0) -> int:
    """Fold `first` and every pickle appended after it; torch unpickles the first
    `torch_pickles` of them. Returns how many pickles there were. A pickle whose FRAME runs
    past its STOP has a second next pickle, where a reader without peek() goes on: that chain
    is folded too (`depth` bounds how many such forks are followed)."""
    ctx.add_pickle(first, member, torch_pickles > 0)
    scan, count = first, 1
    while True:
        if (scan.stopped and scan.end != scan.next_start < len(buf) and depth < 8
                and ctx.forks < MAX_FORKS):
            ctx.forks += 1
            fork = ctx.walk(buf, scan.next_start, entry=False)
            if count < torch_pickles or looks_like_pickle(fork):
                fold_pickles(ctx, buf, member, fork, max(torch_pickles - count, 0), depth + 1)
        if not (scan.stopped and scan.end < len(buf)):
            break
        # past the listed ones, the rest is walked in one pass (a million tiny pickles)
        through = count >= MAX_LISTED_PICKLES
        nxt = ctx.walk(buf, scan.end, through, entry=False)
        if not (count < torch_pickles or looks_like_pickle(nxt)):
            break
        ctx.add_pickle(nxt, member, count < torch_pickles)
        scan, count = nxt, count + nxt.count
        if through:
            break
    if count > 1 and torch_pickles <= 1:
        # back-to-back pickles are plausible in a raw file, odd inside an archive member
        ctx.find(Severity.INFO if member is None else Severity.SUSPICIOUS, "multiple-pickles",
                 f"{count} pickles back to back; all were scanned", member, scan.start)
    return count


def pickle_head(head: bytes) -> bool:
    """Whether two bytes open a protocol 2-5 pickle (PROTO opcode and a known version)."""
    return len(head) == 2 and head[0] == 0x80 and head[1] <= 5


def pickle_starts(data: bytes, limit: int | None = 64) -> list[int]:
    """Offsets where a protocol 2-5 pickle could begin (a PROTO opcode of a known version): the
    first `limit` of them, all when None."""
    starts = []
    i = data.find(b"\x80")
    while i >= 0 and (limit is None or len(starts) < limit):
        if i + 1 < len(data) and 2 <= data[i + 1] <= 5:
            starts.append(i)
        i = data.find(b"\x80", i + 1)
    return starts


def carve(ctx: FormatContext, data: bytes, member: str, covered: int) -> None:
    """Scan every protocol 2+ pickle that starts after `covered` (pickles between raw data)."""
    for start in pickle_starts(data, limit=None):
        if start < covered:
            continue
        scan = ctx.walk(data, start, entry=False)  # no loader starts inside raw data
        if imports_or_stops(scan) and (scan.globals or scan.calls):
            ctx.add_pickle(scan, member, False, depth=1)
            covered = scan.end


def scan_also_as_pickle(ctx: FormatContext, buf) -> bool:
    """Files that are two formats at once: pickle.load (and torch.load's legacy path) unpickle
    the first bytes of anything that is not a zip, so a safetensors or tar file whose bytes
    also parse as a pickle (from any first opcode) that imports something is scanned that way
    too; the worst wins. Returns whether it was."""
    # not gated by the first byte: the C unpickler takes any opcode there
    first = ctx.walk(buf, 0)
    if not (imports_or_stops(first) and (first.globals or first.calls)):
        return False
    ctx.find(Severity.SUSPICIOUS, "polyglot", f"the {ctx.result.format} file is also a pickle that "
             "imports globals; pickle.load and torch.load would run it, so it was scanned too")
    fold_pickles(ctx, buf, None, first, 0)
    return True


def scan_raw(ctx: FormatContext, buf) -> None:
    """A file no other reader claims: a pickle stream (torch's legacy one included), or no
    model file at all."""
    if not scan_stream(ctx, buf, None, True):
        head = bytes(buf[:8]).hex(" ")
        ctx.result.error = ("not a model file: no known checkpoint or pickle format "
                            f"(starts with {head})")


PICKLE_LOADERS = ("pickle.load", "torch.load(weights_only=False)", "joblib.load")

register(FormatSpec(Format.PYTORCH_LEGACY, "PyTorch checkpoint, legacy stream (before 1.6)",
                    holds_code=True, loaders=("torch.load",),
                    scan=scan_raw, kinds=("pytorch-legacy",), loadable=True))
register(FormatSpec(Format.PICKLE, "Python pickle", (".pkl", ".pickle"), holds_code=True,
                    loaders=PICKLE_LOADERS, scan=scan_raw, kinds=("pickle", "pickle?", "unknown")))
