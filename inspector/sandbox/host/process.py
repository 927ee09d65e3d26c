"""A running worker's process group: the watchdog that kills it, its stderr tail, its threads.

A worker runs in a session (process group) of its own, cold or forked, so killing the group
kills the worker, the relay and the PID namespace's init together, and nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator

from inspector.core.progress import CancelToken

STDERR_LINE = 2000
"""Characters kept of one stderr line: the tail is for a person, and the worker is hostile."""


def drain_stderr(fd: int, tail: deque[str]) -> None:
    """Read the worker's stderr to its end, keeping the last lines (each bounded) in `tail`."""
    partial = bytearray()
    while chunk := os.read(fd, 1 << 16):
        lines = (bytes(partial) + chunk).split(b"\n")
        partial[:] = lines.pop()[-STDERR_LINE:]
        tail.extend(raw[:STDERR_LINE].decode("utf-8", "replace").rstrip() for raw in lines)
    if partial:
        tail.append(partial.decode("utf-8", "replace").rstrip())


def signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (a no-op once everything has exited)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group and reap the worker (`reap`)."""
    signal_group(proc)
    reap(proc, timeout=5)


def reap(proc: subprocess.Popen, timeout: float) -> None:
    """Collect the worker's exit status, and for a cold worker the CPU time its rusage counts
    (`proc.cpu_s`: user and system seconds, the children it waited for included), so that a
    death is explained from numbers (`exits`); a forked worker's come from its server."""
    if not isinstance(proc, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        return
    deadline = time.monotonic() + timeout
    # a killed worker is gone within a millisecond or two: a fixed 10 ms poll made every job
    # (and every scan command) wait most of one after its answer was in
    pause = 0.0005
    while proc.returncode is None:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: Popen knows its status
            proc.poll()
            return
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            proc.cpu_s = usage.ru_utime + usage.ru_stime
            return
        if time.monotonic() > deadline:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def thread_count(pid: int) -> int:
    """Threads of the process and its descendants (the relay, the namespace's init and the
    worker) from /proc; 0 where there is none to read."""
    count = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Threads:"):
                    count = int(line.split()[1])
                    break
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as fh:
            children = [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        return count
    return count + sum(thread_count(child) for child in children)


class Watchdog:
    """Kills the worker's group on timeout, cancel, more than `max_threads` threads, or no
    sign of life (`touch`) for `idle` seconds."""

    def __init__(self, proc: subprocess.Popen, cancel: CancelToken | None,
                 timeout: float | None, max_threads: int | None = None,
                 idle: float | None = None) -> None:
        self.reason: str | None = None
        self._proc = proc
        self._cancel = cancel
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._idle = idle
        self._last = time.monotonic()
        self._paused_at: float | None = None
        self._grace: float | None = None
        self._max_threads = max_threads
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The timeout and the idle limit do not run meanwhile (cancel and the thread limit
        still do)."""
        self._paused_at = time.monotonic()
        try:
            yield
        finally:
            paused_for = time.monotonic() - self._paused_at
            if self._deadline is not None:
                self._deadline += paused_for
            self._last += paused_for
            self._paused_at = None

    def touch(self) -> None:
        """The worker reported something: the idle limit starts again."""
        self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            if self._cancel is not None and self._cancel.cancelled:
                self.reason = "cancel"
            elif (self._deadline is not None and self._paused_at is None
                  and time.monotonic() > self._deadline):
                self.reason = "timeout"
            elif (self._idle is not None and self._paused_at is None
                  and time.monotonic() - self._last > self._idle):
                self.reason = "idle"
            elif self._grace is not None and time.monotonic() > self._grace:
                self.reason = "grace"
            elif self._max_threads and thread_count(self._proc.pid) > self._max_threads:
                self.reason = "threads"
            else:
                continue
            kill_group(self._proc)
            return

    def expire_in(self, seconds: float) -> None:
        """Kill the group after `seconds` whatever happens (the job's answer is in)."""
        self._grace = time.monotonic() + seconds

    def finish(self) -> None:
        """Stop watching (the job is over)."""
        self._done.set()
        self._thread.join()
