"""Content of a compressed file as the loaders that accept it read it: every member of a
multi-member gzip, bz2, xz or raw zlib stream (joblib writes and reads those), LZMA-alone, and
lz4 / zstd frames where their libraries are installed. Output is bounded; what could not be
read is said, never dropped silently."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

_CHUNK = 1 << 20


class CodecMissing(Exception):
    """The library for this compression is not installed."""


@dataclass
class Decoded:
    """The decoded bytes, how many members they came from, and why they are incomplete."""

    data: bytes
    members: int
    incomplete: str | None = None


def _decoder(kind: str):
    import bz2
    import lzma

    if kind in ("gzip", "zlib"):
        return zlib.decompressobj(31 if kind == "gzip" else 15)
    if kind == "bz2":
        return bz2.BZ2Decompressor()
    if kind in ("xz", "lzma"):
        return lzma.LZMADecompressor(lzma.FORMAT_XZ if kind == "xz" else lzma.FORMAT_ALONE)
    try:
        if kind == "lz4":
            import lz4.frame  # type: ignore[import-not-found]

            return lz4.frame.LZ4FrameDecompressor()
        import zstandard  # type: ignore[import-not-found]

        return zstandard.ZstdDecompressor().decompressobj()
    except ImportError as exc:
        raise CodecMissing(f"{kind}: the {exc.name} package is not installed") from None


def _pending(d) -> bytes | None:
    """Input a decoder holds back because the output bound stopped it (zlib), else None."""
    tail = getattr(d, "unconsumed_tail", None)
    return tail if tail else None


def decompress(buf, kind: str, limit: int) -> Decoded:
    """Every member of a `kind` stream in `buf`, at most `limit` bytes of output."""
    out = bytearray()
    members = 0
    view = memoryview(buf)
    pos, n = 0, len(view)
    d = _decoder(kind)
    errors = (zlib.error, OSError, EOFError, ValueError, RuntimeError)
    try:
        while True:
            if pos >= n and not _pending(d):
                break
            chunk = _pending(d) or view[pos:pos + _CHUNK]
            if not _pending(d):
                pos += len(chunk)
            out += d.decompress(chunk, limit + 1 - len(out))
            if len(out) > limit:
                del out[limit:]
                return Decoded(bytes(out), members + 1, f"content larger than {limit} bytes")
            if getattr(d, "eof", False):
                members += 1
                # gzip readers skip zero padding between members and read on after it
                rest = (bytes(d.unused_data) + bytes(view[pos:])).lstrip(b"\x00")
                if not rest:
                    return Decoded(bytes(out), members)
                view = memoryview(rest)
                pos, n = 0, len(view)
                d = _decoder(kind)
        if not d.eof:
            return Decoded(bytes(out), members + 1, f"{kind} stream ends early (truncated)")
    except errors as exc:
        return Decoded(bytes(out), members + 1, f"{kind} data unreadable after {len(out)} "
                                                f"bytes: {exc}")
    return Decoded(bytes(out), members)
