"""An optimizer's hyper-parameters, one registry (`BOUNDS`, `FIXED`, `SCHEDULED`): where each
may lie (what the ledger checks before it seals a state and the guard after every optimizer
step), which no schedule writes (remembered at first sight and journaled, so a restart compares
with the run's first value, not with whatever it loaded), and how far a scheduled one may move
in one step (what only the guard, watching every step, can see).

Torch's constructors refuse a learning rate, `eps`, `weight_decay`, `momentum` and the like below
zero and a beta outside [0, 1) (`Invalid learning rate`); `load_state_dict` and a write into
`param_groups` never check again, and a negated learning rate climbs the loss while every number
stays finite. Finite is not healthy either: a momentum of 1.8 (0.9 with one exponent bit
flipped) grows the buffer geometrically, an `eps` of 1.8e300 freezes Adam. Torch-free, so both
writers import it: a one-element tensor (a tensor learning rate) is read with `float`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from inspector.run import journal

EPS_CEILING = 1.0
"""The largest `eps` admitted: TensorFlow's Adam documentation advises 1.0 or 0.1 for Inception
on ImageNet, and RMSProp's Inception recipe uses 1.0; no published recipe goes above. The top
exponent bit of any `eps` below 1 flipped lands past 1e300; the lower bits keep it small, and
the `FIXED` comparison names those."""


@dataclass(frozen=True)
class Bound:
    """Where a setting may lie: from 0 (included) to `high`, `high` included when `closed`."""

    high: float = math.inf
    closed: bool = True

    def admits(self, value: float) -> bool:
        """Whether `value` is finite and within the bound."""
        return math.isfinite(value) and value >= 0 and (
            value <= self.high if self.closed else value < self.high)


FRACTION = Bound(1.0, closed=False)
"""A decay in [0, 1): at 1 or above a momentum buffer or a moving average grows without end
(SGD's momentum 0.9 with exponent bit 52 flipped is 1.8) or never moves (RMSprop's alpha 1)."""
BOUNDS: dict[str, Bound] = {
    "lr": Bound(), "weight_decay": Bound(), "lr_decay": Bound(),
    "initial_accumulator_value": Bound(), "momentum_decay": Bound(),
    "eps": Bound(EPS_CEILING),
    "momentum": FRACTION, "dampening": FRACTION, "alpha": FRACTION, "betas": FRACTION,
    "rho": Bound(1.0),
}
"""Each checked hyper-parameter's bound (`betas`: each of its values). Adadelta's `rho` may be
1, as its constructor admits: its update is then plain SGD, no harm; RMSprop's `alpha` of 1
keeps its average of squares at zero and divides the gradient by `eps`."""
RADIUS_MARKS = ("adaptive", "momentum", "betas")
"""Keys beside `rho` that mark a sharpness-aware wrapper's group, whose `rho` is a radius
(ASAM's 2.0), not Adadelta's decay: there `rho` is bounded from 0 only."""

FIXED = ("eps", "maximize", "amsgrad", "nesterov", "dampening", "centered", "lr_decay",
         "initial_accumulator_value", "momentum_decay", "decoupled_weight_decay")
"""Settings no scheduler of torch or transformers writes (a learning rate, momentum, betas and
weight decay are scheduled; these are not): one that changes between two steps, or differs
from the run's journaled value after a restart, was written by something else. A flipped
exponent bit in `eps` (1e-8 -> 2.56e-6) is finite and in bounds and slows Adam; `maximize`
set turns descent into ascent."""
FIXED_ITEMS = (("betas", 1),)
"""Items of a scheduled setting that no scheduler writes, checked as `FIXED` under the name
`betas.1`: OneCycleLR and CyclicLR (`cycle_momentum`) cycle beta1 and keep beta2, and no
scheduler of torch or transformers writes it. Adam's beta2 with exponent bit 53 flipped (0.999
-> 0.24975) is admitted, and below beta1^2 no bound holds its moments (`ledger.health.moments`)."""
SCHEDULED = ("lr", "weight_decay")
"""Settings a schedule moves (DINO's weight decay rises 10x over a run), whose rise in one step
the guard bounds (`rose`)."""

COLLAPSE = 2.0 ** 16
"""How far a learning rate may fall in one step, to a value above zero, before the guard names
it: a flipped exponent bit that shrinks it by 2^16 or more (float64 bits 56 to 61) stalls the
run with every value finite and in range, while the schedulers of torch and transformers fall
by at most a few x per step (OneCycleLR's last step over 20 annealing steps: ~1,500x)."""
RISE = 2.0 ** 8
"""How far a scheduled setting may rise in one step above the highest value its group had: a
flipped exponent bit 55 multiplies it by exactly 2^8 (lr 1e-3 -> 0.256, weight decay 5e-4 ->
0.128), while a warm-up climbs a few x per step from its first rate, and a learning rate that
starts at exactly zero is free (its first rate above zero is the baseline; `WARMS_FROM_ZERO`)."""
KIND = "optimizer.settings"
"""The journal record of a param-group list's `FIXED` settings: `shape` (each group's
parameter count), `groups` (each group's values), `accepted` (a deliberate change,
`Guard.accept_settings`)."""


def learning_rate(group: Any) -> float | None:
    """The group's learning rate as a number (None when it has none a check can read)."""
    return next((value for _, value in _numbers(group, ("lr",))), None)


def scheduled(group: Any) -> dict[str, float]:
    """The group's `SCHEDULED` settings that are numbers."""
    return dict(_numbers(group, SCHEDULED))


def collapsed(before: float | None, now: float | None, highest: float = 0.0) -> bool:
    """Whether a learning rate fell by more than `COLLAPSE` in one step to a value above zero,
    or to exactly zero from above half the `highest` it had (a schedule's end approaches zero
    over steps; a flipped scheduler step count jumps there)."""
    if before is None or now is None or not math.isfinite(before):
        return False
    return 0 < now < before / COLLAPSE or (now == 0 < highest / 2 < before)


WARMS_FROM_ZERO = ("lr",)
"""The scheduled settings a schedule may start at exactly zero and raise freely from there (a
warm-up; its first rate above zero is the baseline)."""
FROM_ZERO = 1.0
"""How high any other scheduled setting held at exactly zero may go in one step: 0.0 with bit 62
flipped is 2.0 (a weight decay that shrinks every weight each step; every other single flip of
0.0 lands below 1e-150, harmless), while a weight-decay schedule from zero climbs in small steps
(DINO's ends at 0.4)."""


def rise_threshold(key: str, highest: float | None) -> float | None:
    """The value at or above which a scheduled setting has risen too far in one step: `RISE`
    times the `highest` its group had, `FROM_ZERO` above a held zero; None where it may rise
    freely (nothing seen yet, or a learning rate warming up from zero)."""
    if highest is None or (highest == 0 and key in WARMS_FROM_ZERO):
        return None
    return highest * RISE if highest else FROM_ZERO


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
    """The group's hyper-parameters outside their `BOUNDS`, as (name, value), each beta
    apart; empty for a group that is not a dict."""
    radius = isinstance(group, dict) and any(key in group for key in RADIUS_MARKS)
    return [(key, value) for key, value in _numbers(group)
            if not (Bound() if key == "rho" and radius else BOUNDS[key]).admits(value)]


def _numbers(group: Any, keys: Any = BOUNDS) -> Iterator[tuple[str, float]]:
    """(key, value) of the group's hyper-parameters among `keys` that are plain numbers or
    one-element tensors."""
    if not isinstance(group, dict):
        return
    for key in keys:
        value = group.get(key)
        for one in (value if key == "betas" and isinstance(value, (tuple, list)) else [value]):
            number = isinstance(one, (int, float)) and not isinstance(one, bool)
            numel = getattr(one, "numel", None)
            if number or (callable(numel) and numel() == 1):
                yield key, float(one)


def shape(groups: list) -> list[int]:
    """A param-group list's shape: each group's parameter count (what a saved state dict and
    a live optimizer share)."""
    return [len(g.get("params", ())) if isinstance(g, dict) else -1 for g in groups]


def journaled(run_dir: str | os.PathLike[str]) -> list[dict]:
    """The run's `KIND` records, in journal order (none when it has no journal)."""
    path = journal.journal_path(run_dir)
    if not path.exists():
        return []
    return [dict(e.record) for e in journal.read(path).sound if e.kind == KIND]


def baseline_indices(records: list[dict], groups: list) -> list[int]:
    """The positions in `records` of the journaled `FIXED` values a param-group list of this
    shape may hold: each record of its shape since the last `accept` (whose records, one per
    optimizer, share one time): one per optimizer of that shape, which may differ."""
    same = [i for i, r in enumerate(records)
            if r.get("shape") == shape(groups) and isinstance(r.get("groups"), list)]
    accepted = [records[i].get("time") for i in same if records[i].get("accepted")]
    if not accepted:
        return same
    first = next(i for i in same if records[i].get("accepted")
                 and records[i].get("time") == accepted[-1])
    return [i for i in same if i >= first]


def closest(groups: list, records: list[dict], indices: list[int]) -> int:
    """Of the records at `indices`, the one whose values differ least from `groups`'."""
    return min(indices, key=lambda i: len(differences(groups, records[i]["groups"])))


def differences(groups: list, baseline: list[dict]) -> list[tuple[int, str, Any, Any]]:
    """(group index, key, value now, journaled value) of each `FIXED` setting that differs
    (one out of its bounds is named as that, not again here)."""
    return [(i, key, value, base[key])
            for i, (group, base) in enumerate(zip(groups, baseline, strict=False))
            for key, value in fixed_values(group).items()
            if isinstance(base, dict) and key in base and value != base[key]
            and key not in dict(refused(group))]


def settings_record(groups: list, *, accepted: bool = False, key: str | None = None,
                    at: float | None = None) -> dict:
    """A param-group list's `FIXED` settings as a `KIND` record's fields; `key`: where a save
    holds this optimizer's state (`optG.`), `at`: the time (one for an accept's records)."""
    return {"shape": shape(groups), "groups": [fixed_values(g) for g in groups],
            "accepted": accepted, "time": time.time() if at is None else at,
            **({"key": key} if key else {})}


def record(run_dir: str | os.PathLike[str], fields: dict) -> None:
    """Journal a `settings_record` as the run's baseline for its shape."""
    journal.append(journal.journal_path(run_dir), KIND, fields)


def saved_problems(state_groups: list, run_dir: str | os.PathLike[str],
                   key: str | None = None) -> list[str]:
    """A saved param-group list's `FIXED` settings against the run's journaled baselines of its
    shape, in words: one per optimizer, so it passes when it holds one of them. With `key`
    (where the save holds it, `optG.`), the baselines journaled under that key are its own, and
    without any, those the guard journaled (no key); when only other optimizers' baselines of
    its shape are journaled (or none), it is a new optimizer and, in bounds, its values become
    its baseline. Without `key`, every baseline of its shape."""
    records = journaled(run_dir)
    known = baseline_indices(records, state_groups)
    if key:
        known = ([i for i in known if records[i].get("key") == key]
                 or [i for i in known if not records[i].get("key")])
    if not known:
        if not any(refused(g) for g in state_groups):
            record(run_dir, settings_record(state_groups, key=key))
        return []
    if any(not differences(state_groups, records[i]["groups"]) for i in known):
        return []
    i, name, value, was = differences(state_groups,
                                      records[closest(state_groups, records, known)]["groups"])[0]
    return [f"param group {i}: {name} {value!r}, journaled {was!r} when the run first showed "
            "it; no schedule writes it (a deliberate change: Guard.accept_settings)"]
