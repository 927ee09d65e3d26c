"""Whether the tensors the guard watches are still the ones the model computes with and an
optimizer steps.

A watch holds the model's Parameter and buffer objects as it first saw them. A load with
`assign=True`, a submodule replaced, weights tied or untied (`head.weight =
nn.Parameter(...)`) leave it reading tensors the model no longer uses: a flip in the new ones
is never named. So every check compares the objects each of the model's modules holds now with
the ones the watch saw (`layout`: one id per parameter, buffer and child of every module, a
plain walk of dicts, ~1.7 µs for a 4-tensor MLP, ~22 µs for a 105-tensor ResNet-ish CNN on a
busy core; `model.parameters()` walks the same objects ~5x slower), and a change no
`Guard.accept_weights` announced is `weights-replaced`, naming each tensor replaced, added or
removed (`replaced`).

A parameter that gets a gradient while no optimizer that steps the model holds it (one
replaced after its optimizer was built, a fresh optimizer missing a group) never learns:
`param-orphaned` names it once (`Owners`), at the first check after an optimizer step
has followed the check that first saw it so: a second optimizer of the model that steps after
the first (an encoder's and a head's) is not known to the guard before it steps. Under an
optimizer that steps other tensors than the model's (DeepSpeed's flat partitions) nothing the
guard sees owns any parameter, and the rule stays silent.

A parameter that got gradients and then gets none for `STOPPED_STEPS` checks in a row
(`requires_grad_(False)` mid-run, a branch cut from the graph) has stopped learning:
`grad-stopped` names it once, until it gets one again (`Stopped`; a set of the names that hold
a gradient, which the step's grad norm already lists, ~3 µs for 100 parameters). A gradient
that arrives as zeros is not seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain

import torch
from torch import nn

from inspector.guard.rules import Breach
from inspector.run.optimizer_settings import learning_rate

REPLACED_RULE = "weights-replaced"
ORPHAN_RULE = "param-orphaned"
STOPPED_RULE = "grad-stopped"
STOPPED_STEPS = 20
"""How many checks in a row a parameter that had gradients may get none before it is named:
a branch some batches skip (a task's head, an MoE expert no token reached) misses a few."""


def members(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's parameters and buffers by name (each object once, as `state_dict` names
    them), held by the watch so their ids stay theirs."""
    return dict(chain(model.named_parameters(), model.named_buffers()))


def layout(modules: list[nn.Module]) -> tuple[int, ...]:
    """The ids of what each module holds: its parameters, buffers and children (a replaced
    child changes its parent's entry, so the walk over the modules seen first stays whole)."""
    return tuple([id(v) for m in modules
                  for held in (m._parameters, m._buffers, m._modules) for v in held.values()])


def replaced(before: dict[str, torch.Tensor], model: nn.Module) -> list[Breach]:
    """A `weights-replaced` breach per tensor of `model` that is not the object `before` held
    under its name, or that `before` held and the model no longer does; the value is the new
    tensor's L2 norm (NaN when it is gone)."""
    now = members(model)
    names = [n for n, t in now.items() if before.get(n) is not t]
    names += [n for n in before if n not in now]
    return [Breach(REPLACED_RULE, "weights", _norm(now.get(n)), None, n) for n in names]


def _norm(t: torch.Tensor | None) -> float:
    if t is None or not t.is_floating_point():
        return math.nan
    with torch.no_grad():
        return float(t.detach().double().norm())


@dataclass
class Owners:
    """Which watched parameters no optimizer that steps the model holds, re-derived only when
    the optimizers' groups change; each is named once per watch (`reset`)."""

    signature: tuple = ()
    unowned: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    named: set[str] = field(default_factory=set)
    seen_owned: bool = False
    """Whether an optimizer has held a watched parameter: until then the model may be stepped
    through tensors of another kind (DeepSpeed's flat partitions), and nothing is named."""
    group_of: list[dict | None] = field(default_factory=list)
    """Each watched parameter's param group (None: no optimizer given holds it)."""
    groups: list[dict] = field(default_factory=list)
    """The param groups `group_of` was derived from."""
    last_rates: list[float | None] | None = None
    """The learning rates `rates` read at its last call."""

    suspects: dict[str, int] = field(default_factory=dict)
    """The parameters seen with a gradient and no holder, by name: the optimizer steps counted
    when each was first seen so."""

    def reset(self) -> None:
        """A new watch (the model's tensors replaced): derive and name afresh."""
        self.signature, self.unowned, self.named, self.group_of = (), [], set(), []
        self.last_rates, self.suspects = None, {}

    def judge(self, params: list[tuple[str, torch.Tensor]],
              group_lists: Iterable[list], steps: int) -> list[Breach]:
        """A `param-orphaned` breach per parameter (name, the model's own object) with a
        gradient that none of the optimizers' `param_groups` lists holds, neither when it was
        first seen so nor after an optimizer step since (`steps`: those counted so far): an
        optimizer that steps it but has not stepped yet (a second one, stepped after the
        first) is known by then."""
        self._derive(params, group_lists)
        unowned = {name for name, _ in self.unowned}
        self.suspects = {n: at for n, at in self.suspects.items() if n in unowned}
        out = []
        for name, p in self.unowned:
            if p.grad is None or name in self.named:
                continue
            if steps > self.suspects.setdefault(name, steps):
                self.named.add(name)
                out.append(Breach(ORPHAN_RULE, "optimizer", _norm(p.grad), None, name))
        return out

    def rates(self, params: list[tuple[str, torch.Tensor]],
              group_lists: Iterable[list]) -> list[float | None] | None:
        """Each parameter's learning rate at the last call (None: no group held it, or its
        rate was not a number a check can read): the rate the optimizer step since then used,
        as a scheduler steps after it. A list walk when the groups are unchanged."""
        self._derive(params, group_lists)
        by_group = {id(g): learning_rate(g) for g in self.groups}
        before, self.last_rates = self.last_rates, [
            None if g is None else by_group[id(g)] for g in self.group_of]
        return before

    def _derive(self, params: list[tuple[str, torch.Tensor]], group_lists: Iterable[list]
                ) -> None:
        """Re-derive who holds each parameter when the optimizers' groups changed."""
        groups = [g for gs in group_lists for g in gs if isinstance(g, dict)]
        # a group's list object and length: what add_param_group or a new optimizer changes
        signature = tuple((id(g.get("params")), len(g.get("params", ()))) for g in groups)
        if signature == self.signature and len(self.group_of) == len(params):
            return
        self.signature = signature
        self.groups = groups
        holder = {id(p): g for g in groups for p in g.get("params", ())}
        self.group_of = [holder.get(id(p)) for _, p in params]
        held = [(n, p) for n, p in params if id(p) not in holder]
        self.seen_owned = self.seen_owned or len(held) < len(params)
        self.unowned = held if self.seen_owned else []


@dataclass
class Stopped:
    """When each parameter that has had a gradient last got none, by name."""

    had: set[str] = field(default_factory=set)
    since: dict[str, int] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)

    def judge(self, with_grads: list[str], step: int) -> list[Breach]:
        """A `grad-stopped` breach per parameter without a gradient at the last
        `STOPPED_STEPS` checks that had one before (`with_grads`: those that hold one now)."""
        now = set(with_grads)
        if len(now) != len(self.had) or not now >= self.had:
            for name in self.had - now:
                self.since.setdefault(name, step)
            self.had |= now
        out = []
        for name, first in list(self.since.items()):
            if name in now:
                del self.since[name]
                self.named.discard(name)
            elif step - first + 1 >= STOPPED_STEPS and name not in self.named:
                self.named.add(name)
                out.append(Breach(STOPPED_RULE, "weights", float(step - first + 1), None, name))
        return out
