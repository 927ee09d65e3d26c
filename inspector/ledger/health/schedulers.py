"""An LR scheduler's saved state against what `torch.optim.lr_scheduler` could have written:
its counters, its `base_lrs`, and the rate it holds against its schedule's closed form.

Read from the state's numbers only (no scheduler is built, no lambda of the state is called);
the ledger runs it on every save (`health.state_problems`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from inspector.run.optimizer_settings import COLLAPSE

# An LR scheduler's saved state against what `torch.optim.lr_scheduler` can write, with no
# history: a resumed schedule starts from `last_epoch` and `base_lrs`, which
# `load_state_dict` takes as they are, so one flipped bit of either moves every later learning
# rate (a cosine's step 40 read as 168 gave 0 at step 120 where 3.5e-3 was due) while every
# number stays finite and within bounds.
#
# What holds in every state torch's schedulers write, and is checked here:
#
# - `last_epoch == _step_count - 1`: both count the scheduler's steps (its constructor takes one
#   of each). They part only when a step is given an explicit epoch (deprecated since torch 1.4)
#   or the scheduler was built with `last_epoch=N` to resume a schedule; then the optimizer,
#   resumed along, counts `last_epoch` steps, so a `last_epoch` equal to any of its parameters'
#   `step` is believed too. Left out: a sub-scheduler of `SequentialLR` (which steps them with
#   explicit epochs at its milestones) and `CosineAnnealingWarmRestarts` (fractional epochs;
#   its own `0 <= T_cur < T_i` with `T_i` one of `T_0 * T_mult^k` is checked instead).
# - `base_lrs` are the `initial_lr` of its optimizer's parameter groups, which the first
#   scheduler of an optimizer sets and every later one reads; the optimizer is one saved in the
#   same state with as many groups, and the check holds if any such optimizer agrees (`CyclicLR`,
#   whose `base_lrs` are its own argument, is left out).
#
# `ReduceLROnPlateau` keeps neither counter pair nor `base_lrs` and is not judged; nor is
# `_last_lr` against the groups' `lr`, which a manual warm-up legitimately writes over between
# scheduler steps (Lightning's documented recipe).


def scheduler_problems(obj: Any) -> list[str]:
    """Every LR scheduler state in `obj` that torch's schedulers could not have written, one
    line each (empty when all hold)."""
    from inspector.core.flatten import dicts_in, is_optimizer_state

    optimizers = [state for _, state in dicts_in(obj, is_optimizer_state)]
    found = []
    schedulers = list(dicts_in(obj, _is_scheduler))
    judged = _closed_form_judged(obj, schedulers)
    for where, state in schedulers:
        said = _counter_problem(where, state, optimizers)
        said = said or _base_problem(state, optimizers) or _gamma_problem(where, state)
        if not said and where in judged:
            said = _closed_form_problem(state, optimizers)
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
    if not (is_whole(last) and is_whole(count)):
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
    if not (is_number(t_cur) and is_whole(t_i) and is_whole(t_0) and is_whole(mult)):
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


def _gamma_problem(where: str, state: dict) -> str | None:
    """ExponentialLR, StepLR and MultiStepLR: the last rate against `base_lr * gamma^k`, k the
    decays its counters have taken, within `COLLAPSE` either way. Torch chains each step from the
    last rate, so a `gamma` with a flipped exponent bit (0.99 -> 0.2475) leaves the rates of the
    steps before it in `_last_lr` and puts the closed form orders of magnitude apart; a manual
    warm-up writing the rate, or a second scheduler on the optimizer, moves it by far less."""
    gamma, last = _float(state.get("gamma")), state["last_epoch"]
    if gamma is None or gamma <= 0 or "max_lrs" in state or not is_whole(last) or last < 0 \
            or "._schedulers." in f".{where}":
        return None
    decays = _decays(state, last)
    rates = state.get("_last_lr")
    if decays is None or not isinstance(rates, list) or len(rates) != len(state["base_lrs"]):
        return None
    for base, rate in zip(map(_float, state["base_lrs"]), map(_float, rates), strict=True):
        if not base or not rate or base < 0 or rate < 0:
            continue
        apart = math.log2(rate) - math.log2(base) - decays * math.log2(gamma)
        if abs(apart) > math.log2(COLLAPSE):
            return (f"the rate it holds, {rate:.4g}, is 2^{apart:+.0f} times base_lr x gamma "
                    f"{gamma:g}^{decays}: its gamma changed during the run (a resume goes on "
                    "from this gamma)")
    return None


def _decays(state: dict, last: int) -> int | None:
    """How many times the scheduler has multiplied by `gamma` at `last_epoch` (None: not one of
    the three, or a counter out of shape)."""
    if "step_size" in state:
        size = state["step_size"]
        return last // size if is_whole(size) and size > 0 else None
    if "milestones" in state:
        marks = state["milestones"]
        if not isinstance(marks, dict) or not all(is_whole(m) and is_whole(c) for m, c in
                                                  marks.items()):
            return None
        return sum(count for mark, count in marks.items() if mark <= last)
    keys = set(state) - {"gamma", "base_lrs", "last_epoch", "_step_count", "_is_initial",
                         "_get_lr_called_within_step", "_last_lr", "verbose"}
    return None if keys else last


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
    if not is_number(value) or not math.isfinite(value):
        return None
    return float(value)


def _listed(values: list) -> str:
    shown = ", ".join(f"{v:g}" for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: Any) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)



# The rate a scheduler holds (`_last_lr`) against its schedule's closed form, for every torch
# scheduler whose rate is a function of its saved numbers: CosineAnnealingLR, LinearLR,
# PolynomialLR and ConstantLR (torch steps them by a chained ratio from the group's rate, which
# tracks the closed form to about 1e-11 of the base rate over 30,000 steps, resumes included),
# CosineAnnealingWarmRestarts and CyclicLR (computed afresh each step from their own numbers),
# OneCycleLR (from the `initial_lr`, `max_lr`, `min_lr` it keeps in its optimizer's groups) and
# the active part of a SequentialLR. A `T_max`, `eta_min`, `total_iters`, factor or power
# changed during the run leaves the rates of the steps before the change in the chained rate,
# and puts it off the closed form of the numbers saved: the state no run could write.
# Left out: LambdaLR and MultiplicativeLR (their functions are not in the state), a
# ChainedScheduler's parts, a SequentialLR's parts not running, CyclicLR with its own scale
# function, and a chained-ratio scheduler saved beside another scheduler of the same base rates
# (torch's documented chaining of two schedulers stepped back to back on one optimizer: each
# ratio then applies to the other's rate). A rate written by hand between the steps of a
# chained-ratio scheduler moves it off its closed form too, and is named.

CLOSED_FORM_TOLERANCE = 1e-6
"""How far, as a share of the schedule's scale (the largest of its base rates and `eta_min`),
the rate held may be from the closed form: clean runs stay within 1e-11 over 30,000 steps."""
CHAINED_RATIO = frozenset({"CosineAnnealingLR", "LinearLR", "PolynomialLR", "ConstantLR"})
"""The schedulers torch steps by a ratio from the group's rate (of those with a closed form)."""


def _closed_form_judged(obj: Any, schedulers: list[tuple[str, dict]]) -> set[str]:
    """Where the schedulers whose rate is held to the closed form are: each not inside a
    composite, or the running part of a SequentialLR; of the chained-ratio ones, not one
    `_rebuilt`, nor one beside another scheduler of the same base rates."""
    from inspector.core.flatten import dicts_in

    running = {f"{where}_schedulers.{index}." for where, seq in dicts_in(obj, _is_sequential)
               if (index := _running(seq)) is not None}
    alone = {where for where, _ in schedulers if "._schedulers." not in f".{where}"}
    bases = [tuple(map(_float, state["base_lrs"])) for where, state in schedulers
             if where in alone]
    return {where for where, state in schedulers if (where in running or where in alone) and not (
        _chained_ratio(state) and (_rebuilt(state) or (
            where in alone and bases.count(tuple(map(_float, state["base_lrs"]))) > 1)))}


def _rebuilt(state: dict) -> bool:
    """A scheduler built with `last_epoch=N` (the old resume idiom) or stepped with explicit
    epochs: its counters part, and a chained ratio then started from whatever rate the group
    held when it was built."""
    return state["last_epoch"] != state["_step_count"] - 1


def _is_sequential(obj: dict) -> bool:
    return isinstance(obj.get("_milestones"), list) and isinstance(obj.get("_schedulers"), list)


def _running(seq: dict) -> int | None:
    """The index of the part a SequentialLR state runs at its `last_epoch`."""
    marks, last = seq["_milestones"], seq.get("last_epoch")
    if not (is_whole(last) and all(is_whole(m) for m in marks)) or marks != sorted(marks):
        return None
    index = bisect_right(marks, last)
    return index if index < len(seq["_schedulers"]) else None


def _chained_ratio(state: dict) -> bool:
    return _kind(state) in CHAINED_RATIO


def _closed_form_problem(state: dict, optimizers: list[dict]) -> str | None:
    """The rate held against the closed form of the state's own numbers, per group (OneCycleLR:
    against each optimizer saved beside it that could be its own; it holds if one agrees)."""
    rates = state.get("_last_lr")
    bases = [_float(b) for b in state["base_lrs"]]
    last = state["last_epoch"]
    if not (isinstance(rates, list) and len(rates) == len(bases) and is_whole(last)
            and last >= 0):
        return None
    kind = _kind(state)
    candidates = _one_cycle(state, optimizers, last, len(bases)) if kind == "OneCycleLR" else (
        [_rates(FORMS[kind], state, bases, last)] if kind in FORMS else [])
    candidates = [c for c in candidates if c is not None]
    held = [_float(r) for r in rates]
    scale = max([abs(v) for v in (*bases, _float(state.get("eta_min"))) if v] + [0.0])
    off = [_off(c, held, scale) for c in candidates]
    if not off or None in off:
        return None
    group, want, rate = off[0]
    return (f"group {group} holds rate {rate:.6g} where {kind}'s closed form gives {want:.6g} at "
            f"step {last}: its schedule's numbers changed during the run (a resume goes on from "
            "these)")


def _off(expected: list[float | None], held: list[float | None], scale: float
         ) -> tuple[int, float, float] | None:
    """The first group whose rate held is off the expected one by more than the tolerance."""
    for group, (want, rate) in enumerate(zip(expected, held, strict=True)):
        if want is not None and rate is not None and \
                abs(rate - want) > CLOSED_FORM_TOLERANCE * max(scale, abs(want)):
            return group, want, rate
    return None


def _kind(state: dict) -> str | None:
    """Which torch scheduler wrote the state, by the keys only it has."""
    if "T_0" in state:
        return "CosineAnnealingWarmRestarts"
    if "max_lrs" in state:
        return "CyclicLR"
    if "_schedule_phases" in state:
        return "OneCycleLR"
    for key, kind in (("T_max", "CosineAnnealingLR"), ("start_factor", "LinearLR"),
                      ("power", "PolynomialLR"), ("factor", "ConstantLR")):
        if key in state:
            return kind
    return None


Form = Callable[[dict, float, int], float]


def _rates(form: Form, state: dict, bases: list[float | None], last: int
           ) -> list[float | None] | None:
    """Each group's closed-form rate; None when the state's numbers are out of shape."""
    try:
        return [None if b is None else form(state, b, last) for b in bases]
    except (ArithmeticError, ValueError, TypeError, KeyError):
        return None


def _num(state: dict, key: str, positive: bool = False) -> float:
    """A finite number of the state (ValueError otherwise, or when `positive` and not > 0)."""
    value = _float(state.get(key))
    if value is None or (positive and value <= 0):
        raise ValueError(key)
    return value


def _cosine(state: dict, base: float, last: int) -> float:
    eta = _num(state, "eta_min")
    return eta + (base - eta) * (1 + math.cos(math.pi * last / _num(state, "T_max", True))) / 2


def _linear(state: dict, base: float, last: int) -> float:
    start, end, total = (_num(state, "start_factor"), _num(state, "end_factor"),
                         _num(state, "total_iters", True))
    return base * (start + (end - start) * min(total, last) / total)


def _polynomial(state: dict, base: float, last: int) -> float:
    total = _num(state, "total_iters", True)
    return base * (1.0 - min(total, last) / total) ** _num(state, "power")


def _constant(state: dict, base: float, last: int) -> float:
    factor, total = _num(state, "factor"), _num(state, "total_iters", True)
    return base * (factor if last < total else 1.0)


def _restarts(state: dict, base: float, last: int) -> float:
    eta = _num(state, "eta_min")
    return eta + (base - eta) * (1 + math.cos(math.pi * _num(state, "T_cur")
                                              / _num(state, "T_i", True))) / 2


CYCLIC_SCALES: dict[str, Callable[[float, float], float]] = {
    "triangular": lambda x, gamma: 1.0,
    "triangular2": lambda x, gamma: 1 / (2.0 ** (x - 1)),
    "exp_range": lambda x, gamma: gamma ** x,
}
"""CyclicLR's built-in scale functions by mode (a custom one is not in the state)."""


def _cyclic(state: dict, base: float, last: int) -> float:
    if state.get("_scale_fn_custom") is not None or state.get("mode") not in CYCLIC_SCALES:
        raise ValueError("custom scale")
    index = [_float(b) for b in state["base_lrs"]].index(base)
    top = _float(state["max_lrs"][index])
    if top is None:
        raise ValueError("max_lrs")
    total, ratio = _num(state, "total_size", True), _num(state, "step_ratio", True)
    cycle = math.floor(1 + last / total)
    x = 1.0 + last / total - cycle
    factor = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
    scale = CYCLIC_SCALES[state["mode"]](
        cycle if state.get("scale_mode") == "cycle" else last, _num(state, "gamma"))
    return base + (top - base) * factor * scale


FORMS: dict[str, Form] = {
    "CosineAnnealingLR": _cosine, "LinearLR": _linear, "PolynomialLR": _polynomial,
    "ConstantLR": _constant, "CosineAnnealingWarmRestarts": _restarts, "CyclicLR": _cyclic,
}
"""Each scheduler's rate at `last_epoch` from its saved numbers and one base rate."""
ONE_CYCLE_RATES = frozenset({"initial_lr", "max_lr", "min_lr"})
"""The group keys a OneCycleLR phase names as its start and end rates."""


def _one_cycle(state: dict, optimizers: list[dict], last: int, groups: int
               ) -> list[list[float | None] | None]:
    """OneCycleLR's rate per group of each optimizer with as many groups holding its rates."""
    phases = state.get("_schedule_phases")
    anneal = {"cos": lambda a, b, pct: b + (a - b) / 2.0 * (math.cos(math.pi * pct) + 1),
              "linear": lambda a, b, pct: (b - a) * pct + a}.get(state.get("_anneal_func_type"))
    if anneal is None or not isinstance(phases, list) or not phases:
        return []
    found = []
    for optimizer in optimizers:
        param_groups = optimizer["param_groups"]
        if len(param_groups) == groups and all(isinstance(g, dict) for g in param_groups):
            found.append(_phase_rates(phases, param_groups, last, anneal))
    return found


def _phase_rates(phases: list, param_groups: list[dict], last: int,
                 anneal: Callable[[float, float, float], float]) -> list[float | None] | None:
    """Each group's OneCycleLR rate at step `last`, as `OneCycleLR.get_lr` computes it."""
    out: list[float | None] = []
    for group in param_groups:
        start = 0.0
        for i, phase in enumerate(phases):
            if not isinstance(phase, dict):
                return None
            end = _float(phase.get("end_step"))
            names = (phase.get("start_lr"), phase.get("end_lr"))
            if end is None or not all(n in ONE_CYCLE_RATES for n in names) or end == start:
                return None
            if last <= end or i == len(phases) - 1:
                a, b = (_float(group.get(n)) for n in names)
                out.append(None if a is None or b is None
                           else anneal(a, b, (last - start) / (end - start)))
                break
            start = end
    return out
