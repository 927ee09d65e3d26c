"""Content of a compressed file as the loaders that accept it read it: every member of a
multi-member gzip, bz2, xz or raw zlib stream (joblib writes and reads those), LZMA-alone, and
lz4 / zstd frames where their libraries are installed. Each header is read by the real
reader's own rules: a gzip header by Python's `gzip` (which ignores the reserved flag bits
zlib refuses), zlib with any window size `zlib.decompress` takes, LZMA-alone with any
properties and dictionary size `lzma.FORMAT_ALONE` takes. Output is bounded; what could not
be read is said, never dropped silently."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

_CHUNK = 1 << 20
# a member's first input chunk, doubled up to _CHUNK: the decoder copies the input left after
# a member ends, so a file of many tiny members must not hand each one a whole _CHUNK
_FIRST_CHUNK = 4096
_TRAILER = {"gzip": 8}  # CRC-32 and size after each gzip member's deflate data
_ONE_MEMBER = frozenset({"deflate"})  # a zip member: readers stop at its stream's end
# kinds whose magic is weak (two bytes or a checksum): the decoder itself says if it reads them
TRIED_KINDS = ("zlib", "lzma")


class CodecMissing(Exception):
    """The library for this compression is not installed."""


@dataclass
class Decoded:
    """The decoded bytes, how many members they came from, and why they are incomplete."""

    data: bytes
    members: int
    incomplete: str | None = None
    failed: bool = False  # a data error cut the stream (not its end, not the bound)
    over_limit: bool = False  # `incomplete` because a bound stopped it, not the data
    cap_reached: bool = False  # the bound was the file's stream limit (`budget.MAX_STREAMED`)
    passed_over: int = 0  # decoded bytes read through but not held (`squeeze`)
    crc: int | None = None  # CRC-32 of every decoded byte, where some were passed over
    spilled: bool = False  # `data` is a memory map of a temporary file, not held in memory


class _Header:
    """A file object over a view that Python's gzip header parser reads from."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.pos = view, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.view) if n < 0 else self.pos + n
        out = bytes(self.view[self.pos:end])
        self.pos += len(out)
        return out


def _decoder(kind: str, view: memoryview):
    """A decoder for the member that starts `view`, and how many header bytes it skips."""
    import bz2
    import lzma

    if kind == "gzip":
        import gzip

        # Python's gzip reads the header itself (reserved flag bits and FHCRC ignored), then
        # inflates raw deflate data: what gzip.open and gzip.decompress accept
        header = _Header(view)
        if gzip._read_gzip_header(header) is None:
            raise EOFError("no gzip header")
        return zlib.decompressobj(-zlib.MAX_WBITS), header.pos
    if kind == "zlib":
        return zlib.decompressobj(zlib.MAX_WBITS), 0  # every window size up to 32 KiB
    if kind == "deflate":  # a zip member's raw deflate data
        return zlib.decompressobj(-zlib.MAX_WBITS), 0
    if kind == "bz2":
        return bz2.BZ2Decompressor(), 0
    if kind in ("xz", "lzma"):
        # FORMAT_ALONE takes any dictionary size; FORMAT_AUTO (lzma.open) only some
        return lzma.LZMADecompressor(lzma.FORMAT_XZ if kind == "xz" else lzma.FORMAT_ALONE), 0
    try:
        if kind == "lz4":
            import lz4.frame  # type: ignore[import-not-found]

            return lz4.frame.LZ4FrameDecompressor(), 0
        import zstandard  # type: ignore[import-not-found]

        # its first frame's decoder (`accepts`); a whole stream is read by `_zstd_pieces`
        return zstandard.ZstdDecompressor().decompressobj(), 0
    except ImportError as exc:
        raise CodecMissing(f"{kind}: the {exc.name} package is not installed") from None


def _pending(d) -> bytes | None:
    """Input a decoder holds back because the output bound stopped it (zlib), else None."""
    tail = getattr(d, "unconsumed_tail", None)
    return tail if tail else None


@functools.cache  # the installed codecs do not change while the process runs
def _errors() -> tuple[type[BaseException], ...]:
    import gzip
    import lzma

    errors: tuple[type[BaseException], ...] = (
        zlib.error, lzma.LZMAError, gzip.BadGzipFile, OSError, EOFError, ValueError,
        RuntimeError)  # lz4's decoder raises RuntimeError
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        return errors
    return (*errors, zstandard.ZstdError)


def accepts(head: bytes, kind: str) -> bool:
    """Whether `kind`'s real decoder reads `head` as the start of a stream: it gives output
    and raises nothing (for the kinds of `TRIED_KINDS`, whose magic numbers are weak)."""
    if kind == "zlib" and not _zlib_header(head):
        return False  # what zlib's own header check refuses, without building a decoder
    try:
        d, skip = _decoder(kind, memoryview(head))
        return bool(d.decompress(head[skip:], 64))
    except _errors():
        return False


def _zlib_header(head: bytes) -> bool:
    """Whether `head` opens with a header zlib's inflate takes at any window size (RFC 1950:
    method 8, a window of at most 32 KiB, the two bytes a multiple of 31), as it checks them
    before it reads any data; every file is asked, and most fail here."""
    return (len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7
            and not (head[0] << 8 | head[1]) % 31)


def _skip_zeros(view: memoryview, pos: int) -> int:
    """The first offset at or after `pos` that is not zero padding."""
    while pos < len(view) and not view[pos]:
        block = bytes(view[pos:pos + 65536])
        rest = block.lstrip(b"\x00")
        pos += len(block) - len(rest)
        if rest:
            break
    return pos


PIECE = 1 << 20  # decoded bytes one decoder call may produce
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # ... 0x184D2A5F: a frame of data the decoder passes over


def _zstd_frame_end(view: memoryview, pos: int) -> tuple[int, bool]:
    """Where the zstd frame at `pos` ends and whether it holds content (not a skippable
    frame), read from its header and block headers (RFC 8878), nothing decoded; the end lies
    past the buffer where the frame is cut short. ValueError where no frame starts there."""
    n = len(view)
    if pos + 4 > n:
        raise ValueError("zstd frame header cut short")
    magic = int.from_bytes(view[pos:pos + 4], "little")
    if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
        if pos + 8 > n:
            return n + 1, False
        return pos + 8 + int.from_bytes(view[pos + 4:pos + 8], "little"), False
    if magic != _ZSTD_MAGIC:
        raise ValueError(f"no zstd frame at offset {pos}")
    if pos + 5 > n:
        return n + 1, True
    fhd = view[pos + 4]
    single = fhd >> 5 & 1
    fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    at = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
    while True:
        if at + 3 > n:
            return n + 1, True
        block = int.from_bytes(view[at:at + 3], "little")
        kind, size = block >> 1 & 3, block >> 3
        at += 3 + (1 if kind == 1 else size)
        if block & 1:
            return at + (4 if fhd >> 2 & 1 else 0), True


def _zstd_pieces(stream: Stream, view: memoryview):
    """Every zstd frame's content, frame by frame (its end read from its block headers, so a
    cut frame is known as cut: zstandard's readers end it silently), in pieces of at most
    PIECE bytes (`read_to_iter` bounds its output; its decompressobj would hand a bomb's whole
    content back from one call)."""
    import zstandard  # type: ignore[import-not-found]

    from inspector.core.map_io import MapIO

    pos, n = 0, len(view)
    while pos < n:
        end, content = _zstd_frame_end(view, pos)
        if content:
            with MapIO(view[pos:min(end, n)]) as raw:
                yield from zstandard.ZstdDecompressor().read_to_iter(
                    raw, read_size=_CHUNK, write_size=PIECE)
        stream.members += content
        if end > n:
            stream.incomplete = "zstd stream ends early (truncated)"
            return
        pos = end


def _more_output(d) -> bool:
    """Whether the decoder holds input it has not turned into output yet (the output bound
    stopped it): zlib keeps it as `unconsumed_tail`, bz2, lzma and lz4 say `needs_input`."""
    return bool(_pending(d)) or (not getattr(d, "needs_input", True) and not d.eof)


class Stream:
    """Every member of a `kind` stream in `buf`, decoded piece by piece: `read(n)` hands out
    the next bytes and `skip(n)` passes over them, so a reader of the whole content holds only
    what it keeps. `produced` counts decoded bytes; `members`, `incomplete` and `failed` say
    how the stream ended (once `read` or `skip` found its end). Past `cap` decoded bytes it
    ends, `over_cap` set. With `crc`, `crc` is the CRC-32 of every byte decoded."""

    def __init__(self, buf, kind: str, cap: int = 1 << 62, crc: bool = False) -> None:
        self.kind, self.produced, self.members, self.cap = kind, 0, 0, cap
        self.crc: int | None = 0 if crc else None  # CRC-32 of every decoded byte, if asked
        self.incomplete: str | None = None
        self.failed = self.over_cap = False
        self._pieces = self._decode(memoryview(buf))
        self._left = memoryview(b"")
        self.ended = False

    def _decode(self, view: memoryview):
        kind, n = self.kind, len(view)
        if kind == "zstd":
            _decoder(kind, view)  # CodecMissing without the library
            yield from _zstd_pieces(self, view)
            return
        d, pos = _decoder(kind, view)
        step = _FIRST_CHUNK
        while True:
            if _more_output(d):
                chunk = _pending(d) or b""
            elif pos < n:
                chunk = view[pos:pos + step]
                pos += len(chunk)
                step = min(step * 2, _CHUNK)
            else:
                break
            out = d.decompress(chunk, PIECE)
            if out:
                yield out
            if d.eof:
                self.members += 1
                if kind in _ONE_MEMBER:
                    return
                # the next member starts after this one's trailer; gzip readers skip zero
                # padding between members and read on after it (offsets, never a copy: a
                # file of a million tiny members must not copy its rest a million times)
                pos = pos - len(d.unused_data or b"") + _TRAILER.get(kind, 0)
                if pos > n:
                    self.incomplete = f"{kind} trailer cut short (truncated)"
                    return
                pos = _skip_zeros(view, pos)
                if pos >= n:
                    return
                d, skip = _decoder(kind, view[pos:])
                pos += skip
                step = _FIRST_CHUNK
        self.members += 1
        self.incomplete = f"{kind} stream ends early (truncated)"

    def _next(self) -> memoryview:
        """The next decoded piece (empty at the end); a data error ends the stream."""
        if self.ended:
            return memoryview(b"")
        try:
            piece = next(self._pieces, None)
        except _errors() as exc:
            self.members += 1
            self.failed = True
            self.incomplete = f"{self.kind} data unreadable after {self.produced} bytes: {exc}"
            piece = None
        if piece is not None and self.produced >= self.cap:
            self.over_cap = True
            self.incomplete = f"content decodes past {self.cap} bytes"
            piece = None
        if piece is None:
            self.ended = True
            return memoryview(b"")
        self.produced += len(piece)
        if self.crc is not None:
            self.crc = zlib.crc32(piece, self.crc)
        return memoryview(piece)

    def read(self, n: int) -> bytes:
        """The next `n` decoded bytes (fewer only at the stream's end)."""
        parts = [self._left[:n]]
        got = len(parts[0])
        self._left = self._left[got:]
        while got < n:
            piece = self._next()
            if not piece:
                break
            want = n - got
            parts.append(piece[:want])
            got += len(parts[-1])
            self._left = piece[want:]
        return b"".join(parts)

    def skip(self, n: int) -> int:
        """Pass over the next `n` decoded bytes without keeping them; how many there were."""
        done = min(n, len(self._left))
        self._left = self._left[done:]
        while done < n:
            piece = self._next()
            if not piece:
                break
            take = min(n - done, len(piece))
            done += take
            self._left = piece[take:]
        return done

    def at_end(self) -> bool:
        """Whether every decoded byte has been handed out."""
        if not self._left:
            self._left = self._next()
        return not self._left


def decompress(buf, kind: str, limit: int) -> Decoded:
    """Every member of a `kind` stream in `buf`, at most `limit` bytes of output."""
    stream = Stream(buf, kind)
    data = stream.read(limit + 1)
    if len(data) > limit:
        return Decoded(data[:limit], stream.members + 1, f"content larger than {limit} bytes",
                       over_limit=True)
    return Decoded(data, stream.members, stream.incomplete, stream.failed)


HAND_OUT_PIECE = 1 << 16


def handed_out(buf, kind: str, limit: int) -> bytes:
    """What the stdlib's own reader of a `kind` stream hands a loader reading it from the
    start (joblib, `pickle.load(gzip.open(...))`) before a data error stops it, at most
    `limit` bytes: the file objects of gzip, bz2 and lzma (any format it takes) in pieces of
    64 KiB, the piece the error falls in lost; `zlib.decompress`'s whole output or nothing.
    Where the stdlib has no reader for `kind`, nothing."""
    import bz2
    import gzip
    import lzma

    from inspector.core.map_io import MapIO

    if kind == "zlib":
        try:
            return zlib.decompressobj().decompress(buf, limit)
        except zlib.error:
            return b""
    opener = {"gzip": lambda f: gzip.GzipFile(fileobj=f), "bz2": bz2.BZ2File,
              "xz": lzma.LZMAFile, "lzma": lzma.LZMAFile}.get(kind)
    if opener is None:
        return b""
    pieces: list[bytes] = []
    size = 0
    with MapIO(buf) as raw:
        try:
            with opener(raw) as fh:
                while size < limit and (piece := fh.read1(HAND_OUT_PIECE)):
                    pieces.append(piece)
                    size += len(piece)
        except _errors():
            pass
    return b"".join(pieces)[:limit]
