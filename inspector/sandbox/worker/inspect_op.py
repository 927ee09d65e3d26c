"""The worker's `inspect` operation: load, then statistics and digests for every tensor.

A TorchScript or torch.export archive's result also has `code` and `code_archive`
(`tensors.torchscript.code_report`): the code torch would run on loading it, never run here.

Each tensor's record is sent once, in a `tensors` event (`records`: those completed since the
last, at most PROGRESS_STEPS lines a job); the result names their order (`tensor_keys`, the
file's) instead of repeating them, so neither side encodes or parses a record twice (12,000
tiny tensors: about 0.4 s of the job). The client
gathers them (`sandbox.host.operations.inspect_reply`) and judges health itself from the
records it has checked. The result adds `unique_storage` (storages, and the elements and bytes
the tensors reach in them, each byte once, so tied weights count once).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from inspector.core.progress import CancelToken
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.layout.torchscript import CODE_ARCHIVES
from inspector.tensors.by_format import LoadSpec, load_request
from inspector.tensors.describe import describe_tensors
from inspector.tensors.leaves import describe_object
from inspector.tensors.load import split_leaves
from inspector.tensors.mapped import PageReleaser
from inspector.tensors.records import unique_storage
from inspector.tensors.torchscript import code_report

PROGRESS_STEPS = 200
"""Progress lines a job's tensors are reported in at most."""


def inspect(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Load request["path"] (weights_only, or safetensors) and describe every tensor and object."""
    path = request["path"]
    # describe_tensors runs the job's threads itself (a tensor per core, a huge one's hashing
    # on a thread beside it); torch's own intra-op threads would only contend with them.
    torch.set_num_threads(1)
    emit({"type": "progress", "stage": "load", "done": 0, "total": 1})
    obj = load_request(request)
    tensors, objects = split_leaves(obj)
    objects_out = []
    for key, value in objects:
        rec = describe_object(key, value)
        objects_out.append(rec)
        emit({"type": "object", "key": key, "python_type": rec["type"], "repr": rec["repr"]})
    release = PageReleaser(request.get("_maps_fd"), path)
    release.refresh()
    emit({"type": "progress", "stage": "tensors", "done": 0, "total": len(tensors)})
    done = 0
    # a line of records and a progress line per half percent at most: with 12,000 tiny
    # tensors a line per record cost both sides more than the records' own text
    step = max(1, len(tensors) // PROGRESS_STEPS)
    ready: list[dict] = []

    def on_tensor(event: dict) -> None:
        nonlocal done
        done += 1
        ready.append({k: v for k, v in event.items() if k != "type"})
        if done % step == 0 or done == len(tensors):
            emit({"type": "tensors", "records": ready[:]})
            ready.clear()
            emit({"type": "progress", "stage": "tensors", "done": done, "total": len(tensors)})

    records = describe_tensors(tensors, on_tensor, release=release, cancel=cancel,
                               threads=request["_threads"])
    result = {"digest_algorithm": DIGEST_ALGORITHM, "tensor_keys": [r["key"] for r in records],
              "objects": objects_out, "unique_storage": unique_storage(tensors)}
    fmt = LoadSpec.of(request).format
    if fmt in CODE_ARCHIVES:
        result.update(code_report(path, fmt))
    return result
