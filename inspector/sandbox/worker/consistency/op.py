"""Repeat-inference consistency: does this device compute the same answer every time?

The worker operation `consistency` (registered in inspector.sandbox.worker.main.OPS); it runs
inside the jailed worker process (torch is imported there; the GUI never imports this module).

- Weights probe (`weights_probe` beside this module), for any checkpoint: W @ x repeated on the
  device for every weight matrix, compared bit for bit, against a float64 reference, plus a
  SHA-256 round trip and a bit-for-bit check of the device copies.
- Model run (`model_run`): the user's own model, loaded with the checkpoint, run N
  times under deterministic settings, outputs compared, plus a reload check.
- Fault injection flips one chosen bit of one weight on the device before a chosen iteration.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from inspector.core.progress import CancelToken
from inspector.sandbox.worker.consistency.bitcheck import Emit, Fault, choose_device, json_safe
from inspector.sandbox.worker.consistency.model_run import model_run
from inspector.sandbox.worker.consistency.weights_probe import weights_probe


def consistency_op(request: dict, emit: Emit, cancel: CancelToken) -> dict[str, Any]:
    """Worker operation `consistency`: weights probe, or model run when `model` is given.

    Request keys: path, device ("auto" | "cpu" | "cuda:N"), repeats, seed, inject {key, index,
    bit, iteration}, allow_globals; for a model run also model ("package.module:callable"),
    model_kwargs, input_shape, input_dtype, reload (default true), python_path (folders with
    the user's code; the client also lists them in `paths` so the jail lets the worker read
    them).
    """
    from inspector.tensors.load import load_checkpoint

    def safe_emit(event: dict[str, Any]) -> None:
        emit(json_safe(event))

    device, label = choose_device(request.get("device"))
    repeats, seed = int(request.get("repeats", 10)), int(request.get("seed", 0))
    inject = Fault.from_json(request.get("inject"))
    safe_emit({"type": "device", "device": str(device), "label": label})

    def load() -> Any:
        safe_emit({"type": "progress", "stage": "load", "done": 0, "total": 1})
        return load_checkpoint(request["path"], request.get("allow_globals", ()))

    start = time.perf_counter()
    if request.get("model"):
        result = model_run(
            load, request["model"], request.get("model_kwargs") or {},
            list(request.get("input_shape") or []), request.get("input_dtype", "float32"),
            device, repeats, seed, inject, bool(request.get("reload", True)),
            list(request.get("python_path") or []), safe_emit, cancel,
        )
    else:
        result = weights_probe(load(), device, repeats, seed, inject, safe_emit, cancel)
    return json_safe({
        "device": str(device),
        "device_label": label,
        "repeats": repeats,
        "seed": seed,
        "injected": asdict(inject) if inject else None,
        "seconds": time.perf_counter() - start,
        **result,
    })
