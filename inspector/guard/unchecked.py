"""Optimizer steps an integration's callback saw but could not give the guard (no loss it could
see): said once on stderr and held against every save of the run through `run.health_gate`, so
a run whose steps went unchecked never has its saves sealed as if the guard had passed them."""

from __future__ import annotations

import sys

from inspector.guard.guard import Guard
from inspector.run import health_gate


class Unchecked:
    """Counts the optimizer steps a callback could not check, for the ledger's health check."""

    def __init__(self, guard: Guard, why: str) -> None:
        self.guard = guard
        self.why = why
        self.steps: list[int] = []

    def note(self, step: int) -> None:
        """Step `step` went to the optimizer unchecked; the first one is said on stderr and
        from then on every save of the run is unhealthy."""
        self.steps.append(step)
        if len(self.steps) == 1:
            health_gate.register(self.guard.run_dir, self.health, self.guard.models.holds)
            print(f"inspector.guard: step {step} was not checked: {self.why}; no save of "
                  f"{self.guard.run_dir} is sealed verified from now on", file=sys.stderr,
                  flush=True)

    def health(self) -> list[str]:
        """One problem while any step went unchecked (`run.health_gate`'s check)."""
        if not self.steps:
            return []
        return [f"{len(self.steps)} optimizer steps the guard never checked (first at step "
                f"{self.steps[0]}): {self.why}"]

    def close(self) -> None:
        """Stop being asked by the ledger."""
        if self.steps:
            health_gate.unregister(self.guard.run_dir, self.health)
