"""The client's handle on a fork server (`forkserver.py`): start it, fork workers, close it.

`ForkServer.spawn` returns a `ForkedWorker`, which `jobs.run_job` drives exactly as it drives
a cold worker's `Popen`: pipes for stdin, stdout and stderr, a `pid` that is also the child's
process group (the client kills it with killpg), and `wait(timeout)` for its exit status, which
the server reports once it has reaped the child. This module never imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

SERVER_MODULE = "inspector.sandbox.worker.forkserver"
READY_TIMEOUT_S = 300.0
"""How long the server may take to import torch (minutes on a loaded machine)."""


class ForkServerError(Exception):
    """The fork server could not start, or is gone; callers use a cold worker instead."""


class ForkedWorker:
    """A worker forked by the server, with the part of the Popen interface run_job uses."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int, status: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.cpu_s: float | None = None  # its CPU time, from the rusage the server reaped
        self.lost = False  # the server ended before reporting the child's status
        self.stdin = os.fdopen(stdin, "wb")
        self.stdout = os.fdopen(stdout, "rb")
        self.stderr = os.fdopen(stderr, "rb")
        self._status = status

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status once the server has reaped the child (TimeoutExpired before)."""
        if self._status < 0:
            return self.returncode
        ready, _, _ = select.select([self._status], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0)
        line = os.read(self._status, 64)
        os.close(self._status)
        self._status = -1
        fields = line.split()
        # EOF without a status: the server died, and the kernel killed the child with it.
        self.lost = not fields
        self.returncode = int(fields[0]) if fields else -signal.SIGKILL
        self.cpu_s = float(fields[1]) if len(fields) > 1 else None
        return self.returncode

    def __del__(self) -> None:
        # A child whose status never came (wait timed out) must not leak the pipe.
        if self._status >= 0:
            os.close(self._status)


class ForkServer:
    """One warm fork server for this process; `start()` once, `spawn()` per job, `close()`."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one request and its reply at a time on the socket
        self._closing = threading.Lock()

    def start(self, env: dict[str, str]) -> ForkServer:
        """Start the server with `env` and wait until it has imported torch."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # OpenBLAS (numpy's) starts its pool at import; the server must fork single-threaded.
        server_env = {**env, "OPENBLAS_NUM_THREADS": "1"}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-m", SERVER_MODULE, str(theirs.fileno()), str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=server_env, cwd="/", start_new_session=True, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self._sock = ours
        ours.settimeout(READY_TIMEOUT_S)
        try:
            hello = json.loads(ours.recv(4096) or b"{}")
            ours.settimeout(None)
        except (OSError, ValueError) as exc:
            self.close()
            raise ForkServerError(f"the fork server did not start: {exc}") from None
        if not hello.get("ready"):
            self.close()
            why = hello.get("error") or "it exited before it was ready"
            raise ForkServerError(f"the fork server did not start: {why}")
        self.pid = int(hello["pid"])
        return self

    def spawn(self, env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> ForkedWorker:
        """Fork a fresh worker; `pass_fds` reach it at the same descriptor numbers.

        Safe from several threads at once: one job's request and reply never interleave with
        another's, and a server not yet ready, closed or dead raises ForkServerError.
        """
        if self._sock is None or self.pid is None:
            raise ForkServerError("the fork server is not running")
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        status_r, status_w = os.pipe()
        theirs = [stdin_r, stdout_w, stderr_w, status_w]
        message = json.dumps({"env": env, "targets": list(pass_fds)}).encode()
        try:
            with self._lock:
                sock = self._sock
                if sock is None:
                    raise OSError("it was closed")
                socket.send_fds(sock, [message], [*theirs, *pass_fds])
                reply = json.loads(sock.recv(4096) or b'{"error": "it has exited"}')
        except (OSError, ValueError) as exc:
            reply = {"error": str(exc)}
        finally:
            for fd in theirs:
                os.close(fd)
        if "pid" not in reply:
            for fd in (stdin_w, stdout_r, stderr_r, status_r):
                os.close(fd)
            raise ForkServerError(f"the fork server could not fork: {reply.get('error')}")
        return ForkedWorker(int(reply["pid"]), stdin_w, stdout_r, stderr_r, status_r)

    def dead(self) -> bool:
        """Whether the server was ready once and its process has since ended (killed)."""
        proc = self._proc
        return self.pid is not None and (proc is None or proc.poll() is not None)

    def wait_ended(self) -> None:
        """Block until the server's process has ended (killed, or closed); at once when it has
        already been reaped, never started, or the kernel has no pidfds (before Linux 5.3)."""
        proc = self._proc
        if proc is None:
            return
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:
            return
        try:
            # Reaped before the pidfd was opened: the pid may name another process by now.
            if proc.returncode is None:
                poller = select.poll()  # not select(): descriptors past 1024 are fine
                poller.register(fd, select.POLLIN)
                poller.poll()
        finally:
            os.close(fd)

    def close(self) -> None:
        """Stop the server: EOF on its socket makes it kill its children and exit.

        Any thread may call it, also while `start` still waits for the server (which then
        raises ForkServerError): a server still importing is killed at once.
        """
        with self._closing:
            sock, self._sock = self._sock, None
            proc, self._proc = self._proc, None
        if sock is not None:
            # shutdown, unlike close, wakes a thread blocked in recv on this socket.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if proc is not None:
            try:
                proc.wait(timeout=5 if self.pid is not None else 0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
