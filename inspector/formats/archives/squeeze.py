"""A decoded pickle stream read to its end, opcode by opcode, holding only what the walker
uses: each string or bytes argument longer than the walker keeps (`values.BIG`, past which it
keeps a length only) is cut to `KEEP` bytes, its length field rewritten, and the rest is
passed over in the stream, never held. The walker then reads the same opcodes, stack and
memo as the loader does, at the cost of decoding the stream once, as the loader does.

A protocol 0 string line (UNICODE, STRING) is cut the same way, an escape cut in two dropped
and a STRING's quote closed again. A FRAME that held cut bytes gets its length shortened by as
many, so framing reads as before. Bytes after the pickles that are no opcode (raw array data
after a joblib wrapper, a legacy tensor record) are kept as they are, within the held bound.
Any other line longer than `KEEP` (a decimal of a million digits) cannot be cut without
changing its parse: the squeeze then gives up and the caller reads the stream held.
"""

from __future__ import annotations

import pickletools
import struct
from dataclasses import dataclass

from inspector.formats.archives.decompress import Decoded, Stream
from inspector.formats.sniffing import NESTED_KINDS, PICKLE_FIRST_BYTES, sniff
from inspector.scan.pickles.values import BIG

KEEP = BIG + 1  # still past BIG: the walker keeps it as a length, as it would the whole
_FRAME = 0x95
_READ = 1 << 20

# each opcode's argument, from the standard library's own table (`pickletools.opcodes`)
_FIXED: dict[int, int] = {}  # opcode -> its argument's fixed size
_PREFIX: dict[int, tuple[int, str]] = {}  # opcode -> (prefix bytes, struct format)
_LINES: dict[int, int] = {}  # opcode -> newline-ended lines of argument
for _op in pickletools.opcodes:
    _code = ord(_op.code.encode("latin-1"))
    _arg = _op.arg
    if _arg is None:
        _FIXED[_code] = 0
    elif _arg.n >= 0:
        _FIXED[_code] = _arg.n
    elif _arg.n == pickletools.UP_TO_NEWLINE:
        _LINES[_code] = 2 if _arg.name == "stringnl_noescape_pair" else 1
    else:
        _PREFIX[_code] = {pickletools.TAKEN_FROM_ARGUMENT1: (1, "<B"),
                          pickletools.TAKEN_FROM_ARGUMENT4: (4, "<i"),
                          pickletools.TAKEN_FROM_ARGUMENT4U: (4, "<I"),
                          pickletools.TAKEN_FROM_ARGUMENT8U: (8, "<Q")}[_arg.n]


class CannotSqueeze(ValueError):
    """The stream holds an argument that cannot be cut without changing its parse."""


class HeldTooMuch(ValueError):
    """What the walker needs of the stream is more than the held bound."""


@dataclass
class Squeezed:
    """The pickle stream as the walker reads it, and how many bytes were passed over."""

    data: bytes
    passed_over: int


class _Reader:
    """Buffered reads over a `decompress.Stream`, with the input offset they reached."""

    def __init__(self, stream, head: bytes) -> None:
        self.stream, self.buf, self.pos, self.offset = stream, head, 0, 0

    def take(self, n: int) -> bytes:
        """The next `n` bytes (fewer only at the end)."""
        if self.pos + n > len(self.buf):
            self.buf = self.buf[self.pos:] + self.stream.read(max(n, _READ))
            self.pos = 0
        out = self.buf[self.pos:self.pos + n]
        self.pos += len(out)
        self.offset += len(out)
        return out

    def line(self, limit: int) -> bytes:
        """Bytes up to and including the next newline, at most `limit` of them."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0 or len(self.buf) - self.pos > limit:
                break
            more = self.stream.read(_READ)
            if not more:
                break
            self.buf = self.buf[self.pos:] + more
            self.pos = 0
        stop = end + 1 if end >= 0 else len(self.buf)
        if stop - self.pos > limit:
            raise CannotSqueeze(f"a protocol 0 line of more than {limit} bytes")
        return self.take(stop - self.pos)

    def long_line(self, keep: int) -> tuple[bytes, bool, int, int]:
        """The next line's first `keep` bytes (its newline not among them), whether it has a
        newline, how many bytes after them were passed over, and the offset they start at."""
        kept, skipped, cut_from = b"", 0, -1
        while True:
            end = self.buf.find(b"\n", self.pos)
            stop = end if end >= 0 else len(self.buf)
            chunk = self.buf[self.pos:stop]
            room = keep - len(kept)
            if cut_from < 0 and len(chunk) > room:
                cut_from = self.offset + room
            kept += chunk[:room]
            skipped += max(len(chunk) - room, 0)
            self.offset += len(chunk)
            self.pos = stop
            if end >= 0:
                self.take(1)
                return kept, True, skipped, cut_from
            more = self.stream.read(_READ)
            if not more:
                return kept, False, skipped, cut_from
            self.buf, self.pos = more, 0

    def skip(self, n: int) -> int:
        """Pass over the next `n` bytes without holding them."""
        here = min(n, len(self.buf) - self.pos)
        self.pos += here
        done = here + (self.stream.skip(n - here) if n > here else 0)
        self.offset += done
        return done


def squeeze(stream, head: bytes, hold: int) -> Squeezed:
    """The pickle stream `head` + the rest of `stream` as the walker reads it, at most `hold`
    bytes held (`HeldTooMuch` past it; `CannotSqueeze` where a line cannot be cut)."""
    r = _Reader(stream, head)
    out = bytearray()
    frame_at, frame_end = -1, 0  # where the open FRAME's length lies in `out`, its input end
    passed = 0
    while len(out) <= hold:
        first = r.take(1)
        if not first:
            return Squeezed(bytes(out), passed)
        op = first[0]
        if op in _FIXED:
            arg = r.take(_FIXED[op])
            out += first + arg
            if op == _FRAME and len(arg) == 8:
                frame_at, frame_end = len(out) - 8, r.offset + struct.unpack("<Q", arg)[0]
        elif op in _CUT_LINES:
            line, ended, skipped, cut_from = r.long_line(KEEP)
            if skipped:
                line = _CUT_LINES[op](line)
                passed += skipped
                _shorten_frame(out, frame_at, frame_end, cut_from, skipped)
            out += first + line + (b"\n" if ended else b"")
        elif op in _LINES:
            out += first
            for _ in range(_LINES[op]):
                out += r.line(KEEP)
        elif op in _PREFIX:
            size, fmt = _PREFIX[op]
            raw = r.take(size)
            out += first
            if len(raw) < size:
                out += raw
                continue
            (length,) = struct.unpack(fmt, raw)
            if length <= KEEP:
                out += raw + r.take(max(length, 0))
                continue
            out += struct.pack(fmt, KEEP) + r.take(KEEP)
            cut_from = r.offset
            skipped = r.skip(length - KEEP)
            passed += skipped
            _shorten_frame(out, frame_at, frame_end, cut_from, skipped)
        else:  # no opcode: raw bytes the loader reads as data; kept as they are
            out += first + r.take(hold + 1 - len(out) - 1)
    raise HeldTooMuch(f"more than {hold} bytes of pickle opcodes and kept arguments")


def _shorten_frame(out: bytearray, frame_at: int, frame_end: int, cut_from: int,
                   skipped: int) -> None:
    """Shorten the open FRAME (its length at `out[frame_at:]`, ending at input offset
    `frame_end`) by the bytes of [cut_from, cut_from + skipped) it held."""
    if frame_at >= 0 and cut_from < frame_end:
        inside = min(cut_from + skipped, frame_end) - cut_from
        (framed,) = struct.unpack_from("<Q", out, frame_at)
        struct.pack_into("<Q", out, frame_at, max(framed - inside, 0))


def _cut_unicode(head: bytes) -> bytes:
    """A raw-unicode-escape line (UNICODE) cut to `head`: an escape cut in two (`\\uXXXX`,
    `\\UXXXXXXXX`) is dropped, so the rest still decodes."""
    at = head.rfind(b"\\", max(len(head) - 10, 0))
    return head[:at] if at >= 0 else head


def _cut_string(head: bytes) -> bytes:
    """A quoted STRING line cut to `head`: an escape cut in two is dropped and the opening
    quote closes it again, so the rest still parses as the same kind of literal."""
    quote, body = head[:1], head[1:]
    at = body.rfind(b"\\", max(len(body) - 4, 0))
    if at >= 0:
        body = body[:at]
    if (len(body) - len(body.rstrip(b"\\"))) % 2:
        body = body[:-1]  # an odd run of backslashes would escape the closing quote
    return quote + body + quote


_CUT_LINES = {ord("V"): _cut_unicode, ord("S"): _cut_string}


def content(buf, kind: str, hold: int, cap: int, crc: bool = False) -> Decoded:
    """A compressed stream's content as the scan reads it: whole where it is at most `hold`
    bytes; past that, a pickle read to its end through `squeeze` (at most `cap` bytes decoded
    in all); anything else cut at `hold`. `Decoded.over_limit` says a bound, not the data, left
    part unread (and `incomplete` names the bound). An archive past `hold` is spilled to a
    temporary file (`Decoded.spilled`: `data` maps it). With `crc`, a squeezed `Decoded` carries the
    CRC-32 of every decoded byte."""
    stream = Stream(buf, kind, cap, crc)
    head = stream.read(min(PROBE, hold + 1))
    if len(head) == PROBE and _padded_early(head):
        try:
            return _squeezed(stream, head, hold, cap)
        except (CannotSqueeze, HeldTooMuch):
            stream, head = Stream(buf, kind, cap, crc), b""  # read again, held
    head += stream.read(hold + 1 - len(head))
    if len(head) <= hold:
        return Decoded(head, stream.members, stream.incomplete, stream.failed,
                       stream.over_cap, cap_reached=stream.over_cap)
    why = f"content larger than the {hold} bytes the scan holds of it"
    if sniff(head[:512], len(head)) in NESTED_KINDS:  # a zip's "PK" also opens a pickle
        return _spilled(stream, head)
    if head[0] == 0x80 or head[0] in PICKLE_FIRST_BYTES:
        try:
            return _squeezed(stream, head, hold, cap)
        except (CannotSqueeze, HeldTooMuch) as exc:
            why = f"{why} ({exc})"
    return Decoded(head[:hold], stream.members + 1, why, over_limit=True)


def _spilled(stream: Stream, head: bytes) -> Decoded:
    """An archive inside the stream (a `.tar.gz`, a compressed torch zip), too large to hold:
    its readers want the whole of it (a zip's directory is at its end), so the rest of the
    stream is written to an unlinked temporary file and handed out as a memory map of it."""
    import mmap
    import tempfile

    with tempfile.TemporaryFile(prefix="ckpt-inspector-") as fh:
        fh.write(head)
        while piece := stream.read(_READ):
            fh.write(piece)
        fh.flush()
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    incomplete = (f"content decodes past the scan's stream limit of {stream.cap} bytes"
                  if stream.over_cap else stream.incomplete)
    return Decoded(data, stream.members, incomplete, stream.failed, stream.over_cap,
                   stream.over_cap, spilled=True)


def _squeezed(stream: Stream, head: bytes, hold: int, cap: int) -> Decoded:
    """`squeeze` of the stream, as a `Decoded`."""
    squeezed = squeeze(stream, head, hold)
    incomplete = (f"content decodes past the scan's stream limit of {cap} bytes"
                  if stream.over_cap else stream.incomplete)
    return Decoded(squeezed.data, stream.members, incomplete, stream.failed, stream.over_cap,
                   stream.over_cap, squeezed.passed_over, stream.crc)


PROBE = 1 << 20  # decoded bytes read before deciding how to read the rest
_PROBE_OPS = 64


def _padded_early(probe: bytes) -> bool:
    """Whether one of the first opcodes of `probe` is an argument longer than `KEEP` (padding
    up front): then the stream is squeezed from here, not first held up to the decode budget.
    Only the cost depends on this guess, never what is read."""
    pos = 0
    for _ in range(_PROBE_OPS):
        if pos >= len(probe):
            return False
        op = probe[pos]
        pos += 1
        if op in _FIXED:
            pos += _FIXED[op]
        elif op in _PREFIX:
            size, fmt = _PREFIX[op]
            if pos + size > len(probe):
                return False
            (length,) = struct.unpack_from(fmt, probe, pos)
            if length > KEEP:
                return True
            pos += size + max(length, 0)
        elif op in _LINES:
            for _ in range(_LINES[op]):
                end = probe.find(b"\n", pos)
                if end < 0:
                    return False
                pos = end + 1
        else:
            return False
    return False
