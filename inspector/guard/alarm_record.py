"""How an alarm is told: the one shape of a `guard.alarm` journal record, shared by the numerics
guard and the data-order ledger (and read by the ledger's `report RUN_DIR`), and the guard's
voice on stderr (`AlarmConsole`): one line the first time each rule fires, then a count line at
its 10th, 100th, 1000th ... alarm, and at `close` one line per rule that fired more than once.
So `warn` is never silent, and a rule that fires every step does not flood the console. And the
steps an integration's callback could not give the guard (`Unchecked`: no loss it could see),
said once on stderr and held against every later save of the run through `run.health_gate`, so
a run whose steps went unchecked never has its saves sealed as if the guard had passed them."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from inspector.run import health_gate, journal
from inspector.run.status import GUARD_ALARM as ALARM_KIND


def append_alarm(run_dir: str | os.PathLike[str], *, step: int, rule: str, value: Any,
                 threshold: Any, action: str, rank: int, params: list[str] | None = None,
                 attribution: str | None = None, scene: Path | None = None,
                 **extra: Any) -> None:
    """Append one alarm, with the fields every reader may rely on, then any `extra` ones."""
    fields = {"step": step, "rule": rule, "value": value, "threshold": threshold,
              "action": action, "params": params or [], "attribution": attribution,
              "scene": str(scene) if scene is not None else None, "time": time.time(),
              "host": socket.gethostname(), "rank": rank, **extra}
    journal.append(journal.journal_path(run_dir), ALARM_KIND, fields)


PREFIX = "inspector.guard"

DOING = {"warn": "training goes on", "skip": "the optimizer step was skipped",
         "halt": "the run halts"}


class AlarmConsole:
    """Rate-limited alarm lines for one guard (one rank)."""

    def __init__(self, rank: int = 0, stream: TextIO | None = None) -> None:
        self.rank = rank
        self.stream = stream
        self.counts: Counter[str] = Counter()
        self.last_step: dict[str, int] = {}

    def alarm(self, rule: str, step: int, action: str, what: str) -> None:
        """Note one alarm; print its first line, or a count line at 10, 100, 1000, ..."""
        self.counts[rule] += 1
        self.last_step[rule] = step
        n = self.counts[rule]
        if n == 1:
            self._say(f"step {step}: {rule}: {what}; {DOING.get(action, action)} (further "
                      f"{rule} alarms are counted; the journal holds each one)")
        elif _power_of_ten(n):
            self._say(f"{rule} has fired {n} times (last at step {step}); "
                      f"{DOING.get(action, action)}")

    def close(self) -> None:
        """One line per rule that fired more than once since its last count line."""
        for rule, n in self.counts.items():
            if n > 1 and not _power_of_ten(n):
                self._say(f"{rule} fired {n} times in all (last at step {self.last_step[rule]})")

    def _say(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"{PREFIX} (rank {self.rank}): {text}", file=stream, flush=True)


def _power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


class Unchecked:
    """The optimizer steps a callback could not check, for the ledger's health check."""

    def __init__(self, run_dir: Path, watches: Callable[[Any], bool], why: str) -> None:
        self.run_dir = run_dir
        self.watches = watches
        self.why = why
        self.steps: list[int] = []

    def note(self, step: int) -> None:
        """Step `step` went to the optimizer unchecked; the first one is said on stderr and
        from then on every save of the run is unhealthy."""
        self.steps.append(step)
        if len(self.steps) == 1:
            health_gate.register(self.run_dir, self.health, self.watches)
            print(f"inspector.guard: step {step} was not checked: {self.why}; no save of "
                  f"{self.run_dir} is sealed verified from now on", file=sys.stderr, flush=True)

    def health(self) -> list[str]:
        """One problem while any step went unchecked (`run.health_gate`'s check)."""
        if not self.steps:
            return []
        return [f"{len(self.steps)} optimizer steps the guard never checked (first at step "
                f"{self.steps[0]}): {self.why}"]

    def close(self) -> None:
        """Stop being asked by the ledger."""
        if self.steps:
            health_gate.unregister(self.run_dir, self.health)
