"""The worker's `inspect` operation: load, then statistics and digests for every tensor.

A safetensors or GGUF file of small tensors is read without torch (`tensors.plain`: the same
records, and torch is never imported, which was most of a cold worker's start); any other
input, or one that reader leaves to torch, is loaded with torch (`_with_torch`).

A TorchScript or torch.export archive's `code` and `code_archive` (the code torch would run on
loading it) are read by the client from the zip itself (`sandbox.host.operations.inspect_one`),
never taken from here.

Each tensor's record is sent once, in a `tensors` event (`records`: those completed since the
last, at most PROGRESS_STEPS lines a job; the objects likewise in `objects` events); the
result names their order (`tensor_keys`, the file's) instead of repeating them, so neither
side encodes or parses a record twice (12,000 tiny tensors: about 0.4 s of the job). The client
gathers them (`sandbox.host.operations.inspect_reply`) and judges health itself from the
records it has checked. The result adds `unique_storage` (storages, and the elements and bytes
the tensors reach in them, each byte once, so tied weights count once).
"""

from __future__ import annotations

from collections.abc import Callable

from inspector.core.progress import CancelToken
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.tensors.plain.reader import FORMATS, describe_file

PROGRESS_STEPS = 200
"""Progress lines a job's tensors are reported in at most."""


def inspect(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Load request["path"] (weights_only, or safetensors) and describe every tensor and object."""
    emit({"type": "progress", "stage": "load", "done": 0, "total": 1})
    fmt = str(request.get("format") or "")
    # a file of small tensors is described from its header and bytes, without importing torch
    plain = describe_file(request["path"], fmt) if fmt in FORMATS else None
    if plain is None:
        return _with_torch(request, emit, cancel)
    _send_objects(emit, plain.objects)
    on_tensor = _Sender(emit, len(plain.records))
    for rec in plain.records:
        cancel.check()
        on_tensor(rec)
    return {"digest_algorithm": DIGEST_ALGORITHM,
            "tensor_keys": [r["key"] for r in plain.records], "objects": plain.objects,
            "unique_storage": plain.unique_storage}


def _send_objects(emit: Callable[[dict], None], objects: list[dict]) -> None:
    """The non-tensor leaves' records in `objects` lines of several, PROGRESS_STEPS lines at
    most (a GGUF file of 12,000 quantized tensors has as many `KEY::ggml` leaves: a line
    each cost both sides about 0.4 s)."""
    step = max(1, len(objects) // PROGRESS_STEPS)
    for begin in range(0, len(objects), step):
        emit({"type": "objects", "records": [
            {"key": rec["key"], "python_type": rec["type"], "repr": rec["repr"]}
            for rec in objects[begin:begin + step]]})


class _Sender:
    """Sends the tensors' records in `tensors` lines, each followed by a progress line: a line
    per half percent at most (with 12,000 tiny tensors a line per record cost both sides more
    than the records' own text)."""

    def __init__(self, emit: Callable[[dict], None], total: int) -> None:
        self._emit = emit
        self._total = total
        self._step = max(1, total // PROGRESS_STEPS)
        self._done = 0
        self._ready: list[dict] = []
        emit({"type": "progress", "stage": "tensors", "done": 0, "total": total})

    def __call__(self, event: dict) -> None:
        self._done += 1
        event.pop("type", None)  # each event is a fresh dict: the record without its type
        self._ready.append(event)
        if self._done % self._step == 0 or self._done == self._total:
            self._emit({"type": "tensors", "records": self._ready[:]})
            self._ready.clear()
            self._emit({"type": "progress", "stage": "tensors", "done": self._done,
                        "total": self._total})


def _with_torch(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """The file loaded with torch (`tensors.by_format.load_request`) and every tensor described
    (`tensors.describe.describe_tensors`)."""
    # imported here: a file `describe_file` reads never pays for importing torch (1.1-1.3 s)
    import torch

    from inspector.tensors.by_format import load_request
    from inspector.tensors.describe import describe_tensors
    from inspector.tensors.load import split_leaves
    from inspector.tensors.mapped import PageReleaser
    from inspector.tensors.plain.leaves import describe_object
    from inspector.tensors.records import unique_storage

    path = request["path"]
    # describe_tensors runs the job's threads itself (a tensor per core, a huge one's hashing
    # on a thread beside it); torch's own intra-op threads would only contend with them.
    torch.set_num_threads(1)
    obj = load_request(request)
    tensors, objects = split_leaves(obj)
    objects_out = [describe_object(key, value) for key, value in objects]
    _send_objects(emit, objects_out)
    release = PageReleaser(request.get("_maps_fd"), path)
    release.refresh()
    records = describe_tensors(tensors, _Sender(emit, len(tensors)), release=release,
                               cancel=cancel, threads=request["_threads"])
    return {"digest_algorithm": DIGEST_ALGORITHM, "tensor_keys": [r["key"] for r in records],
            "objects": objects_out, "unique_storage": unique_storage(tensors)}
