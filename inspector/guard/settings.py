"""The settings the guard treats as fixed or bounded, as it sees them between steps: a value
outside its bounds (`optimizer_settings.refused`), a learning rate that collapsed in one step,
a scheduled setting (learning rate, weight decay) that rose 2^8x above its group's highest, an
optimizer setting no schedule writes that differs from the run's journaled first value
(`optimizer-setting`), and a normalisation layer's momentum or eps changed since first seen
(`norm-setting`). Each stays among the guard's health problems while it holds, so the ledger
does not seal a save made meanwhile, even one made after `guard.step` read the settings."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from inspector.guard.rules import Breach
from inspector.run import optimizer_settings as opt_settings
from inspector.run.optimizer_settings import (
    COLLAPSE,
    RISE,
    collapsed,
    fixed_values,
    learning_rate,
    refused,
    rise_threshold,
    scheduled,
)

SETTING_RULE = "optimizer-setting"
"""What `SettingsWatch` names: `refused`, a collapse, a rise, a changed `FIXED` setting."""
NORM_RULE = "norm-setting"
"""What `NormWatch` names: a normalisation layer's momentum or eps changed since first seen."""
NORM_KEYS = ("momentum", "eps", "variance_epsilon")
"""A normalisation layer's settings no state dict holds and no schedule writes (transformers'
RMS norms call eps `variance_epsilon`): BatchNorm's momentum 0.1 with exponent bit 55 flipped
(0.1/256) freezes the running statistics while training, which uses batch statistics, is
exactly as before, and every eval after is wrong."""

Place = tuple[int, int]
"""A param group: (id of its optimizer's `param_groups` list, its index)."""


@dataclass
class NormWatch:
    """Each guarded model's normalisation layers' `NORM_KEYS` as first seen."""

    models: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def judge(self, model: nn.Module) -> list[Breach]:
        """The norm settings of `model` changed since first seen (the layers are found once)."""
        if model not in self.models:
            self.accept(model)
        return [Breach(NORM_RULE, "model", _number(getattr(module, key)), _number(value),
                       f"{name}.{key}")
                for name, module, key, value in self.models[model]
                if getattr(module, key) != value]

    def problems(self) -> list[Breach]:
        """Every watched model's norm settings changed since first seen."""
        return [b for model in list(self.models) for b in self.judge(model)]

    def accept(self, model: nn.Module | None = None) -> None:
        """The norm settings of `model` (every watched model's without it) are intended."""
        for one in [model] if model is not None else list(self.models):
            self.models[one] = [(name, module, key, getattr(module, key))
                                for name, module in one.named_modules()
                                if "Norm" in type(module).__name__ for key in NORM_KEYS
                                if _plain(getattr(module, key, ...))]


@dataclass
class SettingsWatch:
    """Each group's learning rate at the last step, the highest value each scheduled setting
    had, its `FIXED` settings (the run's journaled first values), the learning rates that
    collapsed and the scheduled settings that rose, while they hold."""

    run_dir: Path | None = None
    """The run folder whose journal holds the `FIXED` baseline (None: this process's only)."""
    lrs: dict[Place, float | None] = field(default_factory=dict)
    highest: dict[tuple[Place, str], float] = field(default_factory=dict)
    first: dict[Place, dict[str, Any]] = field(default_factory=dict)
    collapsed: dict[Place, tuple[float, float]] = field(default_factory=dict)
    """The rate before a collapse and the highest before it."""
    risen: dict[tuple[Place, str], float] = field(default_factory=dict)
    """The highest value before a rise."""
    lists: dict[int, list] = field(default_factory=dict)
    """Each watched param-group list, held so its id is not reused while its state is kept."""
    records: list[dict] | None = None
    """The run's journaled `FIXED` baselines, read at the first list seen, and this guard's."""
    pending: list[dict] = field(default_factory=list)
    """First values not yet journaled: the first health check (a save's) journals them."""
    norms: NormWatch = field(default_factory=NormWatch)
    """The guarded models' normalisation layers' settings."""
    claims: dict[int, int] = field(default_factory=dict)
    """Each watched list's baseline, by its position in `records`: one optimizer's each."""

    def judge(self, lists: dict[int, list], model: nn.Module | None = None) -> list[Breach]:
        """The breaches of this step (`model`'s norm layers' too), then the settings now are
        the ones to compare with."""
        self._meet(lists)
        found = self.norms.judge(model) if model is not None else []
        for place, i, group in _groups(lists):
            now = learning_rate(group)
            before, highest = self.lrs.get(place), self.highest.get((place, "lr"), 0.0)
            if collapsed(before, now, highest):
                found.append(_collapse(i, before, now))  # type: ignore[arg-type]
                self.collapsed[place] = (before, highest)  # type: ignore[assignment]
            elif place in self.collapsed:
                held, high = self.collapsed[place]
                if not collapsed(held, now, high):
                    del self.collapsed[place]
            self.lrs[place] = now
            found += self._rises(place, i, group, learn=True) + self._bad(place, i, group)
        return found

    def problems(self, lists: dict[int, list]) -> list[Breach]:
        """What holds now, without learning: each collapse still low, each rise still high and
        each value out of bounds, each `FIXED` setting changed, each norm layer's setting
        changed (the health check a ledger save asks, maybe after this step's `judge`: the
        weights the steps since computed are suspect, whatever the save holds). The first
        values not yet journaled are journaled first, so the save that asks compares its
        state with them."""
        for fields in self.pending:
            opt_settings.record(self.run_dir, fields)  # type: ignore[arg-type]
        self.pending.clear()
        found = self.norms.problems()
        for place, i, group in _groups(lists):
            now = learning_rate(group)
            before, highest = self._held(place)
            if collapsed(before, now, highest):
                found.append(_collapse(i, before, now))
            found += self._rises(place, i, group, learn=False) + self._bad(place, i, group)
        return found

    def accept(self, lists: dict[int, list]) -> None:
        """The settings now are intended (a deliberate change of `eps`, a momentum, a jump of
        the learning rate): journal the optimizers' as the run's baseline, which later saves
        and restarts compare with, learn them as the highest, drop the collapses and rises
        held, and take the norm layers' as they are."""
        self.norms.accept()
        self._meet(lists)
        at = time.time()  # one time for the records of one accept: together the baseline
        for lid, groups in lists.items():
            if self.run_dir is not None and not any(refused(g) for g in groups):
                fields = opt_settings.settings_record(groups, accepted=True, at=at)
                opt_settings.record(self.run_dir, fields)
                self._records().append(fields)
                self.claims[lid] = len(self._records()) - 1
        for place, _, group in _groups(lists):
            self.first[place] = dict(fixed_values(group))
            self.collapsed.pop(place, None)
            self.lrs[place] = learning_rate(group)
            for key, value in scheduled(group).items():
                self.risen.pop((place, key), None)
                self.highest[(place, key)] = value

    def _held(self, place: Place) -> tuple[float | None, float]:
        """The rate before a held collapse and the highest then; else the last step's."""
        return self.collapsed.get(place, (self.lrs.get(place), self.highest.get(
            (place, "lr"), 0.0)))  # type: ignore[return-value]

    def _rises(self, place: Place, i: int, group: dict, learn: bool) -> list[Breach]:
        """Each scheduled setting `RISE` times or more above its group's highest before (held
        while it stays there); with `learn`, a new rise is named and the highest moves on."""
        found = []
        for key, now in scheduled(group).items():
            spot = (place, key)
            held = self.risen.get(spot)
            base = held if held is not None else self.highest.get(spot)
            limit = rise_threshold(key, base)
            if limit is not None and now >= limit:
                if held is None or not learn:
                    found.append(Breach(SETTING_RULE, "optimizer", now, limit,
                                        f"param_groups.{i}.{key}"))
                if learn:
                    self.risen[spot] = base  # type: ignore[assignment]
            elif learn:
                self.risen.pop(spot, None)
                self.highest[spot] = max(self.highest.get(spot, 0.0), now)
        return found

    def _meet(self, lists: dict[int, list]) -> None:
        """Forget the lists gone (or whose id another list took), then compare each list seen
        for the first time with the run's journaled `FIXED` values of its shape (to journal
        at the first health check when there are none)."""
        for lid in [lid for lid, held in self.lists.items() if lists.get(lid) is not held]:
            del self.lists[lid]
            self.claims.pop(lid, None)
            for table in (self.lrs, self.first, self.collapsed):
                for place in [p for p in table if p[0] == lid]:
                    del table[place]
            for table in (self.highest, self.risen):  # type: ignore[assignment]
                for spot in [s for s in table if s[0][0] == lid]:
                    del table[spot]
        for lid, groups in lists.items():
            if lid not in self.lists:
                self.lists[lid] = groups
                self._first_sight(lid, groups)

    def _first_sight(self, lid: int, groups: list) -> None:
        """Learn a list's `FIXED` values from the run's journaled baseline of its shape that no
        other list of this process holds (`claims`): the one it matches, else the closest (a
        restart that loaded a changed value: `judge` names each difference with `_changed`
        until back). When every baseline of its shape is another list's (two Adams of one
        shape with their own betas: a GAN) or there is none, it is a new optimizer: its values
        as they are, journaled at the first health check."""
        records = self._records()
        taken = set(self.claims.values())
        free = [i for i in opt_settings.baseline_indices(records, groups) if i not in taken]
        match = next((i for i in free if not opt_settings.differences(groups,
                                                                      records[i]["groups"])),
                     None)
        if match is None and free:
            match = opt_settings.closest(groups, records, free)
        if match is None:
            base = [fixed_values(g) for g in groups]
            if self.run_dir is not None and not any(refused(g) for g in groups):
                self.pending.append(opt_settings.settings_record(groups))
                records.append(self.pending[-1])
                self.claims[lid] = len(records) - 1
        else:
            base, self.claims[lid] = records[match]["groups"], match
        for i, values in enumerate(base):
            self.first[(lid, i)] = dict(values)

    def _records(self) -> list[dict]:
        if self.records is None:
            self.records = opt_settings.journaled(self.run_dir) if self.run_dir else []
        return self.records

    def _bad(self, place: Place, i: int, group: dict) -> list[Breach]:
        """The group's values out of bounds, and its `FIXED` ones changed (each named once)."""
        bad = _refused(i, group)
        named = {b.param for b in bad}
        return bad + [b for b in self._changed(place, i, group) if b.param not in named]

    def _changed(self, place: Place, i: int, group: dict) -> list[Breach]:
        first = self.first.get(place, {})
        return [Breach(SETTING_RULE, "optimizer", _number(value), _number(first[key]),
                       f"param_groups.{i}.{key}")
                for key, value in fixed_values(group).items()
                if key in first and value != first[key]]


def said(b: Breach) -> str:
    """An `optimizer-setting` or `norm-setting` breach in words."""
    key = (b.param or "").rsplit(".", 1)[-1]
    if b.rule == NORM_RULE:
        return (f"the normalisation layer's {b.param} changed from {b.threshold:.4g} to "
                f"{b.value:.4g} (no state dict holds it; a deliberate change: "
                "guard.accept_settings())")
    if b.threshold is None:
        return f"the optimizer's {b.param} is {b.value:.4g}, out of the bounds its optimizer admits"
    if key in opt_settings.SCHEDULED and key not in opt_settings.WARMS_FROM_ZERO and \
            b.threshold == opt_settings.FROM_ZERO:
        return (f"the optimizer's {b.param} left 0 for {b.value:.4g} in one step: a schedule "
                "from zero climbs in small steps (a deliberate change: guard.accept_settings())")
    if key in opt_settings.SCHEDULED and b.value >= b.threshold:
        return (f"the optimizer's {b.param} rose to {b.value:.4g}, {RISE:.0f}x or more above "
                f"its highest so far ({b.threshold / RISE:.4g}): no schedule rises so fast")
    if key == "lr" and b.value == 0:
        return (f"the optimizer's {b.param} fell to 0 in one step, from "
                f"{b.threshold * COLLAPSE:.4g}: a schedule that ends at zero approaches it")
    if key == "lr":
        return (f"the optimizer's {b.param} fell to {b.value:.4g} in one step, from "
                f"{b.threshold * COLLAPSE:.4g} (more than 65,536x: no schedule falls so fast)")
    return (f"the optimizer's {b.param} changed from {b.threshold:.4g} to {b.value:.4g}; no "
            "schedule writes it")


def _groups(lists: dict[int, list]):
    for lid, groups in lists.items():
        for i, group in enumerate(groups):
            if isinstance(group, dict):
                yield (lid, i), i, group


def _collapse(i: int, before: float, now: float) -> Breach:
    return Breach(SETTING_RULE, "optimizer", now, before / COLLAPSE, f"param_groups.{i}.lr")


def _refused(i: int, group: dict) -> list[Breach]:
    return [Breach(SETTING_RULE, "optimizer", value, None, f"param_groups.{i}.{key}")
            for key, value in refused(group)]


def _plain(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)
