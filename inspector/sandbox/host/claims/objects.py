"""How a worker's `objects` (a checkpoint's plain values) disagree with the file's own.

An inspect reply's `objects` are what `inspect` prints the training state, the hyper-parameters
and the resume checklist from (epoch, step, learning rates, optimizer ids). For a file whose
every tensor was located here (`expected.Expected`), the same readers that located them, which
run nothing of the input, also give every other leaf: a torch zip archive's or legacy stream's
plain values (`layout.torch_save.Layouts.plain`), a GGUF file's `KEY::ggml` records of its
block-quantized tensors, and nothing for safetensors. Each leaf's record is made here as the
worker makes it (`tensors.plain.leaves.describe_object`: key, Python type, bounded repr; the
host side imports nothing of the worker's, so `record` and `_quantized` repeat its few lines,
and `test_claims_objects` holds them to the worker's), and the worker's records must be exactly
those, each once, and no others.
"""

from __future__ import annotations

import mmap
from typing import TYPE_CHECKING, Any

from inspector.core.dtypes import GGUF_DENSE
from inspector.core.flatten import flatten, unique_keys
from inspector.core.termtext import escape
from inspector.formats.safetensors_header import metadata_objects
from inspector.layout.torchscript import CODE_ARCHIVES

if TYPE_CHECKING:
    from inspector.rawtensors.readers import RawFile

_SHOWN = 60
"""Characters of a value a problem quotes at most."""
REPR_LIMIT = 200
"""A record's repr is cut to this many characters (`tensors.plain.leaves.REPR_LIMIT`)."""
_QUANTIZED = "inspector.tensors.gguf_load.QuantizedTensor"


def record(key: str, value: object) -> dict:
    """The `object` record the worker makes of a plain leaf (`describe_object`)."""
    return _record(key, type(value).__module__ + "." + type(value).__qualname__, repr(value))


def _record(key: str, kind: str, text: str) -> dict:
    if len(text) > REPR_LIMIT:
        text = text[: REPR_LIMIT - 3] + "..."
    return {"key": key, "type": kind, "repr": text}


def file_objects(path: str, raw: RawFile) -> list[dict]:
    """The `object` records of the file at `path`, as `rawtensors.open_raw` read it (`raw`):
    a torch file's plain values walked with its tensors, in that same read; a GGUF header's
    quantized records; none for safetensors or a TorchScript or torch.export archive.
    NotCovered or OSError where they cannot be."""
    if raw.format == "gguf":
        return gguf_leaves(path)[1]
    if raw.format in CODE_ARCHIVES:
        return []  # the worker reads an archive's weights alone (`tensors.torchscript`)
    if raw.format not in ("safetensors", "pytorch-zip", "pytorch-legacy"):
        from inspector.layout.torch_save import NotCovered

        raise NotCovered(f"a {raw.format} file's non-tensor values are not read here")
    return [record(key, value) for key, value in raw.plain]


def diff_objects(path: str, raw: RawFile) -> list[dict]:
    """The plain-value records a diff reads from the file at `path` (`tensors.sources`): a
    safetensors header's `__metadata__` entries (`metadata_objects`), else `file_objects`."""
    if raw.format == "safetensors":
        return metadata_objects(raw.metadata)
    return file_objects(path, raw)


def gguf_leaves(path: str) -> tuple[list[str], list[dict]]:
    """A GGUF file's leaves as the worker's readers build them (`tensors.gguf_load`): its
    tensors' names, and beside each block-quantized tensor its `KEY::ggml` record."""
    from inspector.formats import gguf_header

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        header = gguf_header.read(mm, len(mm))
    tensor = object()
    leaves: dict[str, object] = {}
    for t in header.tensors:
        leaves[t.name] = tensor
        if GGUF_DENSE.get(t.type_name) is None:
            leaves[t.name + "::ggml"] = _quantized(t.type_name, t.shape, t.n_bytes,
                                                   t.data_offset)
    flat = unique_keys(flatten(leaves))
    return ([key for key, value in flat if value is tensor],
            [_record(key, _QUANTIZED, value) for key, value in flat if value is not tensor])


def _quantized(ggml_type: str, shape: tuple[int, ...], nbytes: int | None, offset: int) -> str:
    """`gguf_load.QuantizedTensor`'s repr."""
    size = "unknown size" if nbytes is None else f"{nbytes} bytes"
    return (f"{ggml_type} tensor, shape {list(shape)}, {size} at offset {offset}; no "
            f"statistics: {ggml_type} is a block-quantized ggml type whose values are not "
            "decoded here")


def object_problems(expected: list[dict], reported: Any) -> list[str]:
    """How the worker's object records disagree with the ones made here: each of the file's
    once and exactly as made here (in the file's order), then any the file does not hold."""
    if not isinstance(reported, list) or not all(isinstance(r, dict) for r in reported):
        return ["its non-tensor values are not a list of records"]
    by_key: dict[str, list[dict]] = {}
    for rec in reported:
        by_key.setdefault(str(rec.get("key")), []).append(rec)
    problems = []
    for want in expected:
        found = by_key.pop(want["key"], [])
        key = escape(want["key"])
        if len(found) != 1:
            problems.append(f"{key} reported {len(found)} times")
        elif found[0] != want:
            problems.append(f"{key} {_difference(want, found[0])}")
    problems += [f"{escape(key)} is no value of the file" for key in by_key]
    return problems


def _difference(want: dict, told: dict) -> str:
    """What a record says that the file's does not: its value (with the type where that
    differs), or fields of its own."""
    typed = want.get("type") != told.get("type")
    if not typed and want.get("repr") == told.get("repr"):
        return "is reported with fields of its own"
    return f"is {_shown(want, typed)}, reported as {_shown(told, typed)}"


def _shown(rec: dict, typed: bool) -> str:
    """A record's value (after its type, if `typed`), bounded and escaped."""
    text = f"{rec.get('type')} {rec.get('repr')}" if typed else str(rec.get("repr"))
    if len(text) > _SHOWN:
        text = text[:_SHOWN - 3] + "..."
    return escape(text)
