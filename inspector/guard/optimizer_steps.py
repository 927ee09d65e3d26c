"""The optimizer steps the guard's hooks counted, held against the step counters an optimizer
keeps (Adam's `state[p]["step"]`, and every torch optimizer's that keeps one): a counter
decides the bias corrections (Adam's effective learning rate), and `load_state_dict` takes any
whole number, so a counter flipped from 40 to 2,621,440 resumes at several times the rate.

Each optimizer is first read at the post-hook of the first step the guard sees (what each
parameter's counter holds then); from there every hooked step adds exactly one to the counter
of every parameter that had a gradient (torch's optimizers skip a parameter whose `grad` is
None, which the guard's skip makes of every one), so at a save every counter must be what it
held plus the steps it took since, no more and no less. A `load_state_dict` replaces the
optimizer's `state` dict: the count starts again at the next step. The saved copy of the
state (`state_dict()`, numbered parameters) is judged against every counted optimizer whose
param groups have its shape, and passes when one of them agrees (two same-shaped optimizers
stepped in turn).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from inspector.core.flatten import dicts_in, is_optimizer_state
from inspector.guard.weights.models import Models

STEP = "step"
SHOWN = 3
"""How many disagreeing counters a problem names (the rest counted)."""
DEPTH = 6
"""How deep in a saved state optimizer state dicts are looked for (Lightning's list: 2)."""


@dataclass
class _Count:
    """One optimizer's counters as first read, and the hooked steps since."""

    optimizer: weakref.ref
    state_id: int
    """`id(optimizer.state)` when first read: a `load_state_dict` replaces that dict."""
    first: dict[int, float]
    """Each parameter's counter (by `id`) at the first counted step, after it."""
    steps: int = 0
    untracked: set[int] = field(default_factory=set)
    """The parameters (by `id`) that had a gradient at the first counted step and no counter
    after it: this optimizer keeps none for them in its `state` (a sharded optimizer's outer
    one, consolidated later), so none is judged."""
    skipped: dict[int, int] = field(default_factory=dict)
    """Per parameter (by `id`), the hooked steps since the first in which it had no gradient."""


class OptimizerSteps:
    """Every optimizer the guard saw step (held weakly) and its counted steps; `saved` holds a
    state about to be saved to the guard's record (the guard's `run.health_gate` check)."""

    def __init__(self, models: Models) -> None:
        self.models = models
        self.total = 0
        """Every post-hook call (nested ones too): `Owners.judge` waits for the first."""
        self.seen: weakref.WeakSet = weakref.WeakSet()
        self.counts: dict[int, _Count] = {}
        """By `id(optimizer.state)`: a wrapper (accelerate's) shares its optimizer's state."""
        self.depth: dict[int, int] = {}
        """Steps begun and not ended, by state: a wrapper's step runs its optimizer's inside."""

    def __iter__(self) -> Iterator[torch.optim.Optimizer]:
        return iter(list(self.seen))

    def stepping(self, optimizer: Any) -> None:
        """A step begins (the pre-hook)."""
        key = id(optimizer.state)
        self.depth[key] = self.depth.get(key, 0) + 1

    def stepped(self, optimizer: Any) -> None:
        """A step ended (the post-hook): counted once, at the outermost of nested steps."""
        self.total += 1
        self.seen.add(optimizer)
        state = optimizer.state
        key = id(state)
        depth = self.depth.pop(key, 1) - 1
        if depth > 0:
            self.depth[key] = depth
            return
        count = self.counts.get(key)
        if count is None or count.optimizer() is None:
            self._forget()
            first = _counters(state)
            untracked = {id(p) for p in _params(optimizer)
                         if p.grad is not None and id(p) not in first}
            self.counts[key] = _Count(weakref.ref(optimizer), key, first, untracked=untracked)
            return
        count.steps += 1
        for p in _params(optimizer):
            if p.grad is None:
                count.skipped[id(p)] = count.skipped.get(id(p), 0) + 1

    def saved(self, state: Any) -> list[str]:
        """What a save's `state` holds against the guard's record: its copy of the watched
        weights (`weights.saved`) and its optimizers' step counters (`problems`)."""
        return self.models.saved_problems(state) + self.problems(state)

    def problems(self, saved: Any) -> list[str]:
        """Every live optimizer's counters and every optimizer state dict in `saved` that
        disagree with the counted steps, in words."""
        names = self.models.param_names()
        out = []
        live = self._live()
        said = []
        for count, optimizer in live:
            params = _params(optimizer)
            found = {id(p): v for p, v in _counters_of(optimizer.state, params).items()}
            said.append(_wrong(count, params, found))
            out += _said("the optimizer's", said[-1], names)
        for where, state in dicts_in(saved, is_optimizer_state, limit=DEPTH):
            verdicts = [_wrong(count, params, found) for count, optimizer in live
                        if (found := _numbered(state, params := _params(optimizer)))
                        is not None]
            # the saved counters the live ones already named (state_dict() shares them) once
            if verdicts and all(verdicts) and verdicts[0] not in said:
                out += _said(f"saved {where.rstrip('.') or 'optimizer'}", verdicts[0], names)
        return out

    def _live(self) -> list[tuple[_Count, Any]]:
        """The counted optimizers still alive whose state is the one first read."""
        self._forget()
        return [(c, opt) for c in self.counts.values()
                if (opt := c.optimizer()) is not None and id(opt.state) == c.state_id]

    def _forget(self) -> None:
        """Drop the counts of optimizers gone or reloaded (their state dict replaced)."""
        self.counts = {k: c for k, c in self.counts.items()
                       if (opt := c.optimizer()) is not None and id(opt.state) == k}


def _params(optimizer: Any) -> list[torch.Tensor]:
    """The optimizer's parameters in `state_dict()`'s numbering (group by group)."""
    return [p for g in optimizer.param_groups for p in g["params"]]


def _counters(state: dict) -> dict[int, float]:
    """Each parameter's step counter (by `id`) in a live optimizer's `state`."""
    return {id(p): v for p, v in _counters_of(state, list(state)).items()}


def _counters_of(state: Any, keys: list[Any]) -> dict[Any, float]:
    """The step counters `state[key]["step"]` holds (a number or a one-element tensor), for
    the keys that have one (read at a save and at an optimizer's first counted step only)."""
    return {k: float(v) for k in keys if isinstance(s := state.get(k), dict)
            and _counter(v := s.get(STEP))}


def _counter(value: Any) -> bool:
    """Whether `value` is a step counter: a number, or a tensor of one element."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbered(saved: dict, params: list[torch.Tensor]) -> dict[int, float] | None:
    """A saved optimizer state dict's counters by the live parameter (`id`) each number
    stands for; None when its param groups do not have the live optimizer's shape."""
    groups = [g.get("params") for g in saved["param_groups"] if isinstance(g, dict)]
    numbers = [i for g in groups if isinstance(g, (list, tuple)) for i in g]
    if len(numbers) != len(params):
        return None
    by_number = dict(zip(numbers, params, strict=True))
    counters = _counters_of(saved["state"], [n for n in saved["state"] if n in by_number])
    return {id(by_number[n]): v for n, v in counters.items()}


def _wrong(count: _Count, params: list[torch.Tensor], found: dict[int, float]
           ) -> list[tuple[int, float, int]]:
    """(parameter id, counter, counted) for each counter not what the counted steps make."""
    out = []
    for p in params:
        if (value := found.get(id(p))) is None or id(p) in count.untracked:
            continue
        expected = count.first.get(id(p), 0.0) + count.steps - count.skipped.get(id(p), 0)
        if value != expected:
            out.append((id(p), value, int(expected)))
    return out


def _said(what: str, wrong: list[tuple[int, float, int]], names: dict[int, str]) -> list[str]:
    """One line for the disagreeing counters of one optimizer state."""
    if not wrong:
        return []
    shown = [f"{names.get(pid, 'a parameter')}: step {value:.10g}, counted {expected}"
             for pid, value, expected in wrong[:SHOWN]]
    more = f" and {len(wrong) - SHOWN} more" if len(wrong) > SHOWN else ""
    return [f"optimizer-step: {what} step counters are not the steps the guard counted "
            f"(each hooked step adds one per parameter with a gradient): "
            + "; ".join(shown) + more]


def weak_hook(owner: Any, method: str) -> Callable[..., None]:
    """A global optimizer hook calling one owner's `method(optimizer)`, holding the owner
    weakly (a guard that is gone costs nothing and is not kept alive by the hook)."""
    ref = weakref.ref(owner)

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if (alive := ref()) is not None:
            getattr(alive, method)(optimizer)
    return hook
