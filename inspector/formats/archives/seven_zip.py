"""7-Zip archives, looked into without a 7-Zip library.

The standard library cannot list a 7z archive's members (that needs the archive header, itself
usually LZMA-compressed), but it can decode the packed streams: 7-Zip's default coders are
LZMA2 and LZMA. The packed area is decoded back to back as LZMA2 streams, or as one LZMA stream
with 7-Zip's default properties (`decoded_streams`), and the pickles found in the decoded bytes
are scanned; the archive stays suspicious, since its members cannot be listed. Archives using
other coders or encryption decode to nothing.
"""

from __future__ import annotations

import lzma
import struct
from typing import TYPE_CHECKING

from inspector.core.termtext import agree, counted
from inspector.core.vocabulary import Format, Severity
from inspector.formats.pickle_stream import pickle_starts
from inspector.formats.registry import FormatSpec, register
from inspector.scan.pickles.walker import looks_like_pickle

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

SIGNATURE_SIZE = 32
_DICT = 1 << 26
_LZMA1_DEFAULT = {"id": lzma.FILTER_LZMA1, "dict_size": _DICT, "lc": 3, "lp": 0, "pb": 2}


def scan_7z(ctx: FormatContext, buf) -> None:
    """Scan pickles found in the decoded streams of a 7z archive; it stays at least suspicious,
    since its members cannot be listed."""
    ctx.result.format = Format.SEVEN_ZIP
    found = 0
    streams = decoded_streams(buf, ctx.decoded_limit())
    ctx.budget.decode(sum(map(len, streams)))
    for i, data in enumerate(streams):
        end = -1
        for start in pickle_starts(data):
            if start < end:
                continue  # inside a pickle already scanned
            scan = ctx.walk(data, start)
            if scan.stopped or looks_like_pickle(scan):
                # depth 1: not listed in `pickles`, whose offsets must point into the file
                ctx.add_pickle(scan, f"<7z stream {i}>", False, depth=1)
                found += 1
                end = scan.end
    ctx.find(Severity.SUSPICIOUS, "archive-partially-scanned",
             "7-Zip archive: members cannot be listed "
             f"without a 7-Zip library; {counted(found, 'pickle')} found in its decoded streams "
             f"{agree(found, 'was', 'were')} scanned; extract it and scan the files to be sure")


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


register(FormatSpec(Format.SEVEN_ZIP, "7-Zip archive", loaders=("py7zr",), scan=scan_7z,
                    kinds=("7z",)))
