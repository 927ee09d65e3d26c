"""The guard's rules over the weights themselves, per tensor: corruption that stays finite.

Each rule is a registered class (`WEIGHT_RULES`, `@register`) whose `judge` sees one reading of
every watched tensor (`fingerprint.WeightValues`) and answers a `Breach` per tensor it blames, named
with that tensor. The watched tensors are the floating-point parameters, then the floating-point
buffers (BatchNorm's running statistics), which only `weight-nonfinite`, `weight-largest`,
`variance-negative` and `variance-shrunk` judge by their values (no fingerprint taken after the
optimizer step can cover what each forward writes, nor an update size what the data sets);
the buffers no forward writes are fingerprinted apart (`constants`). They judge from the
first reading on, without a warm-up:

- `weights-changed`: a tensor's exact fingerprint differs from the one taken right after the
  last optimizer step: its bytes changed outside the step (a device or memory fault, or code that
  edits weights without telling the guard: `Guard.accept_weights`); or a buffer no forward
  writes (position ids, a position table, `inv_freq`: `constants.constant_buffers`) changed and
  then held still, or is not the bytes it had when the guard first read it at a save's check.
- `weight-nonfinite`: a tensor holds NaN or Inf (a norm that overflows on finite values is
  told apart, and is an infinite `update-size`).
- `weight-largest`: a tensor's largest |w| is above `k` x the largest it has had at a reading
  that raised no alarm (floored at `floor`, 0.1, so a tensor that starts at zero may grow
  between two readings `largest_every` steps apart). An
  exponent-bit flip multiplies one value by 2^8 or more, far above any optimizer step's growth.
  A buffer's factor is `k_buffer` (2^16): a forward's accumulation may grow fast.
- `update-size`: the change of a tensor's norm between two readings, |n1 - n0| / n0, a lower
  bound of ||dw|| / ||w|| that needs no copy of the weights, above `k` x its running median over
  the last `window` steps (robust to one odd step), each size taken per unit of the learning
  rate of the tensor's param group (`WeightValues.rates`: a schedule's warm restart multiplies
  the rate, and the step, by thousands at once), and above `floor` (a float32 norm moves by
  about 1e-7 from rounding alone, so a tiny learning rate's steps are not judged on noise), and
  above `absolute` (a norm that quadruples: a zero-initialised tensor's norm doubles in its
  second Adam step) before `early` values are known. A norm that did not move at all is no
  size (the tensor got no step: an idle task head, a frozen layer), so the window holds only
  the steps the tensor took.
- `variance-negative`: a normalisation layer's running variance (`*.running_var`) holds a
  negative value. A running mean of variances never is one; a flipped sign bit keeps the
  buffer's norm and largest |value|, passes training (which normalises by each batch's own
  statistics) and, below -eps, makes every eval output of that channel NaN.
- `variance-shrunk`: a running variance's lowest value below 2^-16 x the lowest it had at a
  reading that raised no alarm (only a layer whose momentum is at most 0.5, or None: its
  forward moves the variance by at most half a batch's worth, so a dead channel's variance
  decays by at most 2x per step). An exponent bit cleared multiplies a variance by 2^-64 or
  less: still positive and finite, it divides that channel's every eval output by 2^32.

A tensor's learned numbers are plain floats (`state_dict`), so scenes and checkpoints keep them.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from inspector.guard.rules import Breach, StateByName, Stateless
from inspector.guard.weights.fingerprint import WeightValues
from inspector.guard.weights.members import REPLACED_RULE

WEIGHT_RULES: dict[str, type] = {}
"""Every weight rule class by its name, in the order they were registered."""

HELD_RULES = frozenset({"weights-changed", "weight-nonfinite", "variance-negative",
                        "replica-differs", REPLACED_RULE})
"""Definitive rules: their alarm names bytes that no healthy step writes, and those bytes stay
in the weights, so the guard's health check holds it until `Guard.accept_weights`."""
WINDOWED_RULES = frozenset({"weight-largest", "update-size", "variance-shrunk"})
"""Statistical rules, judged against what each tensor did before: their alarm fails the health
check for the guard's recent-alarm window (as a loss or gradient alarm does), not for good, so
a false one (a schedule's warm restart) costs the saves of a few steps, not every later one."""
CORRUPTION_RULES = HELD_RULES | WINDOWED_RULES
"""Rules whose alarm means the weights themselves are not to be trusted (or resumed from)."""


def register(cls: type) -> type:
    """Add a weight rule class to `WEIGHT_RULES` under its `name`."""
    WEIGHT_RULES[cls.name] = cls
    return cls


@register
@dataclass
class WeightsChanged(Stateless):
    """Bytes that changed outside the optimizer step."""

    name = "weights-changed"

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """One breach per tensor whose fingerprint moved."""
        constants = [Breach(self.name, "weights", norm, None, name)
                     for name, norm in v.constants_changed.items()]
        if v.changed is None:
            return constants
        return [Breach(self.name, "weights", v.norms[i], None, names[i])
                for i, moved in enumerate(v.changed) if moved] + constants


@register
@dataclass
class WeightNonFinite(Stateless):
    """NaN or Inf in a weight."""

    name = "weight-nonfinite"

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """One breach per tensor whose norm is NaN or Inf."""
        return [Breach(self.name, "weights", v.norms[i], None, names[i])
                for i, bad in enumerate(v.nonfinite) if bad]


@register
@dataclass
class WeightLargest:
    """A largest |w| far above any the tensor had before."""

    k: float = 8.0
    k_buffer: float = 65536.0
    """A buffer's factor: 2^16, past any growth of what a forward accumulates there (a count
    or a sum that starts near zero), still below a flip of the top four exponent bits."""
    floor: float = 0.1
    top: dict[str, float] = field(default_factory=dict)
    name = "weight-largest"

    def bound(self, tensor: str, buffer: bool = False) -> float | None:
        """The largest |w| the tensor may reach, or None before its first reading."""
        seen = self.top.get(tensor)
        return None if seen is None else (self.k_buffer if buffer else self.k) * max(
            seen, self.floor)

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """One breach per tensor whose largest |w| is above its bound."""
        if v.largest is None:
            return []
        out = []
        for i, (name, value) in enumerate(zip(names, v.largest, strict=True)):
            # a parameter's Inf is weight-nonfinite's; a buffer's is this rule's once the
            # buffer has held only finite values (a -inf mask never gets a bound)
            buffer = v.stepped is not None and i >= v.stepped
            bound = self.bound(name, buffer)
            if bound is not None and (math.isfinite(value) or buffer) and value > bound:
                out.append(Breach(self.name, "weights", value, bound, name))
        return out

    def learn(self, names: list[str], v: WeightValues) -> None:
        """Keep each tensor's largest |w| so far."""
        if v.largest is None:
            return
        for name, value in zip(names, v.largest, strict=True):
            if math.isfinite(value):
                self.top[name] = max(self.top.get(name, 0.0), value)

    def state_dict(self) -> dict:
        """Each tensor's largest |w|."""
        return {"top": dict(self.top)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state."""
        self.top = {str(k): float(v) for k, v in state.get("top", {}).items()}


@register
@dataclass
class VarianceNegative(Stateless):
    """A running variance below zero, which no forward writes."""

    name = "variance-negative"

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """One breach per running variance holding a negative value (its lowest)."""
        return [Breach(self.name, "weights", lowest, 0.0, names[i])
                for i, lowest in v.negative.items()]


@register
@dataclass
class VarianceShrunk:
    """A running variance's lowest value far below the lowest it had before."""

    factor: float = 2.0 ** -16
    low: dict[str, float] = field(default_factory=dict)
    name = "variance-shrunk"

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """One breach per running variance whose lowest value fell below `factor` x the lowest
        it had at a reading that raised no alarm."""
        out = []
        for i, lowest in v.variance_lowest.items():
            seen = self.low.get(names[i])
            if seen is not None and 0.0 <= lowest < self.factor * seen:
                out.append(Breach(self.name, "weights", lowest, self.factor * seen, names[i]))
        return out

    def learn(self, names: list[str], v: WeightValues) -> None:
        """Keep each running variance's lowest value so far."""
        for i, lowest in v.variance_lowest.items():
            if math.isfinite(lowest) and lowest >= 0.0:
                self.low[names[i]] = min(self.low.get(names[i], lowest), lowest)

    def state_dict(self) -> dict:
        """Each running variance's lowest value."""
        return {"low": dict(self.low)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state."""
        self.low = {str(k): float(x) for k, x in state.get("low", {}).items()}


@register
@dataclass
class UpdateSize:
    """A tensor's norm moving far more in one step than it has been moving."""

    k: float = 50.0
    absolute: float = 3.0
    early: int = 3
    window: int = 32
    floor: float = 1e-4
    last: dict[str, float] = field(default_factory=dict)
    recent: dict[str, deque] = field(default_factory=dict)
    name = "update-size"

    def sizes(self, names: list[str], v: WeightValues) -> list[tuple[str, float, float]]:
        """(tensor, |n1 - n0| / n0, its learning rate) for each tensor an optimizer steps with
        an earlier finite, non-zero norm and finite values now (a norm that overflowed on
        finite values is an infinite change). A norm that did not move is no size: the tensor
        was not stepped (no gradient: an idle task head, a frozen layer), and a window of such
        zeros would make any real step look huge. The rate is the group's (`v.rates`), 1.0
        where none is known; a tensor whose rate is 0 or less takes no sized step."""
        out = []
        rates = v.rates or []
        stepped = list(zip(names, v.norms, v.nonfinite, strict=True))[:v.stepped]
        for i, (name, norm, bad) in enumerate(stepped):
            before = self.last.get(name)
            rate = rates[i] if i < len(rates) and rates[i] is not None else 1.0
            if (before is not None and before > 0 and not bad and not math.isnan(norm)
                    and norm != before and rate > 0 and math.isfinite(rate)):
                out.append((name, abs(norm - before) / before, rate))
        return out

    def threshold(self, tensor: str, rate: float = 1.0) -> float:
        """The bar for this tensor now: absolute while young, then k x its running median
        of sizes per unit of learning rate, times the rate now (a warm restart's jump in the
        rate is no jump in the size per rate)."""
        seen = self.recent.get(tensor)
        median = statistics.median(seen) if seen and len(seen) >= self.early else 0.0
        # a median of 0 (a window of a saved state's zeros) is no history
        return max(self.k * median * rate, self.floor) if median > 0 else self.absolute

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """One breach per tensor whose norm moved past its threshold."""
        out = []
        for name, size, rate in self.sizes(names, v):
            bar = self.threshold(name, rate)
            if size > bar:
                out.append(Breach(self.name, "weights", size, bar, name))
        return out

    def learn(self, names: list[str], v: WeightValues) -> None:
        """Fold each tensor's change per unit of learning rate into its window and keep its
        norm."""
        for name, size, rate in self.sizes(names, v):
            if math.isfinite(size):
                self.recent.setdefault(name, deque(maxlen=self.window)).append(size / rate)
        for name, norm in zip(names, v.norms, strict=True):
            if math.isfinite(norm):
                self.last[name] = norm

    def rebase(self, names: list[str], v: WeightValues) -> None:
        """Take these norms as the base without judging or learning a change (after a load)."""
        for name, norm in zip(names, v.norms, strict=True):
            if math.isfinite(norm):
                self.last[name] = norm

    def state_dict(self) -> dict:
        """Each tensor's last norm and recent changes per unit of learning rate."""
        return {"last": dict(self.last),
                "per_rate": {k: list(d) for k, d in self.recent.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state (an older state's `recent`, sizes not per rate, is
        left out: the tensors start young again)."""
        self.last = {str(k): float(v) for k, v in state.get("last", {}).items()}
        self.recent = {str(k): deque((float(x) for x in v), maxlen=self.window)
                       for k, v in state.get("per_rate", {}).items()}


@dataclass
class WeightRuleSet(StateByName):
    """Every weight rule the guard applies."""

    rules: list = field(default_factory=list)

    @classmethod
    def default(cls, k_largest: float = 8.0, k_update: float = 50.0) -> WeightRuleSet:
        """The six rules, with the guard's configured factors."""
        return cls([WeightsChanged(), WeightNonFinite(), WeightLargest(k=k_largest),
                    VarianceNegative(), VarianceShrunk(), UpdateSize(k=k_update)])

    def judge(self, names: list[str], v: WeightValues) -> list[Breach]:
        """Every breach of every rule, in rule order."""
        return [b for rule in self.rules for b in rule.judge(names, v)]

    def learn(self, names: list[str], v: WeightValues) -> None:
        """Learn from a reading that raised no alarm."""
        for rule in self.rules:
            rule.learn(names, v)

    def rebase(self, names: list[str], v: WeightValues) -> None:
        """After an alarm: the norms now are the base for the next change."""
        for rule in self.rules:
            if isinstance(rule, UpdateSize):
                rule.rebase(names, v)

    def accept(self, names: list[str], v: WeightValues) -> None:
        """The weights now are intended (a load, a deliberate edit): they are the new base of
        every learned number, their largest |w| included."""
        self.rebase(names, v)
        for rule in self.rules:
            if isinstance(rule, UpdateSize):
                rule.recent.clear()  # steps on new weights have a scale of their own
            if isinstance(rule, WeightLargest) and v.largest is not None:
                rule.top.update({n: x for n, x in zip(names, v.largest, strict=True)
                                 if math.isfinite(x)})
