"""Why a worker ended without a result, said from what its reaper collected (the exit status,
and the CPU time its rusage counts), never guessed.

A signal is named (`SIGKILL`, signal 9); a limit only where the numbers show it (SIGXCPU, or a
SIGKILL after the CPU time reached the hard limit the kernel enforces with it). A SIGKILL none
of the job's limits sent is said to have come from outside the job, with the CPU time it had
used. `KILLED_CODES` are the failures of a worker killed by a limit or a signal, which a reading
job retries once (`admission.DryRunReader`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

CPU_HARD_MARGIN_S = 2
"""Seconds past the soft CPU limit (SIGXCPU) at which the kernel sends SIGKILL (the jail sets
RLIMIT_CPU's hard limit so)."""
# The wall-clock and idle limits are left out: a payload that sleeps would be waited for twice.
KILLED_CODES = frozenset({"worker_killed", "worker_crashed", "worker_lost", "cpu_limit",
                          "file_size_limit", "seccomp_violation", "thread_limit"})


@dataclass(frozen=True)
class WorkerExit:
    """What the worker's reaper saw: its exit status as Popen reports it (negative: the
    signal), the CPU seconds it used (user and system, its waited-for children included;
    None where not collected), and whether the fork server ended before reporting it."""

    returncode: int | None
    cpu_s: float | None = None
    lost: bool = False


def signal_name(number: int) -> str:
    """`SIGKILL (signal 9)`, or `signal N` for a number Python does not name."""
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


_BY_SIGNAL = {
    getattr(signal, "SIGXFSZ", None): ("file_size_limit", "the worker exceeded its file-size "
                                       "limit"),
    getattr(signal, "SIGSYS", None): ("seccomp_violation", "the worker made a forbidden system "
                                      "call and was killed"),
    signal.SIGSEGV: ("worker_crashed", "the worker crashed"),
    signal.SIGABRT: ("worker_crashed", "the worker aborted"),
}


def describe(end: WorkerExit, cpu_limit: float | None, last_line: str) -> tuple[str, str]:
    """The stable code and the one-line message for a worker that ended without a result."""
    if end.lost:
        return ("worker_lost", "the fork server ended before it reported the worker's exit "
                "status (its workers end with it)")
    code = end.returncode
    if code is None:
        return "worker_crashed", "the worker ended without an exit status"
    if code >= 0:
        return "worker_crashed", f"the worker exited ({code}) without a result: {last_line}"
    number = -code
    used = "" if end.cpu_s is None else f" after {end.cpu_s:.1f} s of CPU time"
    if number == getattr(signal, "SIGXCPU", None):
        return ("cpu_limit", f"the worker reached its CPU-time limit ({cpu_limit:g} s) and the "
                f"kernel stopped it with {signal_name(number)}{used}")
    if number == signal.SIGKILL:
        return _killed(end, cpu_limit)
    fixed, text = _BY_SIGNAL.get(number, ("worker_crashed", "the worker died"))
    return fixed, f"{text}: {signal_name(number)}{used}"


def _killed(end: WorkerExit, cpu_limit: float | None) -> tuple[str, str]:
    name = signal_name(signal.SIGKILL)
    if end.cpu_s is None:
        return "worker_killed", f"the worker was killed by {name}; its CPU time was not reported"
    if cpu_limit is not None and end.cpu_s >= cpu_limit:
        return ("cpu_limit", f"the worker used {end.cpu_s:.1f} s of CPU time, past its limit "
                f"({cpu_limit:g} s), and the kernel killed it with {name} at the hard limit "
                f"({cpu_limit + CPU_HARD_MARGIN_S:g} s)")
    limit = f" of its {cpu_limit:g} s limit" if cpu_limit is not None else ""
    return ("worker_killed", f"the worker was killed by {name} after {end.cpu_s:.1f} s of CPU "
            f"time{limit}: none of the job's own limits sends it there, so it came from outside "
            "the job")
