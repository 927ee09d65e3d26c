"""Client of the jailed worker: plain Python, used by the CLI, the GUI and the tests.

`run_job` starts `python -I -m inspector.sandbox.worker.main` with a scrubbed environment in its
own session (process group), or within `fork_server()` forks it from one warm fork server
(`forkclient.py`), sends the request, streams the worker's events to `on_event`, and kills
the whole group on timeout, cancel or crash, so nothing is left running. Failures
raise `SandboxError` with a stable `code` and a one-line `message`; a cancel raises
`Cancelled`. This module never imports torch and never unpickles.

The worker is treated as hostile once it has read the input: the jail level is the one its
handshake gave before the start line was sent (`jail_refused` when weaker than required),
and its output is read in bounded chunks, so a worker that floods, repeats the handshake or
adds lines after its result is killed (`protocol_violation`) without growing this process.

`inspect_file` and `convert_file` add the static scan first: a file the scan calls dangerous
is not handed to the worker unless the caller overrides, and even then it is only loaded with
weights_only=True inside the jail. The file's SHA-256 is computed in a thread of this process
while the worker loads and hashes tensors, so the two use both cores.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from inspector.checkpoint.results import DiffResult
from inspector.checkpoint.resume import model_facts
from inspector.core.atomic import OutputExistsError, atomic_write, write_text_atomic
from inspector.core.errors import CodedError
from inspector.core.progress import Cancelled, CancelToken
from inspector.core.vocabulary import (
    DEFAULT_REQUIRED_JAIL,
    JailLevel,
    JailRequirement,
    Severity,
    Verdict,
)
from inspector.formats import loadable
from inspector.integrity.hashing import DIGEST_ALGORITHM, sha256_file
from inspector.sandbox.host.forkclient import ForkedWorker, ForkServer, ForkServerError
from inspector.sandbox.host.parallel import job_threads
from inspector.sandbox.worker.jail import LEVELS, default_max_threads
from inspector.scan.dcp_folder import folder_files, is_dcp_folder, scan_folder
from inspector.shards.index import ShardError, ShardIndex, check_contents
from inspector.shards.inspect import is_sharded_input
from inspector.shards.shard_set import resolve as resolve_shards

EventFn = Callable[[dict], None]

WORKER_MODULE = "inspector.sandbox.worker.main"
SELFTEST_ENV = "CKPT_INSPECTOR_SANDBOX_SELFTEST"
DISABLE_ENV = "CKPT_INSPECTOR_SANDBOX_DISABLE"
MAX_LINE_BYTES = 64 << 20
"""One protocol line: an inspect result repeats every tensor record (about 1 KiB each), so
this admits some 60,000 tensors while bounding what one line can make this process hold."""
LINE_BUDGET = {b"{[": MAX_LINE_BYTES // 64, b",:": MAX_LINE_BYTES // 8, b'"': MAX_LINE_BYTES // 12}
"""What one line may hold besides bytes: containers, items (commas and colons) and quote
marks (two per string), counted before parsing (inside strings too, which only errs towards
refusing). The parsed form of `[{},{},...]` is 25 times its text, so the byte bound alone let
a 48 MiB line grow this process by 1.3 GiB. A real inspect result (about 120 bytes per
container, 6 per item, 30 per quote mark) of 60,000 tensors stays inside them; the costliest
line they admit grows the client by about 0.5 GiB (measured in tests/test_jail_args.py;
docs/security.md), and nesting deeper than the interpreter's recursion limit (1,000) is
refused by the parser itself."""
MAX_OUTPUT_BYTES = 1 << 30
"""Everything a worker may write on the protocol descriptor in one job."""
RESULT_GRACE_S = 5.0
"""How long the worker may take to close its end after the result before it is killed."""


class SandboxError(CodedError):
    """The worker failed or refused; `code` is stable, `message` is one line for a person."""

    def __init__(self, code: str, message: str, globals_: Iterable[str] = (),
                 sandbox: dict | None = None, stderr: str = "") -> None:
        super().__init__(code, message)
        self.globals = list(globals_)
        self.sandbox = sandbox
        self.stderr = stderr

    def to_json(self) -> dict:
        """The `error` object of the inspect and convert contracts."""
        return {"code": self.code, "message": self.message, "globals": self.globals}


def worker_env() -> dict[str, str]:
    """The worker's whole environment: nothing inherited but the test suite's switches."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8",
           "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    if os.environ.get(SELFTEST_ENV) == "1":
        env[SELFTEST_ENV] = "1"
        if os.environ.get(DISABLE_ENV):
            env[DISABLE_ENV] = os.environ[DISABLE_ENV]
    return env


_required_jail = DEFAULT_REQUIRED_JAIL


def set_required_jail(required: str) -> None:
    """The weakest jail this process's later jobs accept: `full`, `partial` or `any`."""
    global _required_jail
    if required not in set(JailRequirement):
        raise ValueError(f"required jail must be one of {', '.join(JailRequirement)}")
    _required_jail = required


def required_jail() -> str:
    """The process-wide required jail level (`set_required_jail`)."""
    return _required_jail


def jail_accepted(level: str, required: str) -> bool:
    """Whether a worker at `level` may load for a caller requiring `required`."""
    if required == JailRequirement.ANY:
        return True
    return level in LEVELS and LEVELS.index(level) >= LEVELS.index(required)


def _refusal(sandbox: dict, required: str) -> SandboxError:
    level = sandbox.get("level")
    allow = JailRequirement.PARTIAL if level == JailLevel.PARTIAL else JailRequirement.ANY
    return SandboxError(
        "jail_refused",
        f"not loaded: the jail is only {sandbox.get('description') or level} and "
        f"{required} is required; --require-jail {allow} (in the app, the setting "
        f"sandbox/require_jail = {allow}) loads anyway", sandbox=sandbox)


class _Violation(Exception):
    """The worker broke the protocol; the message says how."""


_SIGNAL_ERRORS = {
    getattr(signal, "SIGXCPU", None): ("cpu_limit", "the worker used up its CPU-time limit"),
    getattr(signal, "SIGXFSZ", None): ("file_size_limit",
                                       "the worker exceeded its file-size limit"),
    getattr(signal, "SIGSYS", None): ("seccomp_violation",
                                      "the worker made a forbidden system call and was killed"),
    signal.SIGSEGV: ("worker_crashed", "the worker crashed (segmentation fault)"),
    signal.SIGABRT: ("worker_crashed", "the worker aborted"),
    signal.SIGKILL: ("worker_killed", "the worker was killed (out of memory?)"),
}


def run_job(
    request: dict,
    on_event: EventFn | None = None,
    cancel: CancelToken | None = None,
    timeout: float | None = None,
    pass_fds: Iterable[int] = (),
    gate: Callable[[], dict | Iterator[dict]] | None = None,
    require_jail: str | None = None,
) -> dict:
    """Run one operation in a fresh jailed worker; return its `result` plus `sandbox`, `timing`.

    The worker jails itself, reports its level (the handshake) and imports what the operation
    needs, then waits for a start line before it opens any input. `gate`, when given, runs
    meanwhile in a thread of its own, in the caller's context (the static scan): it returns
    extra request fields for the start line, or raises to stop the worker unstarted. A gate
    that yields parts instead streams them: the first goes in the start line, each later one
    follows as a line of its own while the worker works on those before (the dry run reads a
    folder's files while the rest are walked). The start line is sent only when the
    handshake's level meets `require_jail` (default: `required_jail()`).
    """
    required = require_jail or _required_jail
    # this job's share of the cores when several run at once (sandbox.host.parallel)
    request = {**request, "limits": {"torch_threads": job_threads(),
                                     **request.get("limits", {})}}
    started = time.monotonic()
    proc = _spawn(tuple(pass_fds))
    max_threads = int(request.get("limits", {}).get("max_threads") or default_max_threads())
    stop = _Watchdog(proc, cancel, timeout, max_threads)
    stderr_tail: deque[str] = deque(maxlen=40)
    drain = threading.Thread(target=_drain, args=(proc.stderr.fileno(), stderr_tail),
                             daemon=True)
    drain.start()
    sandbox: dict | None = None
    result: dict | None = None
    error: dict | None = None
    startup_s: float | None = None
    nonce = secrets.token_hex(16)
    feeder = _Feeder(proc, stop, gate, {"start": True, "nonce": nonce})
    try:
        _send(proc, request)
        feeder.start()
        for event in _events(proc.stdout.fileno()):
            kind = event["type"]
            if result is not None:
                raise _Violation(f"a {kind!r} line after the result")
            if kind == "jail":
                if sandbox is not None:
                    raise _Violation("a second jail line")
                sandbox = {k: v for k, v in event.items() if k != "type"}
                if not jail_accepted(str(sandbox.get("level")), required):
                    raise _refusal(sandbox, required)
                feeder.open()
            elif sandbox is None and kind != "error":
                raise _Violation(f"a {kind!r} line before the jail handshake")
            elif kind == "progress" and startup_s is None:
                startup_s = time.monotonic() - started
            elif kind == "result":
                if event.get("nonce") != nonce:
                    raise _Violation("a result without this job's nonce")
                result = {k: v for k, v in event.items() if k not in ("type", "nonce")}
                stop.expire_in(RESULT_GRACE_S)  # nothing may follow; EOF is expected
            elif kind == "error":
                error = event
                break
            if on_event is not None and kind != "result":
                on_event(event)
    except _Violation as exc:
        raise SandboxError("protocol_violation",
                           f"the worker broke the protocol and was killed: {exc}",
                           sandbox=sandbox, stderr="\n".join(stderr_tail)) from None
    finally:
        stop.finish()
        _kill_group(proc)
        feeder.join()
        drain.join(timeout=2)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
    if feeder.error is not None:  # the gate's own failure, not the worker's
        raise feeder.error
    tail = "\n".join(stderr_tail)
    if stop.reason == "cancel":
        raise Cancelled()
    if stop.reason == "timeout":
        raise SandboxError("timeout", f"the worker did not finish within {timeout:g} s",
                           sandbox=sandbox, stderr=tail)
    if stop.reason == "threads":
        raise SandboxError("thread_limit", f"the worker started more than {max_threads} "
                           "threads and was killed", sandbox=sandbox, stderr=tail)
    if error is not None:
        raise SandboxError(str(error.get("code") or "error"), str(error.get("message") or ""),
                           error.get("globals") or (), sandbox=sandbox, stderr=tail)
    if result is None:
        raise _crash_error(proc.returncode, sandbox, tail)
    result["sandbox"] = sandbox
    result["timing"] = {"startup_s": startup_s, "total_s": time.monotonic() - started,
                        "worker_peak_rss_kb": result.pop("peak_rss_kb", None),
                        "compute_threads": result.pop("compute_threads", None),
                        "worker": "forked" if isinstance(proc, ForkedWorker) else "cold"}
    return result


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
    with contextlib.suppress(ForkServerError):
        _start_server(keep_warm=True, replacing=True)


@contextlib.contextmanager
def fork_server(enabled: bool = True) -> Iterator[ForkServer | None]:
    """Within the block, this process's jobs fork from one warm server (None when disabled,
    or when it cannot start: jobs then start cold workers, as everywhere outside the block)."""
    if not enabled or _fork_server is not None:
        yield _fork_server
        return
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


def _spawn(pass_fds: tuple[int, ...]) -> subprocess.Popen | ForkedWorker:
    """A fresh worker: forked from the warm server when one is in use, else a cold start."""
    server = _fork_server
    if server is not None:
        try:
            return server.spawn(worker_env(), pass_fds)
        except ForkServerError:
            if server.dead():
                _replace_lost(server)
    return subprocess.Popen(
        [sys.executable, "-I", "-m", WORKER_MODULE],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=worker_env(), cwd="/", start_new_session=True, pass_fds=pass_fds,
    )


def _send(proc: subprocess.Popen, *messages: dict) -> bool:
    """Write request lines; False once the worker is gone, which shows up as a missing
    result, with its exit status."""
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
    except (OSError, ValueError):  # ValueError: stdin already closed by the job's end
        return False
    return True


class _Feeder:
    """Runs a job's gate in a thread of its own, in the caller's context (its readings and
    deferral settings), and sends what it returns: the start line once the handshake is
    accepted (`open`), then each later part the gate yields, then EOF. The gate always runs to
    its end, even when the worker is gone (its callers keep every file's scan); the timeout
    does not count it."""

    def __init__(self, proc: subprocess.Popen, stop: _Watchdog,
                 gate: Callable[[], dict | Iterator[dict]] | None, start: dict) -> None:
        self.error: BaseException | None = None
        self._proc = proc
        self._stop = stop
        self._gate = gate
        self._start = start
        self._opened = threading.Event()
        self._ended = threading.Event()
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run,), daemon=True,
                                        name="job-gate")

    def start(self) -> None:
        """Start the gate."""
        self._thread.start()

    def open(self) -> None:
        """The handshake is accepted: the start line may go."""
        self._opened.set()

    def join(self) -> None:
        """Wait for the gate's end (the job is over: nothing more is sent)."""
        self._ended.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:
            self.error = exc
            _signal_group(self._proc)  # run_job's thread reaps it
        finally:
            with contextlib.suppress(OSError, ValueError):
                self._proc.stdin.close()  # EOF: no more parts

    def _feed(self) -> None:
        with self._stop.paused():
            made = self._gate() if self._gate is not None else {}
        parts = iter([made]) if isinstance(made, dict) else made
        waiting = [{**(self._next(parts) or {}), **self._start}]
        alive = True
        while (part := self._next(parts)) is not None:
            waiting.append(part)
            if alive and self._opened.is_set():
                alive = _send(self._proc, *waiting)
                waiting = []
        while not (self._opened.is_set() or self._ended.is_set()):
            self._opened.wait(0.05)
        if alive and self._opened.is_set():
            _send(self._proc, *waiting)

    def _next(self, parts: Iterator[dict]) -> dict | None:
        """The gate's next part (its walk is not the worker's time: the timeout waits)."""
        with self._stop.paused():
            return next(parts, None)


def _events(fd: int) -> Iterator[dict]:
    """The worker's protocol lines as event dicts; raises _Violation on anything else."""
    for raw in _bounded_lines(fd, MAX_LINE_BYTES, MAX_OUTPUT_BYTES):
        for marks, bound in LINE_BUDGET.items():
            if sum(raw.count(bytes([m])) for m in marks) > bound:
                raise _Violation(f"a line with more than {bound:,} of {marks.decode()!r}")
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):  # the parser recurses once per nested bracket
            raise _Violation(f"an unparsable line ({raw[:80]!r})") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise _Violation("a line that is not an event object")
        yield event


def _bounded_lines(fd: int, max_line: int, max_total: int) -> Iterator[bytes]:
    """Newline-terminated lines read from `fd` in chunks, never holding more than a line."""
    buf = bytearray()
    total = 0
    scanned = 0  # bytes of buf already known to hold no newline
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > max_total:
            raise _Violation(f"more than {max_total >> 20} MiB of output")
        buf += chunk
        pos = 0
        while (newline := buf.find(b"\n", max(pos, scanned))) >= 0:
            if newline - pos > max_line:
                raise _Violation(f"a line longer than {max_line >> 20} MiB")
            yield bytes(buf[pos:newline])
            pos = newline + 1
        del buf[:pos]
        scanned = len(buf)
        if len(buf) > max_line:
            raise _Violation(f"a line longer than {max_line >> 20} MiB")


def _crash_error(returncode: int | None, sandbox: dict | None, tail: str) -> SandboxError:
    if returncode is not None and returncode < 0:
        code, message = _SIGNAL_ERRORS.get(
            -returncode, ("worker_crashed", f"the worker died from signal {-returncode}"))
    else:
        last = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), "no output")
        code = "worker_crashed"
        message = f"the worker exited ({returncode}) without a result: {last}"
    return SandboxError(code, message, sandbox=sandbox, stderr=tail)


_STDERR_LINE = 2000
"""Characters kept of one stderr line: the tail is for a person, and the worker is hostile."""


def _drain(fd: int, tail: deque[str]) -> None:
    partial = bytearray()
    while chunk := os.read(fd, 1 << 16):
        lines = (bytes(partial) + chunk).split(b"\n")
        partial[:] = lines.pop()[-_STDERR_LINE:]
        tail.extend(raw[:_STDERR_LINE].decode("utf-8", "replace").rstrip() for raw in lines)
    if partial:
        tail.append(partial.decode("utf-8", "replace").rstrip())


def _signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (a no-op once everything has exited)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group and reap the worker."""
    _signal_group(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _thread_count(pid: int) -> int:
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
    return count + sum(_thread_count(child) for child in children)


class _Watchdog:
    """Kills the worker's group on timeout, cancel, or more than `max_threads` threads."""

    def __init__(self, proc: subprocess.Popen, cancel: CancelToken | None,
                 timeout: float | None, max_threads: int | None = None) -> None:
        self.reason: str | None = None
        self._proc = proc
        self._cancel = cancel
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._paused_at: float | None = None
        self._grace: float | None = None
        self._max_threads = max_threads
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The timeout does not run meanwhile (cancel and the thread limit still do)."""
        self._paused_at = time.monotonic()
        try:
            yield
        finally:
            if self._deadline is not None:
                self._deadline += time.monotonic() - self._paused_at
            self._paused_at = None

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            if self._cancel is not None and self._cancel.cancelled:
                self.reason = "cancel"
            elif (self._deadline is not None and self._paused_at is None
                  and time.monotonic() > self._deadline):
                self.reason = "timeout"
            elif self._grace is not None and time.monotonic() > self._grace:
                self.reason = "grace"
            elif self._max_threads and _thread_count(self._proc.pid) > self._max_threads:
                self.reason = "threads"
            else:
                continue
            _kill_group(self._proc)
            return

    def expire_in(self, seconds: float) -> None:
        """Kill the group after `seconds` whatever happens (the job's answer is in)."""
        self._grace = time.monotonic() + seconds

    def finish(self) -> None:
        self._done.set()
        self._thread.join()


# --- inspect and convert ----------------------------------------------------------------


DRY_RUN_LIMITS = {"cpu_seconds": 120, "memory_mb": 2048}


class DryRunReader:
    """`scan.readings`' reader: the `dry-run` op (the real unpicklers, inert) in a jailed
    worker, forked from the fork server when one runs."""

    def __call__(self, request: dict) -> dict:
        """Run the readings of a complete request."""
        return run_job({**request, "limits": dict(DRY_RUN_LIMITS)}, timeout=300)

    def gated(self, request: dict, gate: Callable[[], Iterator[dict]]) -> dict:
        """Start the worker on `request` (what it may read), and run `gate` (the walk) while it
        starts; the parts of readings `gate` yields stream to it (`run_job`). `held_mb`: the
        held bytes the blob file may still receive, added to the memory allowance."""
        request = dict(request)
        memory = DRY_RUN_LIMITS["memory_mb"] + int(request.pop("held_mb", 0))
        return run_job({**request, "limits": {**DRY_RUN_LIMITS, "memory_mb": memory}},
                       timeout=300, gate=gate)


dry_run_reader = DryRunReader()


def static_scan(path: Path) -> dict:
    """The `scan` contract for one file, or for a DCP folder as a whole, with the loaders' own
    readings (the installed reader, else `dry_run_reader`); nothing of the file's
    runs in this process."""
    from inspector.scan import readings
    from inspector.scan.engine import scan_file

    with readings.using(readings.current_reader() or dry_run_reader):
        return scan_folder(path) if is_dcp_folder(path) else scan_file(path).to_json()


def _input(path: Path) -> tuple[int, list[str]]:
    """The input's size, and a DCP folder's files (empty for a file): the jail lets the worker
    read them and counts them in its memory allowance, as it counts one mapped file."""
    if is_dcp_folder(path):
        files = folder_files(path)
        return sum(p.stat().st_size for p in files), [str(p) for p in files]
    return path.stat().st_size, []


def check_loadable(scan: dict, allow_globals: Iterable[str], override_dangerous: bool) -> None:
    """Raise SandboxError when the scan says this file must not reach torch.load."""
    fmt = scan.get("format")
    severity = {f"{g['module']}.{g['name']}": g["severity"] for g in scan.get("globals") or []}
    if scan.get("verdict") == Verdict.DANGEROUS and not override_dangerous:
        bad = [name for name, sev in severity.items() if sev == Severity.DANGEROUS]
        name = Path(str(scan.get("path") or "the file")).name
        calls = [c for g in scan.get("globals") or [] if g["severity"] == Severity.DANGEROUS
                 for c in g.get("calls") or ()]
        # no flag is named here: each front end adds the override it really has, if any
        raise SandboxError("refused_dangerous",
                           f"not loaded: {name} is dangerous; get it again from its source. "
                           "The static scan found "
                           + (f"{', '.join(bad[:8])}" if bad else "dangerous code")
                           + (f", which would call {calls[0][:200]}" if calls else ""), bad)
    forbidden = [g for g in allow_globals if severity.get(g) == Severity.DANGEROUS]
    if forbidden:
        raise SandboxError("refused_global",
                           "refusing to allow dangerous globals: " + ", ".join(forbidden),
                           forbidden)
    # the registry's loadable formats (`FormatSpec.loadable`, `tensors`): TorchScript and
    # torch.export archives are never loaded, the worker reads their weights' records
    # statically (`tensors.torchscript`) and only shows their code
    if fmt not in loadable():
        what = scan.get("error") if fmt == "unknown" else None  # the reason, not "unknown"
        detail = f": {scan['error']}" if scan.get("error") and not what else ""
        raise SandboxError("unsupported_format",
                           f"cannot load this file: {what}" if what
                           else f"cannot load this file (format {fmt}){detail}")


def _limits(size: int, limits: dict | None) -> dict:
    """Defaults scaled to the checkpoint: two CPU minutes plus one per GB."""
    out = {"cpu_seconds": 120 + 60 * (size >> 30), "memory_mb": 4096, "open_files": 256}
    out.update(limits or {})
    return out


class _FileHash:
    """The file's SHA-256, computed on a second core while the worker runs."""

    def __init__(self, path: Path, cancel: CancelToken | None) -> None:
        self.digest: str | None = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, args=(path, cancel), daemon=True)
        self._thread.start()

    def _run(self, path: Path, cancel: CancelToken | None) -> None:
        try:
            self.digest = sha256_file(path, cancel=cancel)
        except (OSError, Cancelled) as exc:
            self.error = str(exc) or type(exc).__name__

    def result(self) -> str | None:
        self._thread.join()
        return self.digest


def inspect_file(
    path: str | os.PathLike[str],
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    cancel: CancelToken | None = None,
    timeout: float | None = None,
    limits: dict | None = None,
    scan: dict | None = None,
    jobs: int = 1,
) -> dict:
    """Scan, hash and load in the jail; the `inspect` contract (error set instead of raising).

    A folder (other than a DCP one) or a `*.index.json` is the sharded checkpoint it names
    (`sandbox.host.inspect_shards`, which passes each shard's `scan`, made before any load), its
    shards loaded `jobs` at a time.
    """
    if is_sharded_input(Path(path)):
        from inspector.sandbox.host.inspect_shards import inspect_path

        return inspect_path(path, allow_globals, override_dangerous, on_event, cancel, timeout,
                            limits, jobs)
    target = Path(path).resolve()
    allow = list(allow_globals)
    size, files = _input(target)
    report: dict = {"path": str(target), "size": size, "sha256": None, "format": None,
                    "scan": None, "sandbox": None, "digest_algorithm": DIGEST_ALGORITHM,
                    "tensors": [], "objects": [], "error": None, "allowed_globals": allow,
                    "health": None, "unique_storage": None, "architecture": None,
                    "resume": None}
    hasher = None if files else _FileHash(target, cancel)  # a folder has no one SHA-256

    def admit() -> dict:
        scanned = scan or static_scan(target)
        report.update(scan=scanned, format=scanned.get("format"))
        check_loadable(scanned, allow, override_dangerous)
        return {"format": scanned.get("format")}

    try:
        request = {"op": "inspect", "path": str(target), "paths": files, "allow_globals": allow,
                   "limits": _limits(size, limits)}
        # The scan runs while the worker starts; the worker opens nothing until it passes.
        result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout, gate=admit)
        report.update(sandbox=result["sandbox"], tensors=result["tensors"],
                      objects=result["objects"], timing=result["timing"],
                      digest_algorithm=result.get("digest_algorithm", DIGEST_ALGORITHM),
                      health=result.get("health"), unique_storage=result.get("unique_storage"))
        report.update({k: result[k] for k in ("code", "code_archive") if k in result})
        report.update(model_facts(report["tensors"], report["objects"]))
    except SandboxError as exc:
        report["error"] = exc.to_json()
        report["sandbox"] = exc.sandbox
    report["sha256"] = hasher.result() if hasher is not None else None
    if cancel is not None:
        cancel.check()
    return report


def sidecar_path(output: Path) -> Path:
    """Where the non-tensor data of a conversion goes: `<output stem>.sidecar.json`."""
    return output.with_name(output.stem + ".sidecar.json")


def convert_file(
    path: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    cancel: CancelToken | None = None,
    timeout: float | None = None,
    limits: dict | None = None,
    skip_unsupported: bool = False,
    key: str | None = None,
    strip_prefix: Iterable[str] = (),
) -> dict:
    """Convert to safetensors inside the jail, verified bit for bit; the conversion report.

    `key` converts only what lies under that dotted path of the loaded object, and
    `strip_prefix` removes those prefixes from the names (`sandbox.worker.convert.select_leaves`).

    Raises SandboxError (and leaves nothing behind) when the conversion cannot be done, or
    (code `unsupported_tensors`) would leave tensors out and skip_unsupported is not set.
    """
    source = Path(path).resolve()
    out = Path(output).resolve() if output else source.with_suffix(".safetensors")
    sidecar = sidecar_path(out)
    for target in (out, sidecar):
        if target.exists() and os.path.samefile(target, source):
            raise SandboxError("output_is_input", f"refusing to overwrite the input {source}")
        if target.exists() and not overwrite:
            raise SandboxError("output_exists",
                               f"{target} exists; refusing to overwrite it (--force replaces it)")
    allow = list(allow_globals)
    size, files = _input(source)
    scanned: dict = {}

    def admit() -> dict:
        scanned.update(static_scan(source))
        check_loadable(scanned, allow, override_dangerous)
        return {"format": scanned.get("format")}

    request = {"op": "convert", "path": str(source), "paths": files, "allow_globals": allow,
               "limits": _limits(size, limits), "skip_unsupported": skip_unsupported,
               "key": key, "strip_prefix": list(strip_prefix),
               # Views are cloned, so the output may exceed the input; this bounds it.
               "output_bytes": 4 * size + (64 << 20)}
    try:
        with atomic_write(out, overwrite=overwrite) as fh:
            request["output_fd"] = fh.fileno()
            result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout,
                             pass_fds=(fh.fileno(),), gate=admit)
            if not result.get("verified"):
                raise SandboxError("verify_failed", "the output does not match the input: "
                                   + ", ".join(result.get("mismatches", [])[:8]),
                                   sandbox=result.get("sandbox"))
        sidecar_doc = result.pop("sidecar_document", None)
        result["sidecar"] = None
        if sidecar_doc is not None:
            write_text_atomic(sidecar, json.dumps(sidecar_doc, indent=1, allow_nan=False) + "\n",
                              overwrite=overwrite)
            result["sidecar"] = str(sidecar)
    except OutputExistsError as exc:
        raise SandboxError("output_exists", str(exc)) from None
    except OSError as exc:
        raise SandboxError("output_unwritable",
                           f"cannot write {out.parent}: {exc.strerror or exc}") from None
    result.update(input=str(source), output=str(out), scan_verdict=scanned.get("verdict"))
    return result


# --- integrity: tensor digests and diffs (issue 4; ops in sources.py and diff.py) --------------


def _admit_for_integrity(path: Path, allow: list[str], override_dangerous: bool) -> str:
    """Scan one input and refuse a dangerous pickle as `inspect` would (safetensors has none)."""
    scan = static_scan(path)
    if scan.get("format") != "safetensors":
        check_loadable(scan, allow, override_dangerous)
    return str(scan.get("format"))


def tensor_digests(
    path: str | os.PathLike[str],
    *,
    cancel: CancelToken | None = None,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    timeout: float | None = None,
) -> list:
    """Every tensor of a checkpoint with its content digest (`TensorEntry`s), from the jail."""
    from inspector.integrity.manifest import TensorEntry

    target = Path(path).resolve()
    allow = list(allow_globals)
    _admit_for_integrity(target, allow, override_dangerous)
    request = {
        "op": "digests",
        "path": str(target),
        "allow_globals": allow,
        "limits": _limits(target.stat().st_size, None),
    }
    result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout)
    return [
        TensorEntry(
            key=r["key"],
            dtype=r["dtype"],
            shape=tuple(r["shape"]),
            digest=r["digest"],
            digest_algorithm=r["digest_algorithm"],
        )
        for r in result["tensors"]
    ]


def diff_files(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    cancel: CancelToken | None = None,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    timeout: float | None = None,
) -> dict:
    """Compare two checkpoints of any formats tensor by tensor; the `diff` contract. Either may
    be a folder or a `*.index.json`: its shards are compared key by key in the same worker."""
    try:
        sets = [resolve_shards(a), resolve_shards(b)]
    except ShardError as exc:
        raise SandboxError("bad_shards", str(exc)) from None
    except OSError as exc:
        raise SandboxError("unreadable", f"{exc.filename}: {exc.strerror or exc}") from None
    allow = list(allow_globals)
    files = [[p.resolve() for p in s.files] for s in sets]
    every = list(dict.fromkeys(p for side in files for p in side))
    for path in every:
        _admit_for_integrity(path, allow, override_dangerous)
    # the worker opens the links' targets; output names the files as the user reaches them
    sides = [{"path": str(s.path if s.index is not None else side[0]),
              "files": [str(p) for p in side], "names": [p.name for p in s.files]}
             for s, side in zip(sets, files, strict=True)]
    inputs = [_input(p) for p in every]  # a DCP folder's files are read too
    request = {
        "op": "diff",
        "paths": [str(p) for p in every] + [f for _size, fs in inputs for f in fs],
        "sides": sides,
        "allow_globals": allow,
        "limits": _limits(sum(size for size, _fs in inputs), None),
    }
    result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout)
    for letter, shard_set in zip("ab", sets, strict=True):
        index = shard_set.index
        result[letter]["index"] = str(index.path) if index is not None else None
        result[letter]["problems"] = _index_problems(index, result["tensors"], letter)
    return result


def _index_problems(index: ShardIndex | None, records: list[dict], letter: str) -> list[dict]:
    """How the keys a diff found in each shard of one side disagree with that side's index."""
    if index is None:
        return []
    found: dict[str, list[str]] = {shard: [] for shard in index.shards()}
    for record in records:
        shard = record.get(f"shard_{letter}")
        if shard is not None and record.get(f"stored_as_{letter}") is None:
            found.setdefault(shard, []).append(record["key"])
    return [p.to_json() for p in check_contents(index, found)]


# --- typed twin: the same job, its result as a checkpoint.results dataclass -------------------


def diff_result(a: str | os.PathLike[str], b: str | os.PathLike[str],
                **options: Any) -> DiffResult:
    """`diff_files` (same options), its diff contract typed."""
    return DiffResult.from_json(diff_files(a, b, **options))
