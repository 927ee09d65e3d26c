"""The weights probe: repeat W @ x for every weight matrix on a device, bit for bit.

For every floating tensor of 2+ dims, a fixed seeded input x and W @ x (higher ranks reshaped
to [out, -1]) are repeated N times on the device; every repeat is compared bit for bit with the
first, and the first with a float64 CPU reference within a tolerance derived from dtype and
size. Every tensor also makes a host -> device -> host round trip, SHA-256 compared. After the
repeats the device copies are compared bit for bit with the host tensors, which localises
corrupted weights to tensor, element and bit. A weight that holds NaN or Inf gets no reference
check (`nonfinite`, `first_nonfinite`; listed in `nonfinite_weights`): its outputs say nothing
about the device. Runs only inside the sandbox worker.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
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
    no_events,
    sha256_tensor,
    sync_device,
    tensors_of,
)

PROBE_COLUMNS = 8
GROUP_BUDGET_BYTES = 1 << 30
_COMPUTE = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


def _probeable(t: torch.Tensor) -> bool:
    return (t.is_floating_point() and t.dim() >= 2 and t.numel() > 0 and t.layout == torch.strided
            and not t.is_quantized)


def _tolerance(w64: torch.Tensor, x64: torch.Tensor, ref: torch.Tensor,
               dtype: torch.dtype) -> torch.Tensor:
    """Per-element bound on |W@x - exact| for inputs already in `dtype`.

    GEMMs accumulate half types in float32 (reduced-precision reductions are switched off), so
    the sum contributes about eps_acc*sqrt(n) relative to |W|@|x| (a rounding random walk, with
    headroom for blocked sums), and the result's rounding to `dtype` adds eps_dtype*|W@x|.
    """
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    n = w64.shape[1]
    walk = torch.finfo(acc).eps * (4 * math.sqrt(n) + 8) * (w64.abs() @ x64.abs())
    return walk + torch.finfo(dtype).eps * ref.abs() + torch.finfo(dtype).tiny


def _groups(items: list[tuple[str, torch.Tensor]], budget: int) -> Iterator[list]:
    group, size = [], 0
    for key, t in items:
        if group and size + t.nbytes > budget:
            yield group
            group, size = [], 0
        group.append((key, t))
        size += t.nbytes
    if group:
        yield group


def weights_probe(
    checkpoint: Any,
    device: torch.device,
    repeats: int = 10,
    seed: int = 0,
    inject: Fault | None = None,
    emit: Emit = no_events,
    cancel: CancelToken | None = None,
    budget_bytes: int = GROUP_BUDGET_BYTES,
) -> dict[str, Any]:
    """Repeat W @ x for every weight matrix on `device`; see the module docstring."""
    if repeats < 2:
        raise ConsistencyError("bad_request", "repeats must be at least 2")
    with deterministic(seed):
        return _weights_probe(checkpoint, device, repeats, seed, inject, emit, cancel,
                              budget_bytes)


def _weights_probe(checkpoint, device, repeats, seed, inject, emit, cancel, budget_bytes):
    items = list(tensors_of(checkpoint))
    probed = [(k, t) for k, t in items if _probeable(t)]
    if inject and inject.key not in dict(probed):
        raise ConsistencyError("bad_request",
                               f"cannot inject into {inject.key!r}: not a probed weight")
    results: dict[str, dict[str, Any]] = {}
    for key, t in items:
        check(cancel)
        results[key] = _round_trip(key, t, device)
        emit({"type": "progress", "stage": "round trip", "done": len(results),
              "total": len(items)})
    gemm_seconds = 0.0
    resident: list[dict[str, Any]] = []
    iteration_base = 0
    for group in _groups(probed, budget_bytes):
        seconds, flips = _probe_group(group, device, repeats, seed, inject, emit, cancel,
                                      results, iteration_base)
        gemm_seconds += seconds
        resident += flips
        iteration_base += repeats
    probed_bytes = sum(t.nbytes for _, t in probed)
    for flip in resident:
        results[flip["key"]]["status"] = CheckStatus.FAIL
    return {
        "mode": "probe",
        "consistent": all(r["status"] != CheckStatus.FAIL for r in results.values()),
        "tensors": list(results.values()),
        "resident_mismatches": resident,
        "nonfinite_weights": [k for k, r in results.items() if r.get("nonfinite")],
        "probed_tensors": len(probed),
        "probed_bytes": probed_bytes,
        "gemm_seconds": gemm_seconds,
        "weights_gb_per_s": probed_bytes * repeats / gemm_seconds / 1e9 if gemm_seconds else None,
    }


def _round_trip(key: str, t: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """Host -> device -> host copy of one tensor, SHA-256 compared."""
    entry: dict[str, Any] = {"key": key, "dtype": str(t.dtype).removeprefix("torch."),
                             "shape": list(t.shape), "status": CheckStatus.PASS}
    if t.is_quantized or t.layout != torch.strided:
        entry.update(status="skipped", reason="sparse or quantized tensors are not probed")
        return entry
    host = t.detach().contiguous()
    back = host.to(device, copy=True).to("cpu", copy=True)
    entry["sha256"] = sha256_tensor(host)
    entry["roundtrip_ok"] = sha256_tensor(back) == entry["sha256"]
    if not entry["roundtrip_ok"]:
        entry["status"] = CheckStatus.FAIL
        entry["roundtrip_mismatch"] = bit_differences(key, back, host)
    if not _probeable(t):
        entry["probe"] = "not probed (not a floating tensor of 2+ dims)"
    return entry


def _probe_group(group, device, repeats, seed, inject, emit, cancel, results, base):
    """Run the repeats over one group of weights held on the device at once."""
    mats, xs, firsts, hosts = {}, {}, {}, {}
    for key, t in group:
        check(cancel)
        dtype = t.dtype if t.dtype in _COMPUTE else torch.float32
        host = t.detach().reshape(t.shape[0], -1).to(dtype)
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(host.shape[1], PROBE_COLUMNS, generator=gen, dtype=torch.float64)
        x /= math.sqrt(host.shape[1])
        hosts[key], xs[key] = host, x.to(device, dtype)
        mats[key] = host.to(device, copy=True)
        results[key].update(compute_dtype=str(dtype).removeprefix("torch."), repeats=repeats,
                            repeat_mismatches=0, max_abs_diff=0.0)
        bad = (~torch.isfinite(host)).reshape(-1).nonzero()
        if bad.numel():  # NaN/Inf weights: no reference can judge the device on them
            results[key].update(nonfinite=int(bad.numel()), first_nonfinite=int(bad[0, 0]))
    gemm = 0.0
    for iteration in range(1, repeats + 1):
        check(cancel)
        if inject and inject.iteration == iteration and inject.key in mats:
            flip_bit(mats[inject.key], inject.index, inject.bit)
            emit({"type": "injected", **asdict(inject)})
        mismatched, worst = 0, 0.0
        sync_device(device)
        start = time.perf_counter()
        outs = {key: mats[key] @ xs[key] for key in mats}
        sync_device(device)
        elapsed = time.perf_counter() - start
        gemm += elapsed
        for key, out in outs.items():
            if iteration == 1:
                firsts[key] = out
                if "nonfinite" not in results[key]:
                    _reference_check(results[key], hosts[key], xs[key], out)
                continue
            cmp = compare(key, firsts[key], out)
            entry = results[key]
            if cmp.mismatched:
                entry["status"] = CheckStatus.FAIL
                entry["repeat_mismatches"] += 1
                entry["max_abs_diff"] = max(entry["max_abs_diff"], cmp.max_abs_diff)
                entry.setdefault("first_mismatch", {"iteration": iteration, **cmp.first_mismatch})
            mismatched += cmp.mismatched
            worst = max(worst, cmp.max_abs_diff)
        emit({"type": "iteration", "phase": "probe", "iteration": base + iteration,
              "max_abs_diff": worst, "mismatched": mismatched, "seconds": elapsed})
    resident = []
    shapes = dict((key, t.shape) for key, t in group)
    for key, mat in mats.items():
        diff = bit_differences(key, mat.reshape(shapes[key]), hosts[key].reshape(shapes[key]))
        if diff["changed_elements"]:
            resident.append(diff)
    return gemm, resident


def _reference_check(entry, host, x_dev, out) -> None:
    """Compare the first result with a float64 CPU reference within a dtype/size tolerance."""
    w64, x64 = host.double(), x_dev.cpu().double()
    ref = w64 @ x64
    tol = _tolerance(w64, x64, ref, host.dtype)
    got = out.cpu().double()
    finite = torch.isfinite(ref) & (ref.abs() <= torch.finfo(host.dtype).max)
    err = torch.where(finite, (got - ref).abs(), torch.zeros_like(ref)).nan_to_num(nan=math.inf)
    ratio = float((err / tol).max()) if err.numel() else 0.0
    entry["reference_error_ratio"] = ratio  # <= 1 means within tolerance
    entry["reference_ok"] = ratio <= 1.0
    if not entry["reference_ok"]:
        entry["status"] = CheckStatus.FAIL
