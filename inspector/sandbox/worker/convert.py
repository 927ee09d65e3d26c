"""The worker's `convert` operation: stream a checkpoint into a safetensors file, then verify it.

Keys are flattened as in `core.flatten`. Tensors that share a storage keep one name (of those
that cover the whole storage, the one `shards.tie_rule.kept_name` picks: the name transformers'
`save_pretrained` keeps); identical views become aliases recorded in `__metadata__` as
`{removed: kept}` and under `ckpt-inspector.aliases` (`safetensors_header.aliases_entry`);
partial views are written as their own (cloned) tensors; everything is written contiguous,
row-major. Quantized and sparse tensors are written as their parts
(`tensors.encoded`: integer representation, scale, zero point, axis; indices, values, shape),
so nothing is lost. What is still unconvertible (meta and nested tensors, dtypes safetensors
has no code for) fails the conversion with the keys listed (`unsupported_tensors`), unless
the request says `skip_unsupported`: then those keys are listed in the report and the
sidecar. Non-tensor leaves go to a JSON sidecar document that the client writes next to the
output. "Verified" covers every tensor of the input: each written tensor (or part) is
compared with its source, and nothing else was left out unless listed as skipped.

A request may name `key`, a dotted path into the loaded object (only what is under it is
converted: a Lightning checkpoint's `state_dict`), and `strip_prefix`, prefixes removed from
the names (`checkpoint.extract`); "the input" is then that selection.

The header is written first (offsets are known from the plan), then each tensor's bytes are
streamed from the memory-mapped source in bounded chunks into the output descriptor the
client opened, while a second thread hashes them. The output is then reopened with the
`safetensors` library and every tensor's SHA-256 is compared with its source's, bit for bit.
The worker never names, renames or creates files: the client owns the temp file and fsyncs
it before the rename; the worker writes back to disk as it goes so that fsync is short.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from safetensors import safe_open

from inspector.checkpoint.extract import select, strip_prefixes
from inspector.core.errors import CodedError
from inspector.core.flatten import colliding_keys
from inspector.core.progress import CancelToken, check
from inspector.core.termtext import escape
from inspector.formats.safetensors_header import aliases_entry
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.shards.tie_rule import kept_name
from inspector.tensors.by_format import load_request
from inspector.tensors.encoded import expand, metadata_entry
from inspector.tensors.load import SAFETENSORS_DTYPES, LoadError, split_leaves
from inspector.tensors.mapped import PageReleaser
from inspector.tensors.plain.leaves import describe_object
from inspector.tensors.records import dtype_name, is_dense
from inspector.tensors.stats import CHUNK_BYTES, Release, byte_chunks

_ITEMSIZE = {name: dtype.itemsize for dtype, name in SAFETENSORS_DTYPES.items()}
SIDECAR_FORMAT = "ckpt-inspector-sidecar/1"
VERIFY_WINDOW = 256 * 1024 * 1024
"""Bytes verified per reopening of the output: its mapping's pages are given back behind the
reads where the worker can (`PageReleaser`), and at the latest when the window closes."""


@dataclass
class Plan:
    """Which tensors are written, under which names, and what happens to the rest."""

    entries: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    cloned: list[str] = field(default_factory=list)
    made_contiguous: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)


def _covers_storage(t: torch.Tensor) -> bool:
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset())


def plan_tensors(tensors: list[tuple[str, torch.Tensor]]) -> Plan:
    """Decide names, aliases, clones and skips for a flattened list of tensors."""
    plan = Plan()
    groups: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for key, t in tensors:
        reason = _unsupported(t)
        if reason:
            plan.skipped.append({"key": key, "dtype": dtype_name(t.dtype), "reason": reason})
            continue
        ptr = t.untyped_storage().data_ptr() if t.untyped_storage().nbytes() else -id(t)
        groups.setdefault(ptr, []).append((key, t))
    kept_for: dict[str, str] = {}
    sharing = {key for members in groups.values() if len(members) > 1 for key, _ in members}
    for members in groups.values():
        complete = [k for k, t in members if _covers_storage(t)]
        if len(members) > 1 and complete:
            kept = kept_name(complete)
            keep = dict(members)[kept]
            for key, t in members:
                if key != kept and _same_view(t, keep):
                    kept_for[key] = kept
    for key, t in tensors:
        if key in kept_for:
            plan.aliases[key] = kept_for[key]
        elif not any(s["key"] == key for s in plan.skipped):
            plan.entries.append((key, t))
            if key in sharing and not _covers_storage(t):
                plan.cloned.append(key)
            elif not t.is_contiguous():
                plan.made_contiguous.append(key)
    return plan


def _unsupported(t: torch.Tensor) -> str | None:
    if not is_dense(t):
        return "sparse, nested or non-CPU tensors have no safetensors form"
    if t.device.type == "meta":
        return "meta tensor has no data"
    if t.is_quantized:
        return f"quantized {dtype_name(t.dtype)} with scheme {t.qscheme()} has no encoding"
    if t.dtype not in SAFETENSORS_DTYPES:
        return f"safetensors has no dtype for {dtype_name(t.dtype)}"
    return None


def header_bytes(entries: list[tuple[str, torch.Tensor]], metadata: dict[str, str]) -> bytes:
    """The safetensors header (length prefix included), padded so data starts 8-aligned."""
    header: dict = {"__metadata__": metadata}
    offset = 0
    for key, t in entries:
        size = t.numel() * t.element_size()
        header[key] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


class Writeback:
    """Flushes the output to disk on a background thread (fdatasync) once each stretch of it
    is written, so the disk works while the worker writes, hashes and verifies, and the
    client's final fsync finds little left to do. (sync_file_range is not enough: it leaves
    the device cache to the final fsync, whose cost then still grows with the file.)

    The writer never waits for the disk: flushes are queued, and the thread is joined only
    on leaving the `with` block.
    """

    STRETCH = 64 * 1024 * 1024

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queued = 0
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="writeback", daemon=True)
        self._error: OSError | None = None

    def __enter__(self) -> Writeback:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._requests.put(False)
        self._thread.join()
        if self._error is not None and exc_type is None:
            raise LoadError("output_unwritable",
                            f"cannot write the output: {self._error.strerror or self._error}")

    def advance(self, position: int, final: bool = False) -> None:
        """Everything before position is written; flush it once a stretch (or all) is ready."""
        if position - self._queued >= (1 if final else self.STRETCH):
            self._requests.put(True)
            self._queued = position

    def _run(self) -> None:
        flush = getattr(os, "fdatasync", os.fsync)
        while self._requests.get():
            try:
                flush(self._fd)
            except OSError as exc:
                # Reported here: the failed flush clears the error, so a later fsync of the
                # same open file (the client's) may not see it again.
                self._error = exc


def write_stream(fd: int, plan: Plan, metadata: dict[str, str], release: Release | None,
                 cancel: CancelToken | None, emit: Callable[[dict], None],
                 writeback: Writeback | None = None) -> tuple[dict, str]:
    """Write header and tensors to fd; return ({key: source digest}, SHA-256 of the file)."""
    file_hash = hashlib.sha256()
    header = header_bytes(plan.entries, metadata)
    _write_all(fd, memoryview(header))
    file_hash.update(header)
    position = len(header)
    digests = {}
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="digest") as pool:
        for n, (key, t) in enumerate(plan.entries, 1):
            tensor_hash = hashlib.sha256()
            for piece in byte_chunks(t, release):
                check(cancel)
                # Both digests run beside the write (hashlib and os.write release the GIL);
                # each chunk finishes before the next starts, which keeps the digests in order.
                pending = [pool.submit(tensor_hash.update, piece),
                           pool.submit(file_hash.update, piece)]
                _write_all(fd, piece)
                position += len(piece)
                if writeback is not None:
                    writeback.advance(position)
                for job in pending:
                    job.result()
            digests[key] = tensor_hash.hexdigest()
            emit({"type": "progress", "stage": "write", "done": n, "total": len(plan.entries)})
    if writeback is not None:
        writeback.advance(position, final=True)
    return digests, file_hash.hexdigest()


def _output_digest(handle, key: str, release: Release | None) -> tuple[str, str, list[int]]:
    """(SHA-256, dtype, shape) of one tensor as the safetensors library reads it back, each
    part's pages of the output's mapping given back (`release`) once hashed."""
    view = handle.get_slice(key)
    shape, dtype = list(view.get_shape()), view.get_dtype()
    digest = hashlib.sha256()
    if not shape or math.prod(shape) == 0:
        parts = [handle.get_tensor(key)]
    else:
        row_bytes = math.prod(shape[1:]) * _ITEMSIZE[dtype]
        rows = max(1, CHUNK_BYTES // max(1, row_bytes))
        parts = (view[start : start + rows] for start in range(0, shape[0], rows))
    for part in parts:
        part = part.contiguous()
        digest.update(part.reshape(-1).view(torch.uint8).numpy())
        if release is not None:
            release(part.data_ptr(), part.numel() * part.element_size())
    return digest.hexdigest(), dtype, shape


def verify_output(path: str, plan: Plan, digests: dict[str, str], metadata: dict[str, str],
                  cancel: CancelToken | None, emit: Callable[[dict], None],
                  release: PageReleaser | None = None) -> list[str]:
    """Reopen the output with safetensors; return the keys (or facts) that do not match.

    `release` (of the output file) gives back the pages of each window's mapping as they are
    hashed, so a shard verifies in a few chunks' worth of RSS instead of a window's.
    """
    mismatches = []
    windows: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = 0
    for key, t in plan.entries:
        if size > VERIFY_WINDOW:
            windows.append([])
            size = 0
        windows[-1].append((key, t))
        size += t.numel() * t.element_size()
    done = 0
    for window in windows:
        with safe_open(path, framework="pt") as handle:
            if release is not None:
                release.refresh()  # the handle has just mapped the output
            if window is windows[0]:
                if set(handle.keys()) != {k for k, _ in plan.entries}:
                    mismatches.append("tensor names")
                if (handle.metadata() or {}) != metadata:
                    mismatches.append("__metadata__")
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="verify") as pool:
                results = pool.map(lambda kt: (kt, _output_digest(handle, kt[0], release)),
                                   window)
                for (key, t), (digest, dtype, shape) in results:
                    check(cancel)
                    if (digest != digests[key] or shape != list(t.shape)
                            or dtype != SAFETENSORS_DTYPES[t.dtype]):
                        mismatches.append(key)
                    done += 1
                    emit({"type": "progress", "stage": "verify", "done": done,
                          "total": len(plan.entries)})
    return mismatches


def json_value(value: object) -> tuple[bool, object]:
    """(True, JSON form) when JSON holds the value losslessly (with its recorded type)."""
    if value is None or isinstance(value, bool | int | str):
        return True, value
    if isinstance(value, float):
        return (True, value) if math.isfinite(value) else (False, None)
    if isinstance(value, torch.Size):
        return True, list(value)
    if isinstance(value, torch.dtype | torch.device):
        return True, str(value)
    if isinstance(value, dict | list | tuple) and not value:
        return True, {} if isinstance(value, dict) else []
    return False, None


def sidecar_document(objects: list[tuple[str, object]]) -> tuple[dict, list[dict]]:
    """The sidecar JSON (values with their Python types) and the leaves JSON cannot hold."""
    values, types, rejected = {}, {}, []
    for key, value in objects:
        ok, encoded = json_value(value)
        if ok:
            values[key] = encoded
            types[key] = describe_object(key, value)["type"]
        else:
            rejected.append(describe_object(key, value))
    return {"format": SIDECAR_FORMAT, "values": values, "types": types,
            "not_serializable": rejected}, rejected


def select_leaves(loaded: object, key: str | None, prefixes: Sequence[str]
                  ) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, object]]]:
    """The leaves under `key` (all when None), with `prefixes` stripped from their names."""
    selected = select(loaded, key) if key else loaded
    clashes = colliding_keys(selected)
    if clashes:
        # a safetensors file has flat names: one of the two values would be written renamed
        # ("a.b#2"), and a loader asking for "a.b" would get the other one
        more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
        raise CodedError("key_collision",
                         f"two values are both named {escape(clashes[0])} once nested "
                         f"containers are flattened{more}; a safetensors file would hold one "
                         "under another name: convert one of them with --key")
    tensors, objects = split_leaves(selected)
    if key and not (isinstance(selected, Mapping) and tensors):
        what = "a mapping with no tensors" if isinstance(selected, Mapping) else (
            f"a {type(selected).__name__}")
        raise CodedError("not_tensor_mapping",
                         f"--key {escape(key)} is {what}, not a mapping of tensors")
    if not prefixes:
        return tensors, objects
    names = strip_prefixes([k for k, _ in tensors] + [k for k, _ in objects], prefixes)
    return [(names[k], t) for k, t in tensors], [(names[k], v) for k, v in objects]


def convert(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Convert request["path"] into the descriptor request["output_fd"]; the report."""
    path, fd = request["path"], int(request["output_fd"])
    torch.set_num_threads(1)
    emit({"type": "progress", "stage": "load", "done": 0, "total": 1})
    key, prefixes = request.get("key"), list(request.get("strip_prefix") or ())
    tensors, objects = select_leaves(load_request(request), key, prefixes)
    if any(name == "__metadata__" for name, _ in tensors):
        raise CodedError("key_collision",
                         "a tensor is named __metadata__, the name a safetensors header keeps "
                         "for its metadata: no safetensors file can hold it under that name")
    expanded, encoded = expand(tensors)
    plan = plan_tensors(expanded)
    if plan.skipped and not request.get("skip_unsupported"):
        listed = "; ".join(f"{s['key']} ({s['reason']})" for s in plan.skipped[:20])
        more = f" and {len(plan.skipped) - 20} more" if len(plan.skipped) > 20 else ""
        raise LoadError("unsupported_tensors",
                        f"cannot convert without losing tensors: {listed}{more} "
                        f"(--skip-unsupported converts the rest and lists these)")
    metadata = {"format": "pt", **aliases_entry(plan.aliases), **metadata_entry(encoded)}
    release = PageReleaser(request.get("_maps_fd"), path)
    release.refresh()
    with Writeback(fd) as writeback:
        digests, file_sha = write_stream(fd, plan, metadata, release, cancel, emit, writeback)
        mismatches = verify_output(f"/proc/self/fd/{fd}", plan, digests, metadata, cancel,
                                   emit, PageReleaser(request.get("_maps_fd"), fd))
    document, rejected = sidecar_document(objects)
    if plan.skipped:
        document["tensors_skipped"] = plan.skipped
    if key or prefixes:
        document.update(key=key, strip_prefix=prefixes)
    return {
        "verified": not mismatches,
        "mismatches": mismatches,
        "sha256": file_sha,
        "digest_algorithm": DIGEST_ALGORITHM,
        "tensors_written": len(plan.entries),
        "bytes_written": sum(t.numel() * t.element_size() for _, t in plan.entries),
        "digests": digests,
        "aliases": plan.aliases,
        "cloned_views": plan.cloned,
        "made_contiguous": plan.made_contiguous,
        "tensors_skipped": plan.skipped,
        "tensors_in_input": len(tensors),
        "encoded": encoded,
        "objects_moved": [k for k in document["values"]],
        "not_serializable": rejected,
        "sidecar_document": document if objects or plan.skipped else None,
        "key": key,
        "strip_prefix": prefixes,
    }
