"""The health checks a process has for a run folder, which the checkpoint ledger runs before
it seals a save: so a guard and a ledger in one training process meet with no call between them.

The training guard registers its check (`register(RUN_DIR, check)`: the weights finite, within
their learned bounds, their fingerprint the one the last optimizer step left); the ledger asks
`problems(RUN_DIR)` and records a save whose answer is not empty as unhealthy. Torch-free, so
both writers (`guard/`, `ledger/`) can import it; checks are held weakly, so a guard that is
gone stops being asked.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from pathlib import Path

HealthCheck = Callable[[], list[str]]
"""A check: one line per problem found, empty when the weights are healthy."""

_CHECKS: dict[Path, list[weakref.WeakMethod]] = {}


def _key(run_dir: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(run_dir))


def register(run_dir: str | os.PathLike[str], check: HealthCheck) -> None:
    """Ask `check` (a bound method, held weakly) before every save into `run_dir`."""
    _CHECKS.setdefault(_key(run_dir), []).append(weakref.WeakMethod(check))  # type: ignore[arg-type]


def unregister(run_dir: str | os.PathLike[str], check: HealthCheck) -> None:
    """Stop asking `check`."""
    held = _CHECKS.get(_key(run_dir), [])
    held[:] = [ref for ref in held if ref() is not None and ref() != check]


def problems(run_dir: str | os.PathLike[str]) -> list[str]:
    """Every problem the live checks of `run_dir` find now."""
    out: list[str] = []
    for ref in list(_CHECKS.get(_key(run_dir), [])):
        check = ref()
        if check is not None:
            out += check()
    return out
