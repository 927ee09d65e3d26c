"""Best-effort look inside 7-Zip archives without a 7-Zip library.

The standard library cannot list a 7z archive's members (that needs the archive header, itself
usually LZMA-compressed), but it can decode the packed streams: 7-Zip's default coders are
LZMA2 and LZMA. This module decodes the packed area back to back as LZMA2 streams, or as one
LZMA stream with 7-Zip's default properties, and returns the decoded bytes so the scanner can
look for pickles in them. Archives using other coders or encryption decode to nothing.
"""

from __future__ import annotations

import lzma
import struct

SIGNATURE_SIZE = 32
_DICT = 1 << 26
_LZMA1_DEFAULT = {"id": lzma.FILTER_LZMA1, "dict_size": _DICT, "lc": 3, "lp": 0, "pb": 2}


def decoded_streams(buf, max_bytes: int) -> list[bytes]:
    """Decoded packed streams of a 7z archive (at most `max_bytes` in all); [] if none decode."""
    if len(buf) < SIGNATURE_SIZE:
        return []
    (next_header_offset,) = struct.unpack_from("<Q", buf, 12)
    packed = bytes(buf[SIGNATURE_SIZE:SIGNATURE_SIZE + min(next_header_offset, len(buf))])
    out: list[bytes] = []
    pos = 0
    left = max_bytes
    while pos < len(packed) and len(out) < 64 and left > 0:
        dec = lzma.LZMADecompressor(lzma.FORMAT_RAW,
                                    filters=[{"id": lzma.FILTER_LZMA2, "dict_size": _DICT}])
        try:
            data = dec.decompress(packed[pos:], left)
        except lzma.LZMAError:
            break
        out.append(data)
        left -= len(data)
        if not dec.eof:
            break
        pos = len(packed) - len(dec.unused_data)
    if out:
        return out
    dec = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[_LZMA1_DEFAULT])
    try:
        return [dec.decompress(packed, max_bytes)]
    except lzma.LZMAError:
        return []


def pickle_starts(data: bytes, limit: int | None = 64) -> list[int]:
    """Offsets where a protocol 2-5 pickle could begin (files in a solid stream are joined)."""
    starts = []
    i = data.find(b"\x80")
    while i >= 0 and (limit is None or len(starts) < limit):
        if i + 1 < len(data) and 2 <= data[i + 1] <= 5:
            starts.append(i)
        i = data.find(b"\x80", i + 1)
    return starts
