"""The model run: the user's own model, loaded with the checkpoint, run N times and compared.

The user's factory (`package.module:callable`, their trusted code, with JSON kwargs) builds the
model; the checkpoint is loaded into it (missing/unexpected keys reported); it runs N times in
eval mode under deterministic settings on a fixed seeded input; outputs are compared bit for
bit and with torch.testing.assert_close's tolerances; then a fresh load of the checkpoint runs
once more (the reload check). Runs only inside the sandbox worker.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import torch

from inspector.core.progress import CancelToken, check
from inspector.core.vocabulary import CheckStatus
from inspector.sandbox.worker.consistency.bitcheck import (
    ConsistencyError,
    Emit,
    Fault,
    bit_differences,
    compare,
    deterministic,
    flip_bit,
    model_state,
    no_events,
    sync_device,
    tensors_of,
)


def resolve_factory(spec: str, python_path: list[str] | None = None) -> Callable[..., Any]:
    """Import `package.module:callable` (the user's own code)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConsistencyError("bad_request", f"factory {spec!r} is not package.module:callable")
    for entry in reversed(python_path or []):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConsistencyError("bad_factory", f"cannot import {spec}: {exc}") from None
    if not callable(obj):
        raise ConsistencyError("bad_factory", f"{spec} is not callable")
    return obj


def make_input(shape: list[int], dtype: str, seed: int, device: torch.device) -> torch.Tensor:
    """A fixed seeded input: normal floats, or integers in [0, 100) for index inputs."""
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConsistencyError("bad_request", f"unknown input dtype {dtype!r}")
    gen = torch.Generator().manual_seed(seed)
    if torch_dtype.is_floating_point:
        x = torch.randn(shape, generator=gen, dtype=torch.float32).to(torch_dtype)
    else:
        x = torch.randint(0, 100, shape, generator=gen, dtype=torch_dtype)
    return x.to(device)


def _outputs(out: Any) -> dict[str, torch.Tensor]:
    named = {"output" if k == "<root>" else f"output.{k}": v for k, v in tensors_of(out)}
    if not named:
        raise ConsistencyError("bad_factory", "the model returned no tensors")
    return {k: v.detach() for k, v in named.items()}


def model_run(
    load: Callable[[], Any],
    factory: str,
    kwargs: Mapping[str, Any],
    input_shape: list[int],
    input_dtype: str,
    device: torch.device,
    repeats: int = 10,
    seed: int = 0,
    inject: Fault | None = None,
    reload: bool = True,
    python_path: list[str] | None = None,
    emit: Emit = no_events,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """Build the user's model, load the checkpoint, run it N times and compare outputs."""
    if repeats < 2:
        raise ConsistencyError("bad_request", "repeats must be at least 2")
    build = resolve_factory(factory, python_path)
    with deterministic(seed):
        return _model_run(load, build, factory, kwargs, input_shape, input_dtype, device,
                          repeats, seed, inject, reload, emit, cancel)


def _model_run(load, build, factory, kwargs, input_shape, input_dtype, device, repeats, seed,
               inject, reload, emit, cancel):
    host_state = model_state(load())
    try:
        model = build(**dict(kwargs))
        missing, unexpected = model.load_state_dict(host_state, strict=False)
    except Exception as exc:  # the user's code: any failure is reported, not a crash
        raise ConsistencyError("bad_factory", f"{factory} failed: {type(exc).__name__}: {exc}"
                               ) from None
    model.to(device).eval()
    params = dict(model.state_dict(keep_vars=True))
    if inject and inject.key not in params:
        raise ConsistencyError("bad_request", f"cannot inject into {inject.key!r}: no such weight")
    x = make_input(input_shape, input_dtype, seed, device)
    outputs: dict[str, dict[str, Any]] = {}
    first: dict[str, torch.Tensor] = {}

    def forward() -> tuple[dict[str, torch.Tensor], float]:
        sync_device(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = _outputs(model(x))
        sync_device(device)
        return out, time.perf_counter() - start

    for iteration in range(1, repeats + 1):
        check(cancel)
        if inject and inject.iteration == iteration:
            with torch.no_grad():
                flip_bit(params[inject.key], inject.index, inject.bit)
            emit({"type": "injected", **asdict(inject)})
        out, elapsed = forward()
        mismatched, worst = _record(outputs, first, out, iteration)
        emit({"type": "iteration", "phase": "model", "iteration": iteration,
              "max_abs_diff": worst, "mismatched": mismatched, "seconds": elapsed})
    resident = []
    for key, value in params.items():
        if key in host_state and host_state[key].shape == value.shape:
            diff = bit_differences(key, value, host_state[key].to(value.dtype))
            if diff["changed_elements"]:
                resident.append(diff)
    reload_result = None
    if reload:
        check(cancel)
        model.load_state_dict(model_state(load()), strict=False)
        out, elapsed = forward()
        reload_result = {}
        mismatched, worst = _record(reload_result, first, out, repeats + 1)
        emit({"type": "iteration", "phase": "reload", "iteration": repeats + 1,
              "max_abs_diff": worst, "mismatched": mismatched, "seconds": elapsed})
        reload_result = {"consistent": mismatched == 0, "outputs": list(reload_result.values())}
    consistent = (all(o["status"] == CheckStatus.PASS for o in outputs.values()) and not resident
                  and (reload_result is None or reload_result["consistent"]))
    return {
        "mode": "model",
        "consistent": consistent,
        "factory": factory,
        "missing_keys": list(missing),
        "unexpected_keys": list(unexpected),
        "input": {"shape": list(input_shape), "dtype": input_dtype},
        "outputs": list(outputs.values()),
        "resident_mismatches": resident,
        "reload": reload_result,
    }


def _record(table, first, out, iteration) -> tuple[int, float]:
    """Fold one run's outputs into the per-output table; the first run becomes the baseline."""
    mismatched, worst = 0, 0.0
    for key, value in out.items():
        if key not in first:
            first[key] = value
            table[key] = {"key": key, "dtype": str(value.dtype).removeprefix("torch."),
                          "shape": list(value.shape), "status": CheckStatus.PASS,
                          "runs_mismatched": 0, "max_abs_diff": 0.0, "within_tolerance": True}
            continue
        entry = table.setdefault(key, {"key": key, "status": CheckStatus.PASS, "runs_mismatched": 0,
                                       "max_abs_diff": 0.0, "within_tolerance": True})
        cmp = compare(key, first[key], value)
        if cmp.mismatched:
            entry["status"] = CheckStatus.FAIL
            entry["runs_mismatched"] += 1
            entry["max_abs_diff"] = max(entry["max_abs_diff"], cmp.max_abs_diff)
            entry["within_tolerance"] = entry["within_tolerance"] and cmp.close
            entry.setdefault("first_mismatch", {"iteration": iteration, **cmp.first_mismatch})
        mismatched += cmp.mismatched
        worst = max(worst, cmp.max_abs_diff)
    return mismatched, worst
