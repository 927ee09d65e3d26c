"""Starting a worker: cold, as a fresh interpreter, or forked from this process's warm server.

A cold worker is `python -I -m inspector.sandbox.worker.main`, started in a session of its own
with a scrubbed environment (`worker_env`). Within `spare_worker()` one cold worker is started
at once, before its request is known, and the next cold job without descriptors takes it: its
interpreter starts and imports while the caller still starts up (the `scan` command).
Within `fork_server()` (or after `start_fork_server`), jobs fork their workers from one warm
fork server instead (`forkclient.ForkServer`), which has imported torch and every operation's
module already; a server that cannot start, or dies, leaves jobs to cold workers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from inspector.sandbox.host.process import kill_group
from inspector.sandbox.switches import DISABLE_ENV, PAYLOAD_ENV, SELFTEST_ENV, selftest

if TYPE_CHECKING:  # the fork server's client (and `socket`) load only where one starts
    from inspector.sandbox.host.forkclient import ForkedWorker, ForkServer

WORKER_MODULE = "inspector.sandbox.worker.main"


def worker_env() -> dict[str, str]:
    """The worker's whole environment: nothing inherited but the test suite's switches."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8",
           "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    if selftest(os.environ):
        env[SELFTEST_ENV] = "1"
        for name in (DISABLE_ENV, PAYLOAD_ENV):
            if os.environ.get(name):
                env[name] = os.environ[name]
    return env


_fork_server: ForkServer | None = None
_fork_server_lock = threading.Lock()
_keep_warm = False
"""Whether a server found dead is replaced (`start_fork_server(keep_warm=True)`)."""


def start_fork_server(keep_warm: bool = False) -> ForkServer:
    """Start this process's warm server; every later `run_job` (any thread) forks from it once
    it is ready, until `stop_fork_server`. Raises ForkServerError when it cannot start, or when
    it was stopped (or another was started) while it started.

    `keep_warm`: a server that dies (killed) is replaced in the background as soon as its
    process ends (a `fork-server-watch` thread waits for it); jobs until the new one is ready,
    and a job that finds it dead before that thread does, run cold workers."""
    return _start_server(keep_warm, replacing=False)


def _start_server(keep_warm: bool, replacing: bool) -> ForkServer:
    from inspector.sandbox.host.forkclient import ForkServer, ForkServerError

    global _fork_server, _keep_warm
    server = ForkServer()
    with _fork_server_lock:
        if _fork_server is not None:
            raise ForkServerError("a fork server is already in use")
        if replacing and not _keep_warm:
            raise ForkServerError("the fork server was stopped before it was replaced")
        _fork_server = server  # run_job skips it until it is ready; stop can kill it meanwhile
        _keep_warm = keep_warm
    try:
        server.start(worker_env())
    except ForkServerError:
        with _fork_server_lock:
            if _fork_server is server:
                _fork_server = None
        raise
    with _fork_server_lock:
        stopped = _fork_server is not server
    if stopped:
        server.close()
        raise ForkServerError("the fork server was stopped while it started")
    if keep_warm:
        threading.Thread(target=_watch, args=(server,), daemon=True,
                         name="fork-server-watch").start()
    return server


def stop_fork_server() -> None:
    """Stop this process's warm server (also one still starting); jobs start cold workers."""
    global _fork_server, _keep_warm
    with _fork_server_lock:
        server, _fork_server = _fork_server, None
        _keep_warm = False
    if server is not None:
        server.close()


def _replace_lost(server: ForkServer) -> None:
    """`server` died: forget and reap it, and start another in the background if kept warm."""
    global _fork_server
    with _fork_server_lock:
        if _fork_server is not server:  # already replaced, or stopped
            return
        _fork_server = None
        replace = _keep_warm
    server.close()
    if replace:
        threading.Thread(target=_replace, daemon=True, name="fork-server").start()


def _watch(server: ForkServer) -> None:
    # A kept-warm server killed while no job runs is replaced at once, not by the next job
    # (which would run cold); a server closed on purpose is no longer current and stays gone.
    server.wait_ended()
    if server.dead():
        _replace_lost(server)


def _replace() -> None:
    # Jobs meanwhile start cold workers; a stop before or during this start prevents or kills it.
    from inspector.sandbox.host.forkclient import ForkServerError

    with contextlib.suppress(ForkServerError):
        _start_server(keep_warm=True, replacing=True)


@contextlib.contextmanager
def fork_server(enabled: bool = True) -> Iterator[ForkServer | None]:
    """Within the block, this process's jobs fork from one warm server (None when disabled,
    or when it cannot start: jobs then start cold workers, as everywhere outside the block)."""
    if not enabled or _fork_server is not None:
        yield _fork_server
        return
    from inspector.sandbox.host.forkclient import ForkServerError

    try:
        server = start_fork_server()
    except ForkServerError as exc:
        print(f"note: {exc}; using a cold worker per job", file=sys.stderr)
        yield None
        return
    try:
        yield server
    finally:
        stop_fork_server()


def launch(pass_fds: tuple[int, ...]) -> subprocess.Popen | ForkedWorker:
    """A fresh worker: forked from the warm server when one is in use, else the spare
    (`spare_worker`) when the job passes no descriptors, else a cold start."""
    server = _fork_server
    if server is not None:
        from inspector.sandbox.host.forkclient import ForkServerError

        try:
            return server.spawn(worker_env(), pass_fds)
        except ForkServerError:
            if server.dead():
                _replace_lost(server)
    if not pass_fds and (spare := _take_spare()) is not None:
        return spare
    return _cold(pass_fds)


def _cold(pass_fds: tuple[int, ...]) -> subprocess.Popen:
    """A fresh interpreter running the worker, waiting for its request on stdin."""
    return subprocess.Popen(
        [sys.executable, "-I", "-m", WORKER_MODULE],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=worker_env(), cwd="/", start_new_session=True, pass_fds=pass_fds,
    )


_spare: subprocess.Popen | None = None
_spare_lock = threading.Lock()


@contextlib.contextmanager
def spare_worker(enabled: bool = True) -> Iterator[None]:
    """Within the block, one cold worker started now waits for the first job that would start
    one (`launch`); a worker nobody took is killed when the block ends. It is the same
    process a job starts (same command, environment and folder): it reads nothing before its
    request, and jails itself after it as every worker does."""
    global _spare
    with _spare_lock:
        mine = None
        if enabled and _fork_server is None and _spare is None:
            # one that cannot start fails again in its job, which says so in its result
            with contextlib.suppress(OSError):
                mine = _spare = _cold(())
    try:
        yield
    finally:
        with _spare_lock:
            left = mine is not None and _spare is mine
            if left:
                _spare = None
        if left:
            kill_group(mine)
            _close_pipes(mine)


def _take_spare() -> subprocess.Popen | None:
    """The spare worker, once, if it is still alive (else it is reaped and None)."""
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is None or spare.poll() is None:
        return spare
    _close_pipes(spare)
    return None


def _close_pipes(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()
