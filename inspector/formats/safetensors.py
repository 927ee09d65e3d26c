"""safetensors files: an 8-byte header length, a JSON header and the tensor data, read by the
one header reader (`formats.safetensors_header`), whose problems become findings. Nothing in it
runs code; a pickle hidden in its bytes is found by the scan's other readings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.core.vocabulary import Format
from inspector.formats import safetensors_header
from inspector.formats.registry import FormatSpec, register

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext


def scan_safetensors(ctx: FormatContext, buf) -> None:
    """Check a safetensors header; one it cannot read raises (the scan's fallback readings)."""
    ctx.result.format = Format.SAFETENSORS
    header = safetensors_header.read_buffer(buf, len(buf))
    if header.error is not None:
        raise ValueError(header.error)
    for problem in header.problems:
        ctx.find(problem.severity, problem.code, problem.message)


register(FormatSpec(Format.SAFETENSORS, "safetensors tensor file", (".safetensors",),
                    "application/x-safetensors", loaders=("safetensors.safe_open",),
                    scan=scan_safetensors, kinds=("safetensors",), loadable=True,
                    pickled=False))
