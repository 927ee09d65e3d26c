"""The guard's alarm rules over one scalar per step: non-finite, Megatron's spike, the EMA spike,
the running-median spike (the one that needs no long warm-up).

Each rule is one registered class (`@register`, keyed by its kind) whose `judge` sees the step's
value of one signal (`loss` or `grad_norm`) and answers the threshold it broke, or None; a new
rule is one class here and one test. Megatron's and the EMA rule learn during a warm-up and never
alarm in it; the median rule judges from its `early`-th value on, against the median of a short
window, so a spike at step 40 is not waited out. A value that raised an alarm is not learned, so
one spike does not lift the bar for the next. Neither the EMA nor the median rule alarms below
half the largest of the signal's first `early` values (`StartScale`): a run trained to near-zero
loss has a median so low that an ordinary hard batch is 30x it, but a value far below what the
run itself produced when its weights knew nothing is no blow-up. The rules over the weights
themselves (per tensor) are in `weights.rules`.
Their state is plain numbers (`state_dict`), so a scene carries it, and the journal too
(`guard.baseline`, at every save's health check and at close): a guard started on a run folder
whose journal holds an earlier session's state continues from it (`guard.baseline`), and its
loss is also held to k x the largest the run learned before (`JournaledMax`), so a resume never
starts blind.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol

Signal = Literal["loss", "grad_norm", "weights", "optimizer"]


@dataclass(frozen=True)
class Breach:
    """One rule broken at one step: which, on what value, against what threshold."""

    rule: str
    signal: Signal
    value: float
    threshold: float | None
    param: str | None = None
    """The tensor it blames, for a rule over the weights."""


class Rule(Protocol):
    """What the guard asks of a rule: judge a value, learn from it, keep its state."""

    signal: Signal
    kind: str

    @property
    def name(self) -> str:
        """The rule's stable name in journal records (`SIGNAL-KIND`)."""
        ...

    def judge(self, value: float) -> Breach | None:
        """The breach this step's value makes, or None."""
        ...

    def learn(self, value: float) -> None:
        """Fold a value of a step that raised no alarm into what the rule knows."""
        ...

    def state_dict(self) -> dict:
        """What a resumed run needs to keep the same threshold."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state."""
        ...


class OnSignal:
    """A rule over one signal: its journal name is `SIGNAL-KIND`."""

    signal: Signal
    kind: str

    @property
    def name(self) -> str:
        """The rule's stable name in journal records."""
        return f"{self.signal}-{self.kind}"


class Stateless:
    """A rule that keeps nothing between steps (also the weight rules that learn nothing)."""

    def learn(self, *values: object) -> None:
        """Nothing to learn."""

    def state_dict(self) -> dict:
        """No state."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """No state."""


class StateByName:
    """A rule set's state: each rule's own under its name, so a scene or checkpoint keeps it."""

    rules: list

    def state_dict(self) -> dict:
        """Each rule's state under its name."""
        return {rule.name: rule.state_dict() for rule in self.rules}

    def load_state_dict(self, state: dict) -> None:
        """Restore the rules a saved state names."""
        for rule in self.rules:
            if rule.name in state:
                rule.load_state_dict(state[rule.name])


RULES: dict[str, type] = {}
"""Every rule class by its kind, in the order they were registered."""


def register(cls: type) -> type:
    """Add a rule class to `RULES` under its `kind`."""
    RULES[cls.kind] = cls
    return cls


@register
@dataclass
class NonFinite(OnSignal, Stateless):
    """NaN or Inf in the signal."""

    signal: Signal
    kind = "nonfinite"

    def judge(self, value: float) -> Breach | None:
        """A breach when the value is NaN or Inf (no threshold), else None."""
        return None if math.isfinite(value) else Breach(self.name, self.signal, value, None)


@register
@dataclass
class MaxOfFirst(OnSignal):
    """Megatron's rule: alarm at >= k x the largest |value| of the first `warmup` values."""

    signal: Signal
    k: float = 10.0
    warmup: int = 100
    seen: int = 0
    largest: float = 0.0
    kind = "spike-max"

    def judge(self, value: float) -> Breach | None:
        """The breach, with the threshold broken, or None."""
        if self.seen < self.warmup or not math.isfinite(value):
            return None
        threshold = self.k * self.largest
        if abs(value) >= threshold > 0:
            return Breach(self.name, self.signal, value, threshold)
        return None

    def learn(self, value: float) -> None:
        """Count the value; during the warm-up, keep the largest."""
        if self.seen < self.warmup and math.isfinite(value):
            self.largest = max(self.largest, abs(value))
        self.seen += 1

    def state_dict(self) -> dict:
        """What a resumed run needs to keep the same threshold."""
        return {"seen": self.seen, "largest": self.largest}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state."""
        self.seen, self.largest = int(state["seen"]), float(state["largest"])


@dataclass
class StartScale:
    """A share of the largest |value| among a signal's first `count` finite values: the scale
    the run starts at, below which a spike rule does not alarm however low the recent values
    are."""

    count: int = 5
    share: float = 0.5
    """Half: a corruption that sends a fitted model's loss back to about its untrained level
    (rows of a weight rolled: 0.05 -> 4.4 after a start at 4.6-5.0) is still a spike; an ordinary
    hard batch of a run fitted to near-zero loss stays far below (0.14 after a start at 1.5,
    its gradient norm 1.05 after 3.4)."""
    first: list = field(default_factory=list)

    def learn(self, value: float) -> None:
        """Keep the value while fewer than `count` are known."""
        if len(self.first) < self.count and math.isfinite(value):
            self.first.append(abs(value))

    def floor(self) -> float:
        """`share` x the largest of the first values (0 before any)."""
        return self.share * max(self.first, default=0.0)


@register
@dataclass
class EmaSpike(OnSignal):
    """The moving-average rule: alarm when value > k x its EMA, after `warmup` values."""

    signal: Signal
    k: float = 10.0
    warmup: int = 100
    beta: float = 0.99
    seen: int = 0
    ema: float = 0.0
    start: StartScale = field(default_factory=StartScale)
    kind = "spike-ema"

    def judge(self, value: float) -> Breach | None:
        """The breach, with the threshold broken, or None."""
        if self.seen < self.warmup or not math.isfinite(value):
            return None
        threshold = max(self.k * self.ema, self.start.floor())
        if value > threshold > 0:
            return Breach(self.name, self.signal, value, threshold)
        return None

    def learn(self, value: float) -> None:
        """Fold the value into the average (bias-corrected while young)."""
        if not math.isfinite(value):
            return
        self.seen += 1
        weight = max(1.0 - self.beta, 1.0 / self.seen)
        self.ema += weight * (value - self.ema)
        self.start.learn(value)

    def state_dict(self) -> dict:
        """What a resumed run needs to keep the same threshold."""
        return {"seen": self.seen, "ema": self.ema, "first": list(self.start.first)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state (one saved without its first values learns them
        again from the next ones)."""
        self.seen, self.ema = int(state["seen"]), float(state["ema"])
        self.start.first = [float(v) for v in state.get("first", [])]


@register
@dataclass
class MedianSpike(OnSignal):
    """Alarm at >= k x the median of the last `window` values, from the `early`-th value on:
    robust to one odd step, and it follows a loss that falls, so no long warm-up is needed;
    never below half the largest of the first `early` values (`StartScale`)."""

    signal: Signal
    k: float = 30.0
    early: int = 5
    window: int = 16
    recent: deque = field(default_factory=deque)
    start: StartScale = field(default_factory=StartScale)
    kind = "spike-median"

    def __post_init__(self) -> None:
        self.start.count = self.early

    def judge(self, value: float) -> Breach | None:
        """The breach, with the threshold broken, or None."""
        if len(self.recent) < self.early or not math.isfinite(value):
            return None
        threshold = max(self.k * statistics.median(self.recent), self.start.floor())
        if abs(value) >= threshold > 0:
            return Breach(self.name, self.signal, value, threshold)
        return None

    def learn(self, value: float) -> None:
        """Fold the value into the window."""
        if math.isfinite(value):
            self.recent.append(abs(value))
            while len(self.recent) > self.window:
                self.recent.popleft()
            self.start.learn(value)

    def state_dict(self) -> dict:
        """What a resumed run needs to keep the same threshold."""
        return {"recent": list(self.recent), "first": list(self.start.first)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state (one saved without its first values learns them
        again from the next ones)."""
        self.recent = deque(float(v) for v in state["recent"])
        self.start.first = [float(v) for v in state.get("first", [])]


@register
@dataclass
class JournaledMax(OnSignal):
    """Alarm at >= k x the largest |value| the run learned before this session (a guard that
    loaded an earlier session's numbers from the journal, `guard.baseline`): a bound fixed for
    the session, so a steady climb that every warm-up and window learns as it
    goes is still named once it passes k x anything the run showed before (its untrained
    start included). Silent in a run's first session, which has Megatron's rule."""

    signal: Signal
    k: float = 10.0
    largest: float = 0.0
    """The bound's base: the largest value learned before this session (0: none)."""
    seen: float = 0.0
    """The largest |value| learned so far, earlier sessions included: the next session's base."""
    kind = "spike-journaled"

    def judge(self, value: float) -> Breach | None:
        """The breach, with the threshold broken, or None."""
        threshold = self.k * self.largest
        if math.isfinite(value) and abs(value) >= threshold > 0:
            return Breach(self.name, self.signal, value, threshold)
        return None

    def learn(self, value: float) -> None:
        """Keep the largest |value| (the bound stays until the next load)."""
        if math.isfinite(value):
            self.seen = max(self.seen, abs(value))

    def state_dict(self) -> dict:
        """The largest value learned, for the next session."""
        return {"largest": self.largest, "seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved state."""
        self.largest, self.seen = float(state["largest"]), float(state["seen"])

    def new_session(self) -> None:
        """A resumed session: the largest value learned so far becomes the bound's base."""
        self.largest = self.seen


@dataclass
class RuleSet(StateByName):
    """Every rule the guard applies, with their shared learning and state."""

    rules: list[Rule] = field(default_factory=list)

    @classmethod
    def default(cls, k_max: float = 10.0, k_ema: float = 10.0, warmup: int = 100,
                k_median: float = 30.0) -> RuleSet:
        """NaN/Inf on both signals, Megatron's rule on both, the EMA rule on the loss, the
        median rule on both, and the loss against the largest learned before a resume."""
        return cls([RULES["nonfinite"]("loss"), RULES["nonfinite"]("grad_norm"),
                    RULES["spike-max"]("loss", k_max, warmup),
                    RULES["spike-max"]("grad_norm", k_max, warmup),
                    RULES["spike-ema"]("loss", k_ema, warmup),
                    RULES["spike-median"]("loss", k_median),
                    RULES["spike-median"]("grad_norm", k_median),
                    RULES["spike-journaled"]("loss", k_max)])

    def judge(self, values: dict[Signal, float]) -> list[Breach]:
        """Every rule the step's values break, in rule order."""
        found = (rule.judge(values[rule.signal]) for rule in self.rules)
        return [breach for breach in found if breach is not None]

    def learn(self, values: dict[Signal, float]) -> None:
        """Learn from a step that raised no alarm."""
        for rule in self.rules:
            rule.learn(values[rule.signal])

    def new_session(self) -> None:
        """A resumed session begins (`JournaledMax`: its bound from all learned before)."""
        for rule in self.rules:
            if isinstance(rule, JournaledMax):
                rule.new_session()
