"""An optimizer's hyper-parameters where torch's own optimizers admit them: what the ledger
checks before it seals a state and the guard after every optimizer step; and what only the
guard, watching every step, can see: a learning rate that collapsed in one step (`collapsed`),
and a setting no schedule writes that changed (`FIXED`).

Torch's constructors refuse a learning rate, `eps`, `weight_decay`, `momentum` and the like below
zero and a beta outside [0, 1) (`Invalid learning rate`); `load_state_dict` and a write into
`param_groups` never check again, and a negated learning rate climbs the loss while every number
stays finite. Finite too: a flipped exponent that makes one infinite passes those checks, not a
training step. Torch-free, so both writers import it: a one-element tensor (a tensor learning
rate) is read with `float`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

NON_NEGATIVE = ("lr", "eps", "weight_decay", "momentum", "alpha", "lr_decay",
                "initial_accumulator_value", "momentum_decay", "rho")
"""Hyper-parameters torch's optimizers admit at zero or above (and finite). Where another
optimizer uses a name more widely only the wider bound is kept: `rho` is Adadelta's decay in
[0, 1], and a sharpness-aware wrapper's radius (ASAM's 2.0)."""
FRACTIONS = ("betas",)
"""Hyper-parameters whose every value torch's optimizers admit in [0, 1) (and finite)."""


FIXED = ("eps", "maximize", "amsgrad", "nesterov", "dampening", "centered", "lr_decay",
         "initial_accumulator_value", "momentum_decay", "decoupled_weight_decay")
"""Settings no scheduler of torch or transformers writes (a learning rate, momentum, betas and
weight decay are scheduled; these are not): one that changes between two steps was written by
something else. A flipped exponent bit in `eps` (1e-8 -> 1.8e300) is finite and admitted and
freezes Adam; `maximize` set turns descent into ascent."""
FIXED_ITEMS = (("betas", 1),)
"""Items of a scheduled setting that no scheduler writes, checked as `FIXED` under the name
`betas.1`: OneCycleLR and CyclicLR (`cycle_momentum`) cycle beta1 and keep beta2, and no
scheduler of torch or transformers writes it. Adam's beta2 with exponent bit 53 flipped (0.999
-> 0.24975) is admitted, and below beta1^2 no bound holds its moments (`ledger.moments`)."""

COLLAPSE = 2.0 ** 16
"""How far a learning rate may fall in one step, to a value above zero, before the guard names
it: a flipped exponent bit that shrinks it by 2^16 or more (float64 bits 56 to 61) stalls the
run with every value finite and in range, while the schedulers of torch and transformers fall
by at most a few x per step (OneCycleLR's last step over 20 annealing steps: ~1,500x)."""


def learning_rate(group: Any) -> float | None:
    """The group's learning rate as a number (None when it has none a check can read)."""
    return next((value for key, value in _numbers(group) if key == "lr"), None)


def collapsed(before: float | None, now: float | None) -> bool:
    """Whether a learning rate fell by more than `COLLAPSE` in one step, to a value above zero
    (zero is a schedule's end or a freeze, both meant)."""
    return (before is not None and now is not None and math.isfinite(before)
            and 0 < now < before / COLLAPSE)


def fixed_values(group: Any) -> dict[str, Any]:
    """The group's `FIXED` settings and `FIXED_ITEMS` it holds, as they are (numbers and
    flags; an item as `KEY.INDEX`)."""
    if not isinstance(group, dict):
        return {}
    found = {key: group[key] for key in FIXED if key in group and _plain(group[key])}
    for key, i in FIXED_ITEMS:
        value = group.get(key)
        if isinstance(value, (tuple, list)) and len(value) > i and _plain(value[i]):
            found[f"{key}.{i}"] = value[i]
    return found


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float))


def refused(group: Any) -> list[tuple[str, float]]:
    """The group's hyper-parameters torch's optimizers refuse, as (name, value), each beta
    apart; empty for a group that is not a dict."""
    return [(key, value) for key, value in _numbers(group) if not _admitted(key, value)]


def _numbers(group: Any) -> Iterator[tuple[str, float]]:
    """(key, value) of the group's checked hyper-parameters that are plain numbers or
    one-element tensors."""
    if not isinstance(group, dict):
        return
    for key in NON_NEGATIVE + FRACTIONS:
        value = group.get(key)
        for one in (value if key in FRACTIONS and isinstance(value, (tuple, list)) else [value]):
            number = isinstance(one, (int, float)) and not isinstance(one, bool)
            numel = getattr(one, "numel", None)
            if number or (callable(numel) and numel() == 1):
                yield key, float(one)


def _admitted(key: str, value: float) -> bool:
    return math.isfinite(value) and value >= 0 and (value < 1 or key not in FRACTIONS)
