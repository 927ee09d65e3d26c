"""Content of a compressed file as the loaders that accept it read it: every member of a
multi-member gzip, bz2, xz or raw zlib stream (joblib writes and reads those), LZMA-alone, and
lz4 / zstd frames where their libraries are installed. Each header is read by the real
reader's own rules: a gzip header by Python's `gzip` (which ignores the reserved flag bits
zlib refuses), zlib with any window size `zlib.decompress` takes, LZMA-alone with any
properties and dictionary size `lzma.FORMAT_ALONE` takes. Output is bounded; what could not
be read is said, never dropped silently."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

_CHUNK = 1 << 20
# a member's first input chunk, doubled up to _CHUNK: the decoder copies the input left after
# a member ends, so a file of many tiny members must not hand each one a whole _CHUNK
_FIRST_CHUNK = 4096
_TRAILER = {"gzip": 8}  # CRC-32 and size after each gzip member's deflate data
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

        return zstandard.ZstdDecompressor().decompressobj(), 0
    except ImportError as exc:
        raise CodecMissing(f"{kind}: the {exc.name} package is not installed") from None


def _pending(d) -> bytes | None:
    """Input a decoder holds back because the output bound stopped it (zlib), else None."""
    tail = getattr(d, "unconsumed_tail", None)
    return tail if tail else None


def _errors() -> tuple[type[BaseException], ...]:
    import gzip
    import lzma

    return (zlib.error, lzma.LZMAError, gzip.BadGzipFile, OSError, EOFError, ValueError,
            RuntimeError)


def accepts(head: bytes, kind: str) -> bool:
    """Whether `kind`'s real decoder reads `head` as the start of a stream: it gives output
    and raises nothing (for the kinds of `TRIED_KINDS`, whose magic numbers are weak)."""
    try:
        d, skip = _decoder(kind, memoryview(head))
        return bool(d.decompress(head[skip:], 64))
    except _errors():
        return False


def _skip_zeros(view: memoryview, pos: int) -> int:
    """The first offset at or after `pos` that is not zero padding."""
    while pos < len(view) and not view[pos]:
        block = bytes(view[pos:pos + 65536])
        rest = block.lstrip(b"\x00")
        pos += len(block) - len(rest)
        if rest:
            break
    return pos


def decompress(buf, kind: str, limit: int) -> Decoded:
    """Every member of a `kind` stream in `buf`, at most `limit` bytes of output."""
    out = bytearray()
    members = 0
    view = memoryview(buf)
    n = len(view)
    step = _FIRST_CHUNK
    try:
        d, pos = _decoder(kind, view)
        while True:
            if pos >= n and not _pending(d):
                break
            chunk = _pending(d) or view[pos:pos + step]
            if not _pending(d):
                pos += len(chunk)
                step = min(step * 2, _CHUNK)
            out += d.decompress(chunk, limit + 1 - len(out))
            if len(out) > limit:
                del out[limit:]
                return Decoded(bytes(out), members + 1, f"content larger than {limit} bytes")
            if getattr(d, "eof", False):
                members += 1
                # the next member starts after this one's trailer; gzip readers skip zero
                # padding between members and read on after it (offsets, never a copy: a
                # file of a million tiny members must not copy its rest a million times)
                pos = pos - len(d.unused_data) + _TRAILER.get(kind, 0)
                if pos > n:
                    return Decoded(bytes(out), members, f"{kind} trailer cut short (truncated)")
                pos = _skip_zeros(view, pos)
                if pos >= n:
                    return Decoded(bytes(out), members)
                d, skip = _decoder(kind, view[pos:])
                pos += skip
                step = _FIRST_CHUNK
        if not d.eof:
            return Decoded(bytes(out), members + 1, f"{kind} stream ends early (truncated)")
    except _errors() as exc:
        return Decoded(bytes(out), members + 1, f"{kind} data unreadable after {len(out)} "
                                                f"bytes: {exc}", failed=True)
    return Decoded(bytes(out), members)


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

    from inspector.formats.archives.map_io import MapIO

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
