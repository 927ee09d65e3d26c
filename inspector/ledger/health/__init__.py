"""The health check a checkpoint must pass before the ledger seals it as verified.

Two sources: the state itself (a NaN in any floating-point tensor: no weight, moment or buffer
is ever legitimately NaN, while -Inf masks are, so Inf in a model's tensors is left to the
guard, which knows which tensors are parameters; an Inf in any tensor of an optimizer's state,
where no moment, momentum or count is ever infinite; a negative running variance; optimizer
hyper-parameters torch's own constructors refuse; and optimizer moments outside what their
update can write, `moments`), and every check a training guard in this process registered for
the run folder (`run.health_gate`:
the weights finite, within their learned largest |w|, and their fingerprint the one the last
optimizer step left). A checkpoint that fails is written beside its target under an
`.unhealthy` name (`evidence_path`), as evidence, and recorded with outcome `unhealthy`; the
previous checkpoint at the target stays, and no resume chooses the unhealthy one (a folder a
trainer already placed, `record_folder`, is renamed so, out of the trainer's own pattern, so
the trainer's resume skips it too).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from inspector.core.flatten import is_running_variance
from inspector.core.termtext import counted
from inspector.ledger.health.schedulers import is_number, is_whole, scheduler_problems
from inspector.run import health_gate

SHOWN = 3


def health_problems(obj: Any, run_dir: Path) -> list[str]:
    """Every reason the state `obj` should not be sealed (empty when it is healthy)."""
    return state_problems(obj) + run_problems(obj, run_dir)


def run_problems(obj: Any, run_dir: Path) -> list[str]:
    """What the run knows against the state `obj`: its guards' checks (`run.health_gate`) and
    its optimizers' journaled settings no schedule writes."""
    from inspector.ledger.health.moments import journaled_problems

    return health_gate.problems(run_dir, obj) + journaled_problems(obj, run_dir)


def state_problems(obj: Any) -> list[str]:
    """What the state `obj` itself shows: NaN anywhere, a negative running variance, optimizer
    hyper-parameters torch refuses, optimizer moments out of their bounds, a gradient scaler's
    or an LR scheduler's state neither could have written (`scheduler_problems`)."""
    from inspector.ledger.health.moments import group_problems, moment_problems, optimizer_prefixes

    dense = _dense_floats(obj)  # one flatten of the state serves every check of its tensors
    optimizer = optimizer_prefixes(obj)
    return (nonfinite_problems(dense, optimizer) + mirror_problems(dense, optimizer)
            + variance_problems(dense) + group_problems(obj) + moment_problems(obj)
            + scaler_problems(obj) + scheduler_problems(obj))


def optimizer_problems(optimizer: Any, scheduler: Any = None) -> list[str]:
    """What an optimizer's own state shows, with its LR scheduler's (`state_problems`); none
    for None or a non-torch one."""
    from inspector.ledger.health.moments import local_state

    state = local_state(optimizer) if optimizer is not None else None
    held = {"optimizer": state} if state is not None else {}
    if callable(getattr(scheduler, "state_dict", None)):
        held["lr_scheduler"] = scheduler.state_dict()
    return state_problems(held) if held else []


def _dense_floats(obj: Any) -> list[tuple[str, Any]]:
    """The state's dense, non-empty floating-point and complex tensors by key, detached, each
    in a dtype the checks reduce (`_reducible`)."""
    import torch

    from inspector.tensors.load import split_leaves

    return [(key, _reducible(t.detach())) for key, t in split_leaves(obj)[0]
            if (t.is_floating_point() or t.is_complex()) and t.layout == torch.strided
            and t.device.type != "meta" and t.numel()]


def _reducible(t: Any) -> Any:
    """A tensor the checks' reductions take: a complex one as its real and imaginary parts
    (`view_as_real`, no copy: a NaN in either part is a NaN of the tensor), a float8 one as
    float32 (no norm kernel takes it; a copy, of a rare tensor)."""
    import torch

    from inspector.ledger.health.moments import FLOATS

    if t.is_complex():
        return torch.view_as_real(t.resolve_conj())
    return t if t.dtype in FLOATS else t.float()


def nonfinite_problems(dense: list[tuple[str, Any]], optimizer: tuple[str, ...]) -> list[str]:
    """The tensors of `dense` (`_dense_floats`) that hold a NaN, and those under an
    optimizer's state (keys starting with one of `optimizer`) that hold an Inf, as problems."""
    import torch

    # one fused pass, no mask allocated: an L2 norm is NaN exactly when a value is NaN (Inf
    # and overflow give Inf: x*x never makes a NaN), and torch's CPU kernel for it is ~3x
    # faster than the L1 norm's; an infinite norm of an optimizer's tensor is read again
    # (the rare path) to tell an Inf from a sum of squares that overflowed
    norms = torch._foreach_norm([t for _, t in dense], 2.0) if dense else []
    nan, inf = [], []
    for (key, t), n in zip(dense, norms, strict=True):
        if bool(torch.isnan(n)):
            nan.append(key)
        elif key.startswith(optimizer) and bool(torch.isinf(n)) and bool(torch.isinf(t).any()):
            inf.append(key)
    return (_shown([f"NaN in {key}" for key in nan], "NaN in {} more tensors")
            + _shown([f"Inf in {key} (no optimizer's state is ever infinite)" for key in inf],
                     "Inf in {} more optimizer tensors"))


MIRROR_FACTOR = 256.0
"""How far the largest |value| of a tensor and of its mirror may differ (`mirror_problems`):
an EMA lags its model by a few steps' worth of change, and one flipped exponent bit of the top
four multiplies a value by 2^16 or more."""
MIRROR_FLOOR = 0.1
"""The smaller largest |value| is taken as at least this (a tensor that starts at zero)."""


def mirrors(dense: list[tuple[str, Any]], optimizer: tuple[str, ...]
            ) -> list[tuple[int, int]]:
    """Pairs of positions in `dense` holding copies of one tensor kept side by side (a model
    and its EMA, `model.0.weight` and `ema.module.0.weight`): under different top-level keys,
    the shorter key (past its top level) a dotted suffix of the other's, the same shape and
    dtype; optimizer state is left out."""
    seen: dict[str, int] = {}  # every dotted suffix of a key past its top level: its first
    pairs = []
    for i, (key, t) in enumerate(dense):
        top, _, rest = key.partition(".")
        if not rest or key.startswith(optimizer):
            continue
        parts = rest.split(".")
        suffixes = [".".join(parts[cut:]) for cut in range(len(parts))]
        for suffix in suffixes:  # the longest first
            j = seen.get(suffix)
            if j is not None and not dense[j][0].startswith(top + ".") and (
                    dense[j][1].shape == t.shape and dense[j][1].dtype == t.dtype):
                pairs.append((j, i))
                break
        for suffix in suffixes:
            seen.setdefault(suffix, i)
    return pairs


def mirror_problems(dense: list[tuple[str, Any]], optimizer: tuple[str, ...]) -> list[str]:
    """Copies of one tensor (`mirrors`) where one holds an Inf the other does not, or whose
    largest |value| is past `MIRROR_FACTOR` x the other's: an EMA copy saved beside its model,
    which no guard watches. One reduction over each mirrored tensor, none without them."""
    import torch

    pairs = mirrors(dense, optimizer)
    if not pairs:
        return []
    top = {}
    for i in sorted({i for pair in pairs for i in pair}):
        # aminmax: one pass, ~14x faster on a CPU than the infinity norm (abs, then max)
        low, high = torch.aminmax(dense[i][1])
        top[i] = max(float(high), -float(low))
    found = []
    for a, b in pairs:
        (low, x), (high, y) = sorted(((a, top[a]), (b, top[b])), key=lambda p: p[1])
        if math.isnan(x) or math.isnan(y):
            continue  # NaN is `nonfinite_problems`'
        if y > MIRROR_FACTOR * max(x, MIRROR_FLOOR):
            found.append(f"{dense[high][0]} largest |value| {y:.4g}, over "
                         f"{MIRROR_FACTOR:g}x its copy {dense[low][0]}'s {x:.4g}")
    return _shown(found, "{} more tensors far past their copies")


def variance_problems(dense: list[tuple[str, Any]]) -> list[str]:
    """Normalisation layers' running variances (`*.running_var`) among `dense` holding a
    negative value, as problems: a running mean of variances never is, and in eval mode the
    layer divides by its square root (NaN). The guard judges the same at every step
    (`variance-negative`); this holds for a run without it."""
    found = []
    for key, t in dense:
        if is_running_variance(key) and (negative := int((t < 0).sum())):
            found.append(f"{key} negative in {counted(negative, 'value')} (a running "
                         "variance never is)")
    return _shown(found, "negative running variances in {} more tensors")


def _shown(found: list[str], more: str) -> list[str]:
    """At most SHOWN problems named, the rest counted in `more` (its `{}`)."""
    return found[:SHOWN] + ([more.format(len(found) - SHOWN)] if len(found) > SHOWN else [])


def evidence_path(target: Path, outcome: str = "unhealthy") -> Path:
    """Where a checkpoint that was not sealed verified is kept: `NAME.OUTCOME` beside its
    target (`checkpoint-8.mismatch`, `last.ckpt.unhealthy`): out of every trainer's own naming
    pattern, and without its extension, which loaders pick by (Lightning's `ckpt_path="last"`
    takes any `last*.ckpt`, so `last.unhealthy.ckpt` was resumed from)."""
    return target.with_name(f"{target.name}.{outcome}")


def unhealthy_detail(problems: list[str]) -> str:
    """The record's detail for an unhealthy save."""
    shown = "; ".join(problems[:SHOWN])
    more = f" and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return f"unhealthy at save: {shown}{more}"


def say_unhealthy(target: Path, kept: Path, detail: str) -> None:
    """One line on stderr: the save was not sealed as verified, and where it went."""
    print(f"inspector.ledger: {target} not sealed: {detail}; kept as evidence at {kept}, "
          "never resumed from", file=sys.stderr, flush=True)


# A mixed-precision gradient scaler's saved state, where `torch.amp.GradScaler` can write it:
# its constructor requires a growth factor above 1 and a backoff factor below 1; its update keeps
# the growth tracker in [0, growth interval) and the scale a positive float32 (a float64 in the
# state dict, but the scaler holds it as a float32 tensor). A flipped exponent bit in a saved
# scale (65536 -> 2^-1008, zero as a float32) leaves every number finite, yet after a resume the
# scaled loss is zero and its gradients are unscaled by 1/0: the first step turns the weights
# NaN (CPU, torch 2.13), and `run latest` kept choosing it.

SCALER_KEYS = frozenset({"scale", "growth_factor", "backoff_factor", "growth_interval",
                         "_growth_tracker"})
"""The keys of `GradScaler.state_dict()` (an enabled scaler's)."""
SMALLEST_NORMAL = 2.0 ** -126
"""The smallest positive normal float32: below it the scale the scaler holds is subnormal or 0."""


def scaler_problems(obj: Any) -> list[str]:
    """Every gradient scaler state in `obj` that `GradScaler` could not have written, one line
    each (empty when all hold)."""
    from inspector.core.flatten import dicts_in
    return [f"{where}gradient scaler: {said}"
            for where, state in dicts_in(obj, lambda d: set(d) == SCALER_KEYS)
            if (said := _problem(state))]


def _problem(state: dict) -> str | None:
    scale, growth, backoff = (state[k] for k in ("scale", "growth_factor", "backoff_factor"))
    interval, tracker = state["growth_interval"], state["_growth_tracker"]
    if not all(is_number(v) for v in (scale, growth, backoff)):
        return "scale or factors are not numbers"
    if not (math.isfinite(scale) and SMALLEST_NORMAL <= scale < 2.0 ** 128):
        return (f"scale {scale:g} is not a positive normal float32, which the scaler holds "
                "(a resume would scale by zero: zero gradients unscaled by 1/0)")
    if not growth > 1.0 or not backoff < 1.0:
        return (f"growth factor {growth:g} or backoff factor {backoff:g}: GradScaler requires "
                "growth > 1 and backoff < 1")
    if not (is_whole(interval) and is_whole(tracker) and 0 <= tracker < interval):
        return (f"growth tracker {tracker!r} is not in [0, growth interval {interval!r}), "
                "where the scaler keeps it")
    return None
