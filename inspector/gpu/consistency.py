"""Repeat-inference consistency: does this device compute the same answer every time?

Runs inside the sandbox worker process (it imports torch; the GUI never imports this module).

- Weights probe: for every floating tensor of 2+ dims, a fixed seeded input x and W @ x
  (higher ranks reshaped to [out, -1]) repeated N times on the device; every repeat is compared
  bit for bit with the first, and the first with a float64 CPU reference within a tolerance
  derived from dtype and size. Every tensor also makes a host -> device -> host round trip,
  SHA-256 compared. After the repeats, the device copies are compared bit for bit with the
  host tensors, which localises corrupted weights to tensor, element and bit.
- Model run: the user's own factory builds the model, the checkpoint is loaded into it
  (missing/unexpected keys reported), and it runs N times under deterministic settings;
  outputs are compared bit for bit and with torch.testing.assert_close tolerances, plus a
  reload check (fresh weights loaded, output compared with the first).
- Fault injection flips one chosen bit of one weight on the device before a chosen iteration.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from inspector.core.bitflip import layout_for
from inspector.core.progress import CancelToken, check
from inspector.sandbox.stats import flatten, unique_keys

Emit = Callable[[dict[str, Any]], None]
PROBE_COLUMNS = 8
GROUP_BUDGET_BYTES = 1 << 30
MAX_LISTED = 20
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_COMPUTE = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
# torch.testing.assert_close's documented default (rtol, atol) per dtype (exact otherwise),
# applied with torch.isclose as assert_close does: its failure path builds a message that
# imports hundreds of modules, seconds in the middle of a timed run.
ASSERT_CLOSE_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


class ConsistencyError(Exception):
    """A request that cannot run (bad device, unknown tensor, factory not importable)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Fault:
    """Flip `bit` of element `index` (flat, row-major) of tensor `key` before `iteration`."""

    key: str
    index: int
    bit: int
    iteration: int = 2

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Fault | None:
        """Parse the request's `inject` object."""
        if not data:
            return None
        return cls(str(data["key"]), int(data["index"]), int(data["bit"]),
                   int(data.get("iteration", 2)))


def _noop(_event: dict[str, Any]) -> None:
    pass


# --------------------------------------------------------------------------------------------
# device and bit-level helpers
# --------------------------------------------------------------------------------------------


def choose_device(spec: str | None) -> tuple[torch.device, str]:
    """The device to run on and a label for it; CPU is labelled as such."""
    spec = (spec or "auto").strip().lower()
    cuda = torch.cuda.is_available()
    if spec == "auto":
        spec = "cuda:0" if cuda else "cpu"
        if not cuda:
            return torch.device("cpu"), "CPU (no CUDA device found)"
    if spec == "cpu":
        return torch.device("cpu"), "CPU"
    if spec.startswith("cuda"):
        if not cuda:
            raise ConsistencyError("no_cuda", f"{spec} requested but torch sees no CUDA device")
        device = torch.device(spec if ":" in spec else "cuda:0")
        if device.index >= torch.cuda.device_count():
            raise ConsistencyError(
                "no_cuda", f"{spec} requested but only {torch.cuda.device_count()} CUDA device(s)"
            )
        return device, f"{device} ({torch.cuda.get_device_name(device)})"
    raise ConsistencyError("bad_request", f"unknown device {spec!r} (use cpu, cuda or cuda:N)")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _raw(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor (contiguous, row-major)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def sha256_tensor(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes as stored (contiguous, row-major)."""
    return hashlib.sha256(_raw(t.cpu()).numpy()).hexdigest()


def flip_bit(t: torch.Tensor, index: int, bit: int) -> None:
    """Flip one bit of one element of `t` in place, on whatever device it lives."""
    width = t.element_size() * 8
    if not 0 <= index < t.numel():
        raise ConsistencyError("bad_request", f"element {index} outside 0..{t.numel() - 1}")
    if not 0 <= bit < width:
        raise ConsistencyError("bad_request", f"bit {bit} outside 0..{width - 1} for {t.dtype}")
    mask = 1 << bit
    if mask >= 1 << (width - 1):  # the sign bit of the signed view
        mask -= 1 << width
    flat = t.data.view(-1).view(_INT_VIEW[t.element_size()])
    flat[index] ^= mask


def _element_bits(a: np.ndarray, b: np.ndarray) -> list[int]:
    """Positions of the bits that differ between two elements' raw bytes."""
    x = int.from_bytes((a ^ b).tobytes(), "little")
    return [i for i in range(x.bit_length()) if x >> i & 1]


def bit_differences(key: str, got: torch.Tensor, want: torch.Tensor) -> dict[str, Any]:
    """Which elements of `got` differ from `want` bit for bit, with bits and values."""
    got_c, want_c = got.detach().cpu().contiguous(), want.detach().cpu().contiguous()
    size = got_c.element_size()
    g = _raw(got_c).numpy().reshape(-1, size)
    w = _raw(want_c).numpy().reshape(-1, size)
    changed = np.flatnonzero((g != w).any(axis=1))
    layout = layout_for(got_c.dtype)
    listed = []
    for index in changed[:MAX_LISTED].tolist():
        bits = _element_bits(g[index], w[index])
        listed.append({
            "index": index,
            "position": [int(i) for i in np.unravel_index(index, tuple(got_c.shape) or (1,))],
            "bits": bits,
            "kinds": [layout.describe(b)[0] for b in bits],
            "expected": _scalar(want_c.reshape(-1)[index]),
            "actual": _scalar(got_c.reshape(-1)[index]),
        })
    return {"key": key, "changed_elements": int(changed.size), "elements": listed}


def _scalar(t: torch.Tensor) -> float | int | bool:
    value = t.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no NaN/Inf
    return value


@dataclass
class Comparison:
    """A repeat compared with the first result."""

    mismatched: int
    max_abs_diff: float
    close: bool
    first_mismatch: dict[str, Any] | None


def compare(key: str, first: torch.Tensor, other: torch.Tensor) -> Comparison:
    """Bit-for-bit comparison plus torch.testing.assert_close's verdict."""
    if first.shape != other.shape or first.dtype != other.dtype:
        reason = (f"shape/dtype {tuple(other.shape)} {other.dtype} != "
                  f"{tuple(first.shape)} {first.dtype}")
        return Comparison(first.numel(), math.inf, False, {"key": key, "reason": reason})
    view = _INT_VIEW.get(first.element_size())
    if view is not None and first.dtype != torch.bool:
        differs = first.view(view) != other.view(view)
    else:
        differs = _raw(first).view(-1, first.element_size()).ne(
            _raw(other).view(-1, first.element_size())).any(dim=1).view(first.shape)
    mismatched = int(differs.sum())
    if not mismatched:
        return Comparison(0, 0.0, True, None)
    wide = torch.complex128 if first.is_complex() else torch.float64
    diff = (first.to(wide) - other.to(wide)).abs()
    diff = torch.where(differs, diff.nan_to_num(nan=math.inf), torch.zeros_like(diff))
    rtol, atol = ASSERT_CLOSE_TOLERANCES.get(first.dtype, (0.0, 0.0))
    close = bool(torch.isclose(other, first, rtol=rtol, atol=atol, equal_nan=True).all())
    detail = bit_differences(key, other, first)
    return Comparison(mismatched, float(diff.max()), close,
                      {"key": key, **(detail["elements"][0] if detail["elements"] else {})})


# --------------------------------------------------------------------------------------------
# checkpoint contents
# --------------------------------------------------------------------------------------------


def tensors_of(obj: Any) -> list[tuple[str, torch.Tensor]]:
    """(dotted key, tensor) for every tensor in a checkpoint, keyed as `inspect` keys them."""
    return [(k, v) for k, v in unique_keys(flatten(obj)) if isinstance(v, torch.Tensor)]


def model_state(obj: Any) -> dict[str, torch.Tensor]:
    """The state dict inside a checkpoint: itself, or its `state_dict` / `model` entry."""
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model_state_dict", "model"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor)
                                                  for v in inner.values()):
                return dict(tensors_of(inner))
    return dict(tensors_of(obj))


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


# --------------------------------------------------------------------------------------------
# weights probe
# --------------------------------------------------------------------------------------------


def _set_deterministic(mode: bool, warn_only: bool) -> None:
    # torch.use_deterministic_algorithms also imports torch._inductor just to set its compiler
    # flag: seconds of imports, and a temp folder the jail does not grant. Nothing here is
    # compiled, so set the ATen flag alone where this torch exposes it.
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        setter(mode, warn_only=warn_only)


@contextlib.contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """Deterministic kernels, no TF32 or reduced-precision sums, fixed seeds; restored after."""
    # cuBLAS reads this when its first handle is created; it is needed for determinism there.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32,
        matmul.allow_fp16_reduced_precision_reduction,
        matmul.allow_bf16_reduced_precision_reduction,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        _set_deterministic(True, False)
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = True, False, False
        matmul.allow_tf32 = False
        matmul.allow_fp16_reduced_precision_reduction = False
        matmul.allow_bf16_reduced_precision_reduction = False
        try:
            yield
        finally:
            _set_deterministic(*saved[:2])
            cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = saved[2:5]
            matmul.allow_tf32 = saved[5]
            matmul.allow_fp16_reduced_precision_reduction = saved[6]
            matmul.allow_bf16_reduced_precision_reduction = saved[7]


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
    emit: Emit = _noop,
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
        results[flip["key"]]["status"] = "fail"
    return {
        "mode": "probe",
        "consistent": all(r["status"] != "fail" for r in results.values()),
        "tensors": list(results.values()),
        "resident_mismatches": resident,
        "probed_tensors": len(probed),
        "probed_bytes": probed_bytes,
        "gemm_seconds": gemm_seconds,
        "weights_gb_per_s": probed_bytes * repeats / gemm_seconds / 1e9 if gemm_seconds else None,
    }


def _round_trip(key: str, t: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """Host -> device -> host copy of one tensor, SHA-256 compared."""
    entry: dict[str, Any] = {"key": key, "dtype": str(t.dtype).removeprefix("torch."),
                             "shape": list(t.shape), "status": "pass"}
    if t.is_quantized or t.layout != torch.strided:
        entry.update(status="skipped", reason="sparse or quantized tensors are not probed")
        return entry
    host = t.detach().contiguous()
    back = host.to(device, copy=True).to("cpu", copy=True)
    entry["sha256"] = sha256_tensor(host)
    entry["roundtrip_ok"] = sha256_tensor(back) == entry["sha256"]
    if not entry["roundtrip_ok"]:
        entry["status"] = "fail"
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
    gemm = 0.0
    for iteration in range(1, repeats + 1):
        check(cancel)
        if inject and inject.iteration == iteration and inject.key in mats:
            flip_bit(mats[inject.key], inject.index, inject.bit)
            emit({"type": "injected", **asdict(inject)})
        mismatched, worst = 0, 0.0
        _sync(device)
        start = time.perf_counter()
        outs = {key: mats[key] @ xs[key] for key in mats}
        _sync(device)
        elapsed = time.perf_counter() - start
        gemm += elapsed
        for key, out in outs.items():
            if iteration == 1:
                firsts[key] = out
                _reference_check(results[key], hosts[key], xs[key], out)
                continue
            cmp = compare(key, firsts[key], out)
            entry = results[key]
            if cmp.mismatched:
                entry["status"] = "fail"
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
        entry["status"] = "fail"


# --------------------------------------------------------------------------------------------
# model run
# --------------------------------------------------------------------------------------------


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
    emit: Emit = _noop,
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
        _sync(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = _outputs(model(x))
        _sync(device)
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
    consistent = (all(o["status"] == "pass" for o in outputs.values()) and not resident
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
                          "shape": list(value.shape), "status": "pass", "runs_mismatched": 0,
                          "max_abs_diff": 0.0, "within_tolerance": True}
            continue
        entry = table.setdefault(key, {"key": key, "status": "pass", "runs_mismatched": 0,
                                       "max_abs_diff": 0.0, "within_tolerance": True})
        cmp = compare(key, first[key], value)
        if cmp.mismatched:
            entry["status"] = "fail"
            entry["runs_mismatched"] += 1
            entry["max_abs_diff"] = max(entry["max_abs_diff"], cmp.max_abs_diff)
            entry["within_tolerance"] = entry["within_tolerance"] and cmp.close
            entry.setdefault("first_mismatch", {"iteration": iteration, **cmp.first_mismatch})
        mismatched += cmp.mismatched
        worst = max(worst, cmp.max_abs_diff)
    return mismatched, worst


# --------------------------------------------------------------------------------------------
# the worker operation
# --------------------------------------------------------------------------------------------


def json_safe(obj: Any) -> Any:
    """Replace non-finite floats (JSON has none) with 'inf' / '-inf' / 'nan' strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def consistency_op(request: dict, emit: Emit, cancel: CancelToken) -> dict[str, Any]:
    """Worker operation `consistency`: weights probe, or model run when `model` is given.

    Request keys: path, device ("auto" | "cpu" | "cuda:N"), repeats, seed, inject {key, index,
    bit, iteration}, allow_globals; for a model run also model ("package.module:callable"),
    model_kwargs, input_shape, input_dtype, reload (default true), python_path (folders with
    the user's code; the client also lists them in `paths` so the jail lets the worker read
    them).
    """
    from inspector.sandbox.load import load_checkpoint

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
