"""An LR scheduler's saved state against what `torch.optim.lr_scheduler` can write, with no
history: a resumed schedule starts from `last_epoch` and `base_lrs`, which
`load_state_dict` takes as they are, so one flipped bit of either moves every later learning
rate (a cosine's step 40 read as 168 gave 0 at step 120 where 3.5e-3 was due) while every
number stays finite and within bounds.

What holds in every state torch's schedulers write, and is checked here:

- `last_epoch == _step_count - 1`: both count the scheduler's steps (its constructor takes one
  of each). They part only when a step is given an explicit epoch (deprecated since torch 1.4)
  or the scheduler was built with `last_epoch=N` to resume a schedule; then the optimizer,
  resumed along, counts `last_epoch` steps, so a `last_epoch` equal to any of its parameters'
  `step` is believed too. Left out: a sub-scheduler of `SequentialLR` (which steps them with
  explicit epochs at its milestones) and `CosineAnnealingWarmRestarts` (fractional epochs;
  its own `0 <= T_cur < T_i` with `T_i` one of `T_0 * T_mult^k` is checked instead).
- `base_lrs` are the `initial_lr` of its optimizer's parameter groups, which the first
  scheduler of an optimizer sets and every later one reads; the optimizer is one saved in the
  same state with as many groups, and the check holds if any such optimizer agrees (`CyclicLR`,
  whose `base_lrs` are its own argument, is left out).

`ReduceLROnPlateau` keeps neither counter pair nor `base_lrs` and is not judged; nor is
`_last_lr` against the groups' `lr`, which a manual warm-up legitimately writes over between
scheduler steps (Lightning's documented recipe).
"""

from __future__ import annotations

import math
from typing import Any

from inspector.ledger.moments import dicts_in, is_optimizer_state


def scheduler_problems(obj: Any) -> list[str]:
    """Every LR scheduler state in `obj` that torch's schedulers could not have written, one
    line each (empty when all hold)."""
    optimizers = [state for _, state in dicts_in(obj, is_optimizer_state)]
    found = []
    for where, state in dicts_in(obj, _is_scheduler):
        said = _counter_problem(where, state, optimizers)
        said = said or _base_problem(state, optimizers)
        if said:
            found.append(f"LR scheduler {where.rstrip('.') or 'state'}: {said}")
    return found


def _is_scheduler(obj: dict) -> bool:
    return "last_epoch" in obj and "_step_count" in obj and isinstance(obj.get("base_lrs"), list)


def _counter_problem(where: str, state: dict, optimizers: list[dict]) -> str | None:
    """`last_epoch` against the scheduler's own step count, else the optimizers' steps."""
    if "T_cur" in state:
        return _restarts_problem(state)
    if "._schedulers." in f".{where}":
        return None
    last, count = state["last_epoch"], state["_step_count"]
    if not (_whole(last) and _whole(count)):
        return None
    if last == count - 1 or any(last in _steps(o) for o in optimizers):
        return None
    steps = sorted({s for o in optimizers for s in _steps(o)})
    told = f", its optimizer's at {_listed(steps)}" if steps else ""
    return (f"last_epoch {last} but it took {count - 1} steps{told} (a resume would start "
            "its schedule there)")


def _restarts_problem(state: dict) -> str | None:
    """`CosineAnnealingWarmRestarts`: its position in the current cycle within the cycle."""
    t_cur, t_i, t_0, mult = (state.get(k) for k in ("T_cur", "T_i", "T_0", "T_mult"))
    if not (_number(t_cur) and _whole(t_i) and _whole(t_0) and _whole(mult)):
        return None
    if t_0 < 1 or mult < 1 or not _cycle_length(t_i, t_0, mult):
        return f"cycle length T_i {t_i} is not T_0 {t_0} x T_mult {mult}^k"
    if not 0 <= t_cur < t_i:
        return f"T_cur {t_cur} is outside its cycle [0, T_i {t_i})"
    return None


def _cycle_length(t_i: int, t_0: int, mult: int) -> bool:
    length = t_0
    while length < t_i and mult > 1:
        length *= mult
    return length == t_i


def _base_problem(state: dict, optimizers: list[dict]) -> str | None:
    """`base_lrs` against the `initial_lr` of the optimizers with as many groups."""
    if "max_lrs" in state:  # CyclicLR
        return None
    base = [_float(v) for v in state["base_lrs"]]
    starts = [[_float(g.get("initial_lr")) for g in o["param_groups"]] for o in optimizers
              if len(o["param_groups"]) == len(base)]
    starts = [s for s in starts if None not in s]
    if not starts or None in base or any(s == base for s in starts):
        return None
    return (f"base_lrs {_listed(base)} are not its optimizer's initial_lr "
            f"{_listed(starts[0])} (every later learning rate is scaled from them)")


def _steps(optimizer: dict) -> set[int]:
    """The whole-number `step` counts of an optimizer state dict's parameters."""
    counts = set()
    for param in optimizer["state"].values():
        step = _float(param.get("step")) if isinstance(param, dict) else None
        if step is not None and step.is_integer():
            counts.add(int(step))
    return counts


def _float(value: Any) -> float | None:
    """A number, or a one-element tensor, as a finite float; None otherwise."""
    if hasattr(value, "numel") and value.numel() == 1:
        value = value.item()
    if not _number(value) or not math.isfinite(value):
        return None
    return float(value)


def _listed(values: list) -> str:
    shown = ", ".join(f"{v:g}" for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
