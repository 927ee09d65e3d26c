"""A checkpoint's tensors as raw row-major bytes, for digests and diffs; runs in the worker.

Pickle-based checkpoints are loaded with weights_only=True (`load.load_checkpoint`) and read
through `stats.byte_chunks`. A safetensors file needs no deserialisation at all: its header
(read and checked by `formats.safetensors_header`) gives each tensor's byte range, already
contiguous, row-major and little-endian, so those ranges are read straight from a read-only
mapping and digests of safetensors files never import torch (seconds saved per verify). A
plain `torch.save` zip archive that `layout.torch_save` describes completely, and the weights
of a TorchScript or torch.export archive (`layout.torchscript`), are read the same way,
from their stored records (`rawtensors.readers`, which the user's process uses to check the
worker); views that are not one row-major run are gathered with numpy strides. Anything that
layout does not cover is loaded with torch; its quantized and sparse tensors are read as the
parts `tensors.encoded` names (`KEY::int_repr`, `KEY::indices`, ...) plus `KEY::spec`, the
rebuild spec as bytes, which a converted file's `__metadata__` gives too. Aliases are read
only where a converter listed them (`safetensors_header.recorded_aliases`).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from inspector.core.dtypes import canonical_dtype
from inspector.core.errors import CodedError
from inspector.core.progress import CancelToken, check
from inspector.formats import HEAD_BYTES, detect, sniff
from inspector.formats.safetensors_header import (
    metadata_objects,
    read_header,
    recorded_aliases,
    recorded_specs,
    spec_bytes,
)
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.layout.torch_save import NotCovered, describe_archive
from inspector.layout.torchscript import code_archive_kind, describe_code_archive
from inspector.rawtensors.readers import range_reader, strided_reader


class SourceError(CodedError):
    """A checkpoint whose tensors cannot be read; `code` and `message` reach the client."""


@dataclass
class TensorSource:
    """One tensor: its name, dtype, shape and a way to read its bytes in chunks."""

    key: str
    dtype: str
    shape: list[int]
    read: Callable[[], Iterator[Any]] | None
    """Yields buffers of raw bytes; None for tensors without dense CPU data (sparse, meta)."""
    alias_of: str | None = None
    note: str | None = None
    offset: int | None = None
    """Where the tensor's bytes start in the file, when they lie there contiguously."""
    file: str | None = None
    """The file of a folder (a DCP data file) that `offset` is in; None for the file itself."""
    storage: Any = None
    """Equal values within one file: sources reading the same bytes (tied weights)."""

    def record(self) -> dict[str, Any]:
        """Key, dtype and shape as the contracts spell them."""
        rec: dict[str, Any] = {"key": self.key, "dtype": self.dtype, "shape": self.shape}
        if self.alias_of is not None:
            rec["alias_of"] = self.alias_of
        if self.note is not None:
            rec["note"] = self.note
        return rec


@dataclass
class Checkpoint:
    """What one file holds: its format, tensors, and non-tensor leaves (key, type, repr)."""

    format: str
    tensors: list[TensorSource]
    objects: list[dict[str, Any]] = field(default_factory=list)


def open_checkpoint(
    path: str, allow_globals: list[str] | tuple[str, ...] = (), maps_fd: int | None = None
) -> Checkpoint:
    """Open a checkpoint of any supported format for reading its tensors' bytes."""
    if os.path.isdir(path):  # a torch.distributed.checkpoint folder, read whole by `tensors.dcp`
        from inspector.tensors.dcp import open_folder

        state, locate = open_folder(path, allow_globals)
        return _open_loaded(path, "dcp", state, maps_fd, locate)
    with open(path, "rb") as fh:
        head, size = fh.read(HEAD_BYTES), os.fstat(fh.fileno()).st_size
    spec = detect(head, size)
    if spec is not None and spec.tensors is not None:
        from inspector.tensors.by_format import module_reader

        return _open_loaded(path, spec.format, module_reader(spec.format)(path), maps_fd)
    kind = sniff(head, size)
    if kind == "safetensors":
        return _open_safetensors(path)
    if kind == "zip":
        ckpt = _open_layout(path)
        if ckpt is not None:
            return ckpt
    return _open_pickled(path, "pytorch-zip" if kind == "zip" else kind, allow_globals, maps_fd)


def _open_pickled(path: str, fmt: str, allow_globals: Any, maps_fd: int | None) -> Checkpoint:
    from inspector.tensors.load import load_checkpoint

    return _open_loaded(path, fmt, load_checkpoint(path, allow_globals), maps_fd)


def _open_loaded(path: str, fmt: str, loaded: Any, maps_fd: int | None,
                 locate: Callable[[Any], tuple[str, int] | None] | None = None) -> Checkpoint:
    """A loaded checkpoint's tensors; `locate(t)` gives (file, offset) of one that lies
    contiguously in a file of the folder at `path`."""
    import torch

    from inspector.tensors.encoded import expand
    from inspector.tensors.load import split_leaves
    from inspector.tensors.mapped import PageReleaser
    from inspector.tensors.plain.leaves import describe_object
    from inspector.tensors.records import dtype_name, is_dense
    from inspector.tensors.stats import byte_chunks

    # One thread here; the caller hashes the file on the other core at the same time.
    torch.set_num_threads(1)
    tensors, objects = split_leaves(loaded)
    # Quantized and sparse tensors as the parts `convert` writes, so they compare one for one.
    tensors, specs = expand(tensors)
    release = PageReleaser(maps_fd, path)
    release.refresh()
    sources = []
    for key, t in tensors:
        readable = is_dense(t) and t.device.type != "meta"
        where = locate(t) if locate is not None and readable and t.is_contiguous() else None
        sources.append(
            TensorSource(
                key=key,
                dtype=dtype_name(t.dtype),
                shape=list(t.shape),
                read=(lambda t=t: byte_chunks(t, release)) if readable else None,
                note=None if readable else f"no dense data ({t.layout}, {t.device.type})",
                storage=(t.data_ptr(), tuple(t.stride())) if readable else None,
                offset=where[1] if where else None,
                file=where[0] if where else None,
            )
        )
    sources += _spec_sources(specs, {s.key for s in sources})
    return Checkpoint(fmt, sources, [describe_object(k, v) for k, v in objects])


def _open_layout(path: str) -> Checkpoint | None:
    """A torch zip archive read through its static layout (no torch), or None to load it.
    TorchScript and torch.export archives are only ever read this way (their code never runs;
    `layout.torchscript`): one it does not cover is a SourceError."""
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    fmt = code_archive_kind(mm)
    try:
        layouts = describe_archive(mm) if fmt is None else describe_code_archive(mm, fmt).tensors
    except NotCovered as exc:
        mm.close()
        if fmt is None:
            return None
        raise SourceError("not_covered", f"{path}: {fmt} archive not read: {exc}") from None
    view = memoryview(mm)
    sources = [
        TensorSource(
            key=t.key,
            dtype=t.dtype,
            shape=list(t.shape),
            read=range_reader(view, t.data_offset, t.data_offset + t.numel * t.itemsize)
            if t.contiguous
            else strided_reader(view, t),
            offset=t.data_offset if t.contiguous else None,
            storage=(t.data_offset, t.stride),
        )
        for t in layouts
    ]
    return Checkpoint(fmt or "pytorch-zip", sources)


def _open_safetensors(path: str) -> Checkpoint:
    with open(path, "rb") as fh:
        header = read_header(fh, os.fstat(fh.fileno()).st_size)
        refusal = header.refusal()
        if refusal is not None:
            raise SourceError("bad_safetensors", f"{path}: {refusal}")
        # one read-only mapping for every tensor; closed when the last view of it is gone
        view = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    sources = [
        TensorSource(
            key=e.key,
            dtype=canonical_dtype(e.dtype.safetensors),
            shape=e.shape,
            read=range_reader(view, e.begin, e.end),
            offset=e.begin,
            storage=(e.begin, e.end),
        )
        for e in header.entries
    ]
    sources += _aliases(sources, header.metadata)
    sources += _spec_sources(recorded_specs(header.metadata), {s.key for s in sources})
    return Checkpoint("safetensors", sources, metadata_objects(header.metadata))


SPEC_PART = "::spec"
"""The part that holds an encoded tensor's rebuild spec (`KEY::spec`)."""


def _spec_sources(specs: dict[str, dict], taken: set[str]) -> list[TensorSource]:
    """Each encoded tensor's rebuild spec (dense shape, quantization axis, sparse layout) as one
    more part, `KEY::spec`, its canonical JSON as bytes: tensors whose parts are equal but
    rebuild differently (CSR and CSC, another axis or shape) then differ part for part."""
    out = []
    for key, spec in specs.items():
        name = key + SPEC_PART
        if name in taken:
            raise SourceError("key_collision", f"{name!r} names both a tensor and the rebuild "
                              "spec of an encoded (quantized or sparse) tensor")
        data = spec_bytes(spec)
        out.append(TensorSource(key=name, dtype="uint8", shape=[len(data)],
                                read=lambda data=data: iter([memoryview(data)]),
                                storage=(SPEC_PART, key)))
    return out


def _aliases(sources: list[TensorSource], metadata: dict[str, str]) -> list[TensorSource]:
    """Names a converter dropped for shared storage and recorded as aliases (only those it
    lists under `ALIASES_KEY`: the rest of the metadata is free text)."""
    by_key = {s.key: s for s in sources}
    return [
        TensorSource(
            key=removed, dtype=kept.dtype, shape=kept.shape, read=kept.read, alias_of=kept.key,
            storage=kept.storage,
        )
        for removed, name in recorded_aliases(metadata).items()
        if removed not in by_key and (kept := by_key.get(name)) is not None
    ]


def digest(source: TensorSource, cancel: CancelToken | None = None) -> str | None:
    """SHA-256 of the tensor's bytes, contiguous and row-major, as stored."""
    if source.read is None:
        return None
    h = hashlib.sha256()
    for chunk in source.read():
        check(cancel)
        h.update(chunk)
    return h.hexdigest()


def digests(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Worker op `digests`: key, dtype, shape and content digest of every tensor in a file."""
    ckpt = open_checkpoint(
        request["path"], request.get("allow_globals", ()), request.get("_maps_fd")
    )
    records = []
    total = len(ckpt.tensors)
    for done, source in enumerate(ckpt.tensors, 1):
        rec = {
            **source.record(),
            "digest": digest(source, cancel),
            "digest_algorithm": DIGEST_ALGORITHM,
        }
        records.append(rec)
        emit({"type": "tensor", **rec})
        emit({"type": "progress", "stage": "digests", "done": done, "total": total})
    return {
        "format": ckpt.format,
        "digest_algorithm": DIGEST_ALGORITHM,
        "tensors": records,
        "torch_imported": "torch" in sys.modules,
    }
