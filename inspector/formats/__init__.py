"""File formats: recognition from the bytes (never the name), and one registered record per
format (`registry.FormatSpec`) that every format list, filter and dispatch derives from.

Importing the package registers every format module below; the registration order is the
order `registry.detect` tries their sniffs in. A format's `scan(ctx, buf)` reports through
`context.FormatContext`, the interface the scan implements: format modules may import `core`
and the scan's lower modules (`scan.result`, `scan.budget`, `scan.pickles.walker`), never its
engine or context.
"""

from __future__ import annotations

# the registration order: torch's formats first in every list
# isort: off
from inspector.formats import torch_zip, pickle_stream  # noqa: F401 (each registers its formats)
from inspector.formats.archives import zip_archive  # noqa: F401 (each registers its formats)
from inspector.formats import numpy_files  # noqa: F401 (each registers its formats)
from inspector.formats.archives import ( # noqa: F401 (each registers its formats)
    seven_zip,
    compressed,
    tar,
)
from inspector.formats import safetensors, gguf, onnx  # noqa: F401 (each registers its formats)
# isort: on
from inspector.formats.registry import (  # noqa: F401 (the package's interface)
    HEAD_BYTES,
    FormatAdvice,
    FormatSpec,
    all_specs,
    by_kind,
    detect,
    dialog_filter,
    holding_code,
    loadable,
    mime_types,
    read_without_pickle,
    register,
    spec_of,
    suffixes,
)
from inspector.formats.sniffing import (  # noqa: F401 (the package's interface)
    COMPRESSION_MAGIC,
    NESTED_KINDS,
    NPY_MAGIC,
    OPCODE_BYTES,
    PICKLE_FIRST_BYTES,
    SEVEN_ZIP_MAGIC,
    TORCH_MAGIC_PICKLE,
    NpyHeader,
    is_tar,
    npy_has_objects,
    parse_npy_header,
    sniff,
    zip_kind,
)
