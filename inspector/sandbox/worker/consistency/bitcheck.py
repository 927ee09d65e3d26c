"""Device and bit-level helpers shared by the weights probe and the model run.

Runs only inside the sandbox worker (it imports torch).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from inspector.checkpoint.bitflip import layout_for
from inspector.core.dtypes import REGISTRY
from inspector.core.errors import CodedError
from inspector.core.flatten import flatten, unique_keys
from inspector.core.termtext import counted

Emit = Callable[[dict[str, Any]], None]
MAX_LISTED = 20
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# torch.testing.assert_close's documented default (rtol, atol) per dtype (exact otherwise),
# applied with torch.isclose as assert_close does: its failure path builds a message that
# imports hundreds of modules, seconds in the middle of a timed run.
ASSERT_CLOSE_TOLERANCES = {getattr(torch, d.name): d.close for d in REGISTRY if d.close}


class ConsistencyError(CodedError):
    """A request that cannot run (bad device, unknown tensor, factory not importable)."""


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


def no_events(_event: dict[str, Any]) -> None:
    """The default `emit`: nobody is listening."""


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
                "no_cuda", f"{spec} requested but only "
                f"{counted(torch.cuda.device_count(), 'CUDA device')}"
            )
        return device, f"{device} ({torch.cuda.get_device_name(device)})"
    raise ConsistencyError("bad_request", f"unknown device {spec!r} (use cpu, cuda or cuda:N)")


def sync_device(device: torch.device) -> None:
    """Wait for the device's queued work (timings and comparisons need it finished)."""
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

def json_safe(obj: Any) -> Any:
    """Replace non-finite floats (JSON has none) with 'inf' / '-inf' / 'nan' strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
