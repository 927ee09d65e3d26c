"""How long a jailed job may run: a wall-clock limit that scales with its input, and an idle
limit (no line from the worker for that long).

Every job ends: a payload that sleeps, spins or waits on something that never comes is killed
by one of the two, and the error names the limit that was hit and how to raise it. The wall
limit is the caller's `timeout` when it gives one, else `TIMEOUT_ENV`, else `BASE_S` plus
`PER_GIB_S` per GiB of the job's inputs (and never below the job's CPU-time limit, which its
caller sized). The idle limit is the process-wide setting (`set_idle_timeout`: the CLI's
`--idle-timeout`), else `IDLE_TIMEOUT_ENV`, else `IDLE_S`. Zero means no limit for either.
Neither counts the time the client's own gate (the static scan) takes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from inspector.sandbox.protocol import Limits

TIMEOUT_ENV = "CKPT_INSPECTOR_TIMEOUT"
"""Seconds a job may run when the caller gives no timeout (0: no limit)."""
IDLE_TIMEOUT_ENV = "CKPT_INSPECTOR_IDLE_TIMEOUT"
"""Seconds a job may go without reporting anything (0: no limit)."""
BASE_S = 300
"""The default wall-clock limit of a job on an empty input."""
PER_GIB_S = 120
"""Added to the default wall-clock limit per GiB of input: reading at 9 MB/s still finishes."""
IDLE_S = 300
"""The default idle limit: the longest quiet stretch of a real job is one loader call (a
legacy torch file read whole), well under this on a disk of 100 MB/s for 10 GB."""

_idle_setting: float | None = None


@dataclass(frozen=True)
class Deadlines:
    """One job's limits in seconds (None: no limit) and where the wall limit came from."""

    wall: float | None
    idle: float | None
    wall_origin: str

    def timeout_message(self) -> str:
        """The one line for a job killed at its wall-clock limit."""
        return (f"the worker did not finish within {self.wall:g} s ({self.wall_origin}); "
                f"raise the limit with --timeout SECONDS or {TIMEOUT_ENV}=SECONDS (0: none)")

    def idle_message(self) -> str:
        """The one line for a job killed at its idle limit."""
        return (f"the worker reported nothing for {self.idle:g} s (the idle limit); raise it "
                f"with --idle-timeout SECONDS or {IDLE_TIMEOUT_ENV}=SECONDS (0: none)")


def set_idle_timeout(seconds: float | None) -> None:
    """The idle limit of this process's later jobs (None: `IDLE_TIMEOUT_ENV` or `IDLE_S`)."""
    global _idle_setting
    _idle_setting = seconds


def input_bytes(request: Mapping) -> int:
    """Bytes of the regular files a request names (`path` and `paths`)."""
    names = [request["path"]] if request.get("path") else []
    names += list(request.get("paths", ()))
    total = 0
    for name in names:
        try:
            if os.path.isfile(name):
                total += os.path.getsize(name)
        except (OSError, TypeError, ValueError):  # a name that is no path reads as nothing
            continue
    return total


def for_job(request: Mapping, timeout: float | None,
            env: Mapping[str, str] | None = None) -> Deadlines:
    """The limits of one job: `timeout` from the caller wins, then the environment, then the
    defaults scaled to the request's inputs."""
    env = os.environ if env is None else env
    if timeout is not None:
        wall, origin = timeout, "the given --timeout"
    elif (from_env := _seconds(env.get(TIMEOUT_ENV))) is not None:
        wall, origin = from_env, TIMEOUT_ENV
    else:
        size = input_bytes(request)
        cpu = Limits.from_json(request.get("limits") or {}).cpu_seconds
        wall = max(BASE_S + PER_GIB_S * size / (1 << 30), cpu)
        origin = f"the default for {size / (1 << 30):.2f} GiB of input"
    idle = _idle_setting
    if idle is None:
        idle = _seconds(env.get(IDLE_TIMEOUT_ENV))
    if idle is None:
        idle = IDLE_S
    return Deadlines(wall or None, idle or None, origin)


def _seconds(text: str | None) -> float | None:
    """A limit from the environment: a non-negative number, else None (the default holds)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None
