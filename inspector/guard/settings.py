"""The optimizers' settings as the guard sees them between steps (`optimizer-setting`): a value
torch's own optimizers refuse, a learning rate that collapsed in one step, and a setting no
schedule writes that changed since the guard first saw its group. Each stays among the guard's
health problems while it holds, so the ledger does not seal a save made meanwhile, even one
made after `guard.step` read the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inspector.guard.rules import Breach
from inspector.run.optimizer_settings import (
    COLLAPSE,
    collapsed,
    fixed_values,
    learning_rate,
    refused,
)

SETTING_RULE = "optimizer-setting"
"""What this module names: `refused`, a collapse, a changed `FIXED` setting."""

Place = tuple[int, int]
"""A param group: (id of its optimizer's `param_groups` list, its index)."""


@dataclass
class SettingsWatch:
    """Each group's learning rate at the last step, its `FIXED` settings when first seen, and
    the learning rates that collapsed and are still low (the rate before, the rate now)."""

    lrs: dict[Place, float | None] = field(default_factory=dict)
    first: dict[Place, dict[str, Any]] = field(default_factory=dict)
    collapsed: dict[Place, tuple[float, float]] = field(default_factory=dict)

    def judge(self, lists: dict[int, list]) -> list[Breach]:
        """The breaches of this step, then the settings now are the ones to compare with."""
        found = []
        for place, i, group in _groups(lists):
            now = learning_rate(group)
            before = self.lrs.get(place)
            if collapsed(before, now):
                found.append(_collapse(i, before, now))  # type: ignore[arg-type]
                self.collapsed[place] = (before, now)  # type: ignore[assignment]
            elif place in self.collapsed:
                first = self.collapsed[place][0]
                if collapsed(first, now):
                    self.collapsed[place] = (first, now)
                else:
                    del self.collapsed[place]
            self.lrs[place] = now
            found += _refused(i, group) + self._changed(place, i, group)
            for key, value in fixed_values(group).items():
                self.first.setdefault(place, {}).setdefault(key, value)
        return found

    def problems(self, lists: dict[int, list]) -> list[Breach]:
        """What holds now, without learning: each collapse still low and each `FIXED` setting
        changed (the health check a ledger save asks, maybe after this step's `judge`; what
        torch refuses the ledger reads from the saved state itself)."""
        found = []
        for place, i, group in _groups(lists):
            now = learning_rate(group)
            # a collapse still low is judged from the rate before it, else from the last step's
            before = self.collapsed.get(place, (self.lrs.get(place), None))[0]
            if collapsed(before, now):
                found.append(_collapse(i, before, now))
            found += self._changed(place, i, group)
        return found

    def _changed(self, place: Place, i: int, group: dict) -> list[Breach]:
        first = self.first.get(place, {})
        return [Breach(SETTING_RULE, "optimizer", _number(value), _number(first[key]),
                       f"param_groups.{i}.{key}")
                for key, value in fixed_values(group).items()
                if key in first and value != first[key]]


def said(b: Breach) -> str:
    """An `optimizer-setting` breach in words."""
    key = (b.param or "").rsplit(".", 1)[-1]
    if b.threshold is None:
        return f"the optimizer's {b.param} is {b.value:.4g}, which torch's optimizers refuse"
    if key == "lr":
        return (f"the optimizer's {b.param} fell to {b.value:.4g} in one step, from "
                f"{b.threshold * COLLAPSE:.4g} (more than 65,536x: no schedule falls so fast)")
    return (f"the optimizer's {b.param} changed from {b.threshold:.4g} to {b.value:.4g}; no "
            "schedule writes it")


def _groups(lists: dict[int, list]):
    for place, groups in lists.items():
        for i, group in enumerate(groups):
            if isinstance(group, dict):
                yield (place, i), i, group


def _collapse(i: int, before: float, now: float) -> Breach:
    return Breach(SETTING_RULE, "optimizer", now, before / COLLAPSE, f"param_groups.{i}.lr")


def _refused(i: int, group: dict) -> list[Breach]:
    return [Breach(SETTING_RULE, "optimizer", value, None, f"param_groups.{i}.{key}")
            for key, value in refused(group)]


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)
