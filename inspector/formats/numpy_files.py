"""NumPy's files: a `.npy` array (its header read by NumPy's own reader, `sniffing.
parse_npy_header`; an object array's data is a pickle `numpy.load(allow_pickle=True)` runs)
and a `.npz`, a zip archive of `.npy` members that `zip_archive` reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.core.vocabulary import Format, Severity
from inspector.formats.pickle_stream import scan_stream
from inspector.formats.registry import FormatSpec, register
from inspector.formats.sniffing import parse_npy_header

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext


def scan_npy(ctx: FormatContext, buf, member: str | None) -> None:
    header, data_start = parse_npy_header(buf)
    if header.objects:
        ctx.find(Severity.SUSPICIOUS, "npy-object-array",
                 "object array: NumPy stores it as a pickle and "
                 "only loads it with allow_pickle=True", member)
        if not scan_stream(ctx, buf, member, False, data_start):
            ctx.find(Severity.SUSPICIOUS, "npy-object-array",
                     "object array data is not a readable pickle",
                     member)


def scan_member_npy(ctx: FormatContext, data: bytes, name: str) -> None:
    try:
        scan_npy(ctx, data, name)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        ctx.find(Severity.SUSPICIOUS, "npy-header", f"unreadable .npy header: {exc}", name)


def scan_npy_file(ctx: FormatContext, buf) -> None:
    """A whole `.npy` file."""
    ctx.result.format = Format.NPY
    scan_npy(ctx, buf, None)


NUMPY_LOADERS = ("numpy.load(allow_pickle=True)",)
register(FormatSpec(Format.NPY, "NumPy array", (".npy",), holds_code=True, loaders=NUMPY_LOADERS,
                    scan=scan_npy_file, kinds=("npy",)))
register(FormatSpec(Format.NPZ, "NumPy archive", (".npz",), holds_code=True,
                    loaders=NUMPY_LOADERS))
