"""A mixed-precision gradient scaler's saved state where `torch.amp.GradScaler` can write it.

Its constructor requires a growth factor above 1 and a backoff factor below 1; its update keeps
the growth tracker in [0, growth interval) and the scale a positive float32 (a float64 in the
state dict, but the scaler holds it as a float32 tensor). A flipped exponent bit in a saved
scale (65536 -> 2^-1008, zero as a float32) leaves every number finite, yet after a resume the
scaled loss is zero and its gradients are unscaled by 1/0: the first step turns the weights
NaN (CPU, torch 2.13), and `run latest` kept choosing it.
"""

from __future__ import annotations

import math
from typing import Any

from inspector.ledger.moments import dicts_in

KEYS = frozenset({"scale", "growth_factor", "backoff_factor", "growth_interval",
                  "_growth_tracker"})
"""The keys of `GradScaler.state_dict()` (an enabled scaler's)."""
SMALLEST_NORMAL = 2.0 ** -126
"""The smallest positive normal float32: below it the scale the scaler holds is subnormal or 0."""


def scaler_problems(obj: Any) -> list[str]:
    """Every gradient scaler state in `obj` that `GradScaler` could not have written, one line
    each (empty when all hold)."""
    return [f"{where}gradient scaler: {said}"
            for where, state in dicts_in(obj, lambda d: set(d) == KEYS)
            if (said := _problem(state))]


def _problem(state: dict) -> str | None:
    scale, growth, backoff = (state[k] for k in ("scale", "growth_factor", "backoff_factor"))
    interval, tracker = state["growth_interval"], state["_growth_tracker"]
    if not all(_number(v) for v in (scale, growth, backoff)):
        return "scale or factors are not numbers"
    if not (math.isfinite(scale) and SMALLEST_NORMAL <= scale < 2.0 ** 128):
        return (f"scale {scale:g} is not a positive normal float32, which the scaler holds "
                "(a resume would scale by zero: zero gradients unscaled by 1/0)")
    if not growth > 1.0 or not backoff < 1.0:
        return (f"growth factor {growth:g} or backoff factor {backoff:g}: GradScaler requires "
                "growth > 1 and backoff < 1")
    if not (_whole(interval) and _whole(tracker) and 0 <= tracker < interval):
        return (f"growth tracker {tracker!r} is not in [0, growth interval {interval!r}), "
                "where the scaler keeps it")
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
