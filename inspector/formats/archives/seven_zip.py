"""7-Zip archives, looked into without a 7-Zip library
(`formats.archives.sevenzip`): members cannot be
listed, so the pickles found in its decoded LZMA streams are scanned and it stays suspicious."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.core.vocabulary import Format, Severity
from inspector.formats.registry import FormatSpec, register
from inspector.scan.pickles.walker import looks_like_pickle

if TYPE_CHECKING:
    from inspector.scan.context import ScanContext


def scan_7z(ctx: ScanContext, buf) -> None:
    """Scan pickles found in the decoded streams of a 7z archive; it stays at least suspicious,
    since its members cannot be listed."""
    from inspector.formats.archives import sevenzip

    ctx.result.format = Format.SEVEN_ZIP
    found = 0
    streams = sevenzip.decoded_streams(buf, ctx.decoded_limit())
    ctx.budget.decode(sum(map(len, streams)))
    for i, data in enumerate(streams):
        end = -1
        for start in sevenzip.pickle_starts(data):
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
             f"without a 7-Zip library; {found} pickle(s) found in its decoded streams were "
             "scanned; extract it and scan the files to be sure")


register(FormatSpec(Format.SEVEN_ZIP, "7-Zip archive", loaders=("py7zr",), scan=scan_7z,
                    kinds=("7z",)))
