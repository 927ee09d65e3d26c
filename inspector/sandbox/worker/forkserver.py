"""The fork server: `python -I -m inspector.sandbox.worker.forkserver FD PID`, a warm parent for
workers (FD its control socket, PID the client that started it).

It imports torch, safetensors and every operation's module once, then forks one child per job;
the child is the worker (`worker.main`) from its first line on: it reads the client's request,
jails itself and only then opens an input. The server itself never reads a byte of any input
and never runs a torch operation, so no thread pool exists when it forks (it checks that it is
single-threaded before it says it is ready, and OpenBLAS is told to start no threads).

Control protocol, on the Unix SOCK_SEQPACKET socket FD (one message each way per job):
    client -> server: {"env": {...}, "targets": [int, ...]} with descriptors attached by
        SCM_RIGHTS: the child's stdin, stdout, stderr, a status pipe, then one per target
        (the descriptor the request names, e.g. a conversion's output, at that number);
    server -> client: {"pid": int} (or {"error": str}).
The server writes the child's exit status (as Popen.returncode: negative for a signal) and its
CPU seconds (its rusage's user and system time) on the job's status pipe once it has reaped
it. Where it may (root), it forks each child into a PID namespace of the job's own whose init
it started just before
(`jail.pid_namespace_for_next_child`), so a job costs one fork of this torch-sized process: the
server is the process outside that reaps the worker, and it closes the init's pipe once it
has. Its first message is {"ready": true, "pid": int} or {"ready": false, "error": str}.
EOF on the socket (the client closed it or died), or the death of the process that
started it (checked every `PARENT_CHECK_S`), makes the server kill every child's group and
exit; each child also gets SIGKILL should the server die (PR_SET_PDEATHSIG). It exits without
the interpreter's teardown, which after importing torch takes 0.6-0.9 s that the client spends
waiting (it has no file or state to clean up).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import selectors
import signal
import socket
import sys

from inspector.sandbox.protocol import disabled_layers

MAX_FDS = 16
"""Descriptors one job may pass: the four of the child's plumbing and a few targets."""


def preload() -> None:
    """Import what every operation needs, running none of it (no torch op: no thread pool)."""
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401

    import inspector.tensors.describe  # noqa: F401  # the inspect op imports it when it needs torch
    from inspector.sandbox.worker import jail
    from inspector.sandbox.worker import main as worker

    for target in (*worker.OPS.values(), worker.SELFTEST_OP):
        importlib.import_module(target.split(":")[0])
    jail.warm_up()


def thread_count() -> int:
    """Threads of this process (forking with more than one would copy their locks' state)."""
    return len(os.listdir("/proc/self/task"))


def main() -> int:
    """Preload, report ready, then fork a jailed worker per request until the socket closes."""
    ctl = socket.socket(fileno=int(sys.argv[1]))
    ctl.set_inheritable(False)  # no namespace init may hold it
    client = int(sys.argv[2])
    try:
        preload()
    except Exception as exc:  # the client falls back to cold workers
        ctl.send(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
        return 1
    if (threads := thread_count()) != 1:
        ctl.send(json.dumps({"ready": False,
                             "error": f"{threads} threads after the imports"}).encode())
        return 1
    ctl.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    return _serve(ctl, client)


class _Namespaces:
    """Whether this server makes each job's PID namespace, and from where."""

    def __init__(self) -> None:
        self.own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.possible = True
        self.made = False

    def for_next_child(self, env: dict[str, str]) -> int | None:
        """The new namespace's init pipe, or None (not allowed here, or the job's self-test
        leaves the PID namespace off): the child then makes its own, or none."""
        from inspector.sandbox.worker import jail

        make = self.possible and "pidns" not in disabled_layers(env)
        if not (make or self.made):
            return None
        alive = jail.pid_namespace_for_next_child(self.own, make)
        self.made = self.made or alive is not None
        self.possible = not make or alive is not None
        return alive


PARENT_CHECK_S = 1.0
"""How often the server checks that the process that started it still lives."""


def _serve(ctl: socket.socket, client: int) -> int:
    # EOF on the socket is the client's end, unless a process the client forked still holds
    # its end (a forked child inherits every descriptor): a client that died (a segfault) is
    # then seen by the server's reparenting. The client's pid comes from argv, since it may
    # die before this line runs.
    children: dict[int, tuple[int, int | None]] = {}  # pid -> its status pipe, its init's
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(ctl, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    namespaces = _Namespaces()
    try:
        while os.getppid() == client:
            for key, _ in selector.select(PARENT_CHECK_S):
                if key.fileobj is ctl:
                    message, fds, _, _ = socket.recv_fds(ctl, 1 << 16, MAX_FDS)
                    if not message:
                        return 0
                    _fork_job(ctl, message, fds, children, namespaces)
                else:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
            _reap(children)
        return 0
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _fork_job(ctl: socket.socket, message: bytes, fds: list[int],
              children: dict[int, tuple[int, int | None]], namespaces: _Namespaces) -> None:
    alive = None
    for fd in fds:  # received inheritable: no init may hold a job's pipe
        os.set_inheritable(fd, False)
    try:
        job = json.loads(message)
        targets = [int(t) for t in job.get("targets", ())]
        if len(fds) != 4 + len(targets) or any(t <= 2 for t in targets):
            raise ValueError(f"{len(fds)} descriptors for {len(targets)} targets")
        env = dict(job.get("env") or {})
        alive = namespaces.for_next_child(env)
        sys.stderr.flush()
        server = os.getpid()
        pid = os.fork()
    except (ValueError, OSError) as exc:
        for fd in fds if alive is None else (*fds, alive):
            os.close(fd)
        ctl.send(json.dumps({"error": str(exc)}).encode())
        return
    if pid == 0:
        _child(fds, targets, env, server, alive is not None)
    for fd in fds[:3] + fds[4:]:
        os.close(fd)
    children[pid] = (fds[3], alive)
    ctl.send(json.dumps({"pid": pid}).encode())


def _reap(children: dict[int, tuple[int, int | None]]) -> None:
    """Report each finished worker's status and let its namespace's init go; reap inits."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status_fd, alive = children.pop(pid, (None, None))
        if status_fd is not None:
            with contextlib.suppress(OSError):
                cpu = usage.ru_utime + usage.ru_stime  # the client explains a death by it
                os.write(status_fd,
                         f"{os.waitstatus_to_exitcode(status)} {cpu:.3f}\n".encode())
            os.close(status_fd)
        if alive is not None:
            os.close(alive)


def _child(fds: list[int], targets: list[int], env: dict[str, str], server: int,
           in_namespace: bool) -> None:
    """The forked worker: own session, the job's descriptors only, then `worker.main`.
    `in_namespace`: PID 2 of the PID namespace the server made for it."""
    status = 70
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        from inspector.sandbox.worker import main as worker
        from inspector.sandbox.worker.jail import die_with_parent

        die_with_parent()
        # The server died before the line above took effect (in a namespace of its own the
        # parent has no pid here, and the server's death kills the namespace anyway).
        if not in_namespace and os.getppid() != server:
            return
        wanted = [0, 1, 2, *targets]
        # Lift every received descriptor above all wanted numbers first, so no dup2 below
        # can overwrite one not yet moved.
        floor = max(wanted + fds) + 1
        lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
        for number, fd in zip(wanted, lifted[:3] + lifted[4:], strict=True):
            os.dup2(fd, number, inheritable=number <= 2)
        _close_all_but(set(wanted))
        os.environ.clear()
        os.environ.update(env)
        status = worker.main(pid_namespace_made=in_namespace)
        sys.stderr.flush()
    finally:
        os._exit(status)


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor not in `keep` (the server's socket and other jobs' pipes)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
