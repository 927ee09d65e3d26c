"""What the guard keeps per model it guards, so one guard can check two models that take turns
(a GAN's generator and discriminator, each `guard.step`ped with its own optimizer): the watch
over the model's tensors, the weight rules' learned numbers, who holds its parameters, when
each last got a gradient, the replica comparison. Two models' tensors often share names (two
`nn.Sequential`s both hold `0.weight`), so nothing learned about one may be judged against the
other, and a model's post-step fingerprint must survive the other's step.

A model is known by its object (held weakly: a model that is gone is forgotten); the first one
guarded is named as before, each later one with a `label` ("model 2: ") in the health check's
lines, which name tensors of several models.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from inspector.core.flatten import flatten
from inspector.guard.rules import Breach
from inspector.guard.weights.fingerprint import WeightWatch, local
from inspector.guard.weights.members import Owners, Stopped, replaced
from inspector.guard.weights.replicas import ReplicaCheck
from inspector.guard.weights.rules import WeightRuleSet
from inspector.guard.weights.saved import saved_problems


@dataclass
class Watched:
    """One guarded model's watch and the rules' state about it."""

    model: weakref.ref
    watch: WeightWatch
    rules: WeightRuleSet
    label: str
    owners: Owners
    stopped: Stopped
    replicas: ReplicaCheck


@dataclass
class Models:
    """Every model a guard watches, by object, in the order first seen."""

    every: int
    largest_every: int
    overlap: bool | None
    k_largest: float
    k_update: float

    def __post_init__(self) -> None:
        self.by_id: dict[int, Watched] = {}
        self.count = 0
        self.pending: list[dict] = []
        """Weight-rule states a `load_state_dict` gave, for the models first seen next."""

    def all(self) -> list[Watched]:
        """The models still alive (one that is gone is forgotten, its reader stopped)."""
        for key, w in list(self.by_id.items()):
            if w.model() is None:
                w.watch.close()
                del self.by_id[key]
        return list(self.by_id.values())

    def get(self, model: nn.Module) -> Watched | None:
        """The model's entry, or None when it is not watched."""
        w = self.by_id.get(id(model))
        return w if w is not None and w.model() is model else None

    def watch(self, model: nn.Module) -> tuple[Watched, list[Breach]]:
        """The model's entry: new for a model not seen before; rebuilt for one whose tensors
        were replaced, added or removed since (then also a `weights-replaced` breach per
        tensor, for the step to judge); the same entry otherwise."""
        w = self.get(model)
        if w is not None and w.watch.current():
            return w, []
        swapped = []
        if w is not None:
            swapped = replaced(w.watch.members, model)
            w.watch.close()
            w.watch = self._new_watch(model)
            w.owners.reset()
            return w, swapped
        self.all()
        self.count += 1
        rules = WeightRuleSet.default(self.k_largest, self.k_update)
        if self.pending:
            rules.load_state_dict(self.pending.pop(0))
        w = Watched(weakref.ref(model), self._new_watch(model), rules,
                    "" if self.count == 1 else f"model {self.count}: ", Owners(), Stopped(),
                    ReplicaCheck())
        self.by_id[id(model)] = w
        return w, []

    def holds(self, state: Any) -> bool:
        """Whether `state` (a state about to be saved: nested dicts, lists, tuples) holds a
        tensor whose storage is a watched parameter's (`model.state_dict()` returns views of
        the parameters, so a save of it is a save of the watched model)."""
        ours = {p.untyped_storage().data_ptr() for w in self.all() for p in w.watch.params}
        return any(_storage(leaf) in ours for _, leaf in flatten(state))

    def saved_problems(self, state: Any) -> list[str]:
        """Each watched model's copy in a state about to be saved against the live weights
        (`weights.saved`)."""
        every = self.all()
        return [line for w in every for line in saved_problems(
            w.watch, w.rules, w.label, state,
            frozenset(n for o in every if o is not w for n in o.watch.names))]

    def param_names(self) -> dict[int, str]:
        """Every watched parameter's name (with its model's label) by the parameter's `id`."""
        return {id(p): f"{w.label}{n}" for w in self.all() for n, p in w.watch.named_params}

    def _new_watch(self, model: nn.Module) -> WeightWatch:
        return WeightWatch(model, self.every, self.largest_every, self.overlap)

    def state_dict(self) -> list[dict]:
        """Each watched model's weight-rule state, in the order first seen."""
        return [w.rules.state_dict() for w in self.all()]

    def load_state_dict(self, states: list[dict]) -> None:
        """Weight-rule states for the models watched so far, in order; the rest wait for the
        models first seen next."""
        watched = self.all()
        for w, state in zip(watched, states, strict=False):
            w.rules.load_state_dict(state)
        self.pending = list(states[len(watched):])

    def close(self) -> None:
        """Stop every watch's background reader."""
        for w in self.by_id.values():
            w.watch.close()


def _storage(leaf: object) -> int | None:
    """The data pointer of a tensor leaf's storage (a DTensor's local shard), else None."""
    if (not isinstance(leaf, torch.Tensor) or leaf.layout != torch.strided
            or leaf.device.type == "meta"):  # no storage to share with a parameter
        return None
    return local(leaf).untyped_storage().data_ptr()
