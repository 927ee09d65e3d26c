"""File formats: recognition from the bytes (never the name), and one registered record per
format (`registry.FormatSpec`) that every format list, filter and dispatch derives from.

Importing the package registers every format module below; the registration order is the
order `registry.detect` tries their sniffs in.
"""

from __future__ import annotations

from inspector.core.formats import builtin, gguf, onnx  # noqa: F401 (register their formats)
from inspector.core.formats.registry import (  # noqa: F401 (the package's interface)
    HEAD_BYTES,
    FormatSpec,
    all_specs,
    detect,
    dialog_filter,
    mime_types,
    register,
    spec_of,
    suffixes,
)
from inspector.core.formats.sniffing import (  # noqa: F401 (the package's interface)
    COMPRESSION_MAGIC,
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
