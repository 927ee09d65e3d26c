"""The health checks a process has for a run folder, which the checkpoint ledger runs before
it seals a save: so a guard and a ledger in one training process meet with no call between them.

The training guard registers its check (`register(RUN_DIR, check, watches, saved)`: the weights
finite, within their learned bounds, their fingerprint the one the last optimizer step left;
`saved(state)`: the state being saved, which may be a copy, held to what the guard knows, its
weights' fingerprints and bounds, its optimizers' step counters); the ledger
asks `problems(RUN_DIR, state)` and records a save whose answer is not empty as unhealthy. A
check is asked when the save's run folder is the guard's or inside it (a ledger whose run folder
defaults to the checkpoint's folder, `RUN/checkpoints`, beside a guard of `RUN`), or when the
saved state holds a tensor of a model the guard watches (`watches`), wherever either was told
to write. A live guard that neither connects is not asked, and one line on stderr says so (once
per guard and run folder): a save sealed without its guard's word must not look like one that
had it. Torch-free, so both writers (`guard/`, `ledger/`) can import it; checks are held
weakly, so a guard that is gone stops being asked.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HealthCheck = Callable[[], list[str]]
"""A check: one line per problem found, empty when the weights are healthy."""
Watches = Callable[[Any], bool]
"""Whether a state about to be saved holds a tensor of a model the check's guard watches."""
SavedCheck = Callable[[Any], list[str]]
"""A check of the state about to be saved itself against what the guard knows (the copy of
its weights, its optimizers' step counters): one line per problem."""


@dataclass
class _Registered:
    run_dir: Path
    check: weakref.WeakMethod
    watches: weakref.WeakMethod | None
    saved: weakref.WeakMethod | None
    said: set[Path]
    """The run folders of saves this check was not asked for, already said on stderr."""


_CHECKS: list[_Registered] = []


def _key(run_dir: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(run_dir))


def register(run_dir: str | os.PathLike[str], check: HealthCheck,
             watches: Watches | None = None, saved: SavedCheck | None = None) -> None:
    """Ask `check` (a bound method, held weakly) before every save into `run_dir` or a folder
    inside it, and before every save of a state `watches` (a bound method) says it watches;
    then `saved(state)` (a bound method) with the state being saved, when there is one."""
    _CHECKS.append(_Registered(_key(run_dir), weakref.WeakMethod(check),  # type: ignore[arg-type]
                               _weak(watches), _weak(saved), set()))


def _weak(method: Callable | None) -> weakref.WeakMethod | None:
    return weakref.WeakMethod(method) if method else None  # type: ignore[arg-type]


def unregister(run_dir: str | os.PathLike[str], check: HealthCheck) -> None:
    """Stop asking `check`."""
    _CHECKS[:] = [r for r in _CHECKS if r.check() is not None and r.check() != check]


def problems(run_dir: str | os.PathLike[str], state: Any = None) -> list[str]:
    """Every problem the live checks connected to a save of `state` into `run_dir` find now;
    each live check not connected is said once on stderr."""
    run = _key(run_dir)
    out: list[str] = []
    for r in list(_CHECKS):
        check = r.check()
        if check is None:
            continue
        watches = r.watches() if r.watches is not None else None
        if run == r.run_dir or r.run_dir in run.parents or (
                state is not None and watches is not None and watches(state)):
            out += check()
            saved = r.saved() if r.saved is not None else None
            if state is not None and saved is not None:
                out += saved(state)
        elif run not in r.said:
            r.said.add(run)
            print(f"inspector.ledger: the training guard of {r.run_dir} was not asked about a "
                  f"save into {run}: neither is that run folder inside the guard's nor does the "
                  "save hold a tensor of a model it watches; pass run_dir= to the ledger so "
                  "the guard's alarms reach its saves", file=sys.stderr)
    return out
