"""One job in a fresh jailed worker: the request, the handshake, the events and the result.

`run_job` starts a worker (`launch`: cold, or forked from the warm fork server), sends the
request, streams the worker's events to `on_event`, and kills the whole process group on
timeout, cancel or crash, so nothing is left running. Failures raise `SandboxError` with a
stable `code` and a one-line `message`; a cancel raises `Cancelled`. This module never imports
torch and never unpickles.

The worker is treated as hostile once it has read the input: the jail level is the one its
handshake gave before the start line was sent (`jail_refused` when weaker than required),
and its output is read in bounded chunks (`events`), so a worker that floods, repeats the
handshake or adds lines after its result is killed (`protocol_violation`) without growing
this process.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from inspector.core.errors import CodedError
from inspector.core.progress import Cancelled, CancelToken
from inspector.core.termtext import escape
from inspector.core.vocabulary import DEFAULT_REQUIRED_JAIL, JailLevel, JailRequirement
from inspector.sandbox.host import deadlines
from inspector.sandbox.host.events import ProtocolViolation, read_events
from inspector.sandbox.host.exits import WorkerExit, describe
from inspector.sandbox.host.launch import launch
from inspector.sandbox.host.parallel import job_threads
from inspector.sandbox.host.process import Watchdog, drain_stderr, kill_group, signal_group
from inspector.sandbox.protocol import LEVELS, Limits, hides_secrets

EventFn = Callable[[dict], None]

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


def jail_accepted(level: str, required: str, active: Iterable[str] | None = None) -> bool:
    """Whether a worker at `level` with the `active` guards of its handshake may load for a
    caller requiring `required`: unless `any` is required, its guards must also keep the
    user's files and the client's environment out of its reach (`protocol.hides_secrets`)."""
    if required == JailRequirement.ANY:
        return True
    if level not in LEVELS or LEVELS.index(level) < LEVELS.index(required):
        return False
    return active is None or hides_secrets(active)


def _refusal(sandbox: dict, required: str) -> SandboxError:
    level = sandbox.get("level")
    if level in LEVELS and LEVELS.index(level) >= LEVELS.index(required):
        missing = sandbox.get("missing") or {}
        why = "; ".join(f"{name}: {missing[name]}" for name in ("landlock", "root", "proc")
                        if isinstance(missing, dict) and name in missing)
        return SandboxError(
            "jail_refused",
            f"not loaded: the jail is {level} without Landlock or a mount namespace of its own "
            f"({why or 'not reported'}), so the worker could read your home folder and this "
            "process's environment; --require-jail any (in the app, the setting "
            "sandbox/require_jail = any) loads anyway", sandbox=sandbox)
    allow = JailRequirement.PARTIAL if level == JailLevel.PARTIAL else JailRequirement.ANY
    return SandboxError(
        "jail_refused",
        f"not loaded: the jail is only {sandbox.get('description') or level} and "
        f"{required} is required; --require-jail {allow} (in the app, the setting "
        f"sandbox/require_jail = {allow}) loads anyway", sandbox=sandbox)


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

    Every job ends: `timeout` (None: the default, scaled to the inputs) bounds its wall-clock
    time and the idle limit its quiet stretches (`deadlines`).
    """
    required = require_jail or _required_jail
    # this job's share of the cores when several run at once (sandbox.host.parallel)
    request = {**request, "limits": {"torch_threads": job_threads(),
                                     **request.get("limits", {})}}
    max_threads = Limits.from_json(request["limits"]).thread_cap()
    limits = deadlines.for_job(request, timeout)
    started = time.monotonic()
    proc = launch(tuple(pass_fds))
    stop = Watchdog(proc, cancel, limits.wall, max_threads, limits.idle)
    stderr_tail: deque[str] = deque(maxlen=40)
    drain = threading.Thread(target=drain_stderr, args=(proc.stderr.fileno(), stderr_tail),
                             daemon=True)
    drain.start()
    sandbox: dict | None = None
    result: dict | None = None
    error: dict | None = None
    startup_s: float | None = None
    nonce = os.urandom(16).hex()  # secrets.token_hex's bytes, without its imports
    feeder = _Feeder(proc, stop, gate, {"start": True, "nonce": nonce})
    try:
        _send(proc, request)
        feeder.start()
        for event in read_events(proc.stdout.fileno()):
            stop.touch()
            kind = event["type"]
            if result is not None:
                raise ProtocolViolation(f"a {kind!r} line after the result")
            if kind == "jail":
                if sandbox is not None:
                    raise ProtocolViolation("a second jail line")
                sandbox = {k: v for k, v in event.items() if k != "type"}
                if not jail_accepted(str(sandbox.get("level")), required,
                                     _names(sandbox.get("active"))):
                    raise _refusal(sandbox, required)
                feeder.open()
            elif sandbox is None and kind != "error":
                raise ProtocolViolation(f"a {kind!r} line before the jail handshake")
            elif kind == "progress" and startup_s is None:
                startup_s = time.monotonic() - started
            elif kind == "result":
                if event.get("nonce") != nonce:
                    raise ProtocolViolation("a result without this job's nonce")
                result = {k: v for k, v in event.items() if k not in ("type", "nonce")}
                stop.expire_in(RESULT_GRACE_S)  # nothing may follow; EOF is expected
            elif kind == "error":
                error = event
                break
            if on_event is not None and kind != "result":
                on_event(event)
    except ProtocolViolation as exc:
        raise SandboxError("protocol_violation",
                           f"the worker broke the protocol and was killed: {exc}",
                           sandbox=sandbox, stderr="\n".join(stderr_tail)) from None
    finally:
        stop.finish()
        kill_group(proc)
        feeder.join()
        drain.join(timeout=2)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
    if feeder.error is not None:  # the gate's own failure, not the worker's
        raise feeder.error
    tail = "\n".join(stderr_tail)
    if stop.reason in STOPPED:
        raise _stopped(stop.reason, limits, max_threads, sandbox, tail)
    if error is not None:
        raise worker_error(error, sandbox, tail, request.get("op"))
    if result is None:
        raise _died(proc, request, sandbox, tail)
    result["sandbox"] = sandbox
    result["timing"] = {"startup_s": startup_s, "total_s": time.monotonic() - started,
                        "worker_peak_rss_kb": result.pop("peak_rss_kb", None),
                        "compute_threads": result.pop("compute_threads", None),
                        "worker": "cold" if isinstance(proc, subprocess.Popen) else "forked"}
    return result


REFUTED = "claim_refuted"
"""The code of a worker's answer that this process found false (`claims.refusal.refuted`)."""

_WORKERS = frozenset({
    # the worker's own (`sandbox.worker.main`): the request, a cancel, its memory, a bug
    "bad_request", "unknown_op", "not_started", "cancelled", "memory_limit", "internal",
    # the loaders' (`tensors.load`, `tensors.sources`, `tensors.dcp`, `tensors.gguf_load`,
    # `tensors.torchscript`): a DCP folder's transforms are unsupported_tensors, a converted
    # file's part named like a rebuild spec a key_collision
    "load_failed", "weights_only_refused", "bad_allowed_global", "bad_safetensors",
    "unsupported_tensors", "key_collision", "not_covered",
})
WORKER_CODES: dict[str, frozenset[str]] = {
    "inspect": _WORKERS, "digests": _WORKERS, "dry-run": _WORKERS,
    # `sandbox.worker.convert`: the --key selection, the output descriptor
    "convert": _WORKERS | {"key_not_found", "not_tensor_mapping", "output_unwritable"},
    "diff": _WORKERS | {"key_in_two_shards"},  # `sandbox.worker.diff`
    "consistency": _WORKERS | {"no_cuda", "bad_factory"},  # `sandbox.worker.consistency`
}
"""The codes a worker may end each operation with. The others are this process's own word: its
admission's refusals (`admission.check_loadable`: `refused_dangerous`, `refused_global`,
`unsupported_format`), its own checks of the output and the shards (`output_exists`,
`verify_failed`, `already_safetensors`, `bad_index`, `coverage`, `no_checkpoint`), the jail's
and the protocol's, its limits', its claims checks'; a worker that sends one of them, or one
its operation never raises, is answering falsely. Where the host can confirm a listed code
from its own facts, it does (`claims.errors`)."""


def worker_error(error: dict, sandbox: dict | None, tail: str, op: object) -> SandboxError:
    """A worker's `error` event as this process's error: its own code where a worker may end
    the operation `op` with it, else the answer is refuted (a worker naming a policy refusal
    would turn a file it failed to load into one deliberately not loaded, which a report
    passes; one naming an existing output would choose convert's exit status)."""
    code, message = str(error.get("code") or "error"), str(error.get("message") or "")
    if code not in WORKER_CODES.get(str(op), _WORKERS):
        return SandboxError(REFUTED, f"the jailed worker ended with the code "
                            f"'{escape(code[:80])}', which is not one a worker may send for "
                            f"{escape(str(op)[:40])}, so "
                            f"none of its answer is trusted: {message}", sandbox=sandbox,
                            stderr=tail)
    return SandboxError(code, message, error.get("globals") or (), sandbox=sandbox,
                        stderr=tail)


STOPPED = ("cancel", "timeout", "idle", "threads")
"""The watchdog's reasons that end a job whatever it sent (after a result, "grace" does not)."""


def _stopped(reason: str, limits: deadlines.Deadlines, max_threads: int, sandbox: dict | None,
             tail: str) -> BaseException:
    """The error of a job its watchdog stopped: cancelled, or which limit ended it."""
    if reason == "cancel":
        return Cancelled()
    if reason == "timeout":
        return SandboxError("timeout", limits.timeout_message(), sandbox=sandbox, stderr=tail)
    if reason == "idle":
        return SandboxError("idle_timeout", limits.idle_message(), sandbox=sandbox, stderr=tail)
    return SandboxError("thread_limit", f"the worker started more than {max_threads} threads "
                        "and was killed", sandbox=sandbox, stderr=tail)


def _died(proc, request: dict, sandbox: dict | None, tail: str) -> SandboxError:
    """The error of a worker that ended without a result, said from its exit (`exits`)."""
    end = WorkerExit(proc.returncode, getattr(proc, "cpu_s", None), getattr(proc, "lost", False))
    code, message = describe(end, Limits.from_json(request["limits"]).cpu_seconds,
                             next((ln for ln in reversed(tail.splitlines()) if ln.strip()),
                                  "no output"))
    return SandboxError(code, message, sandbox=sandbox, stderr=tail)


def _names(active: object) -> list[str]:
    """The handshake's `active` guards as text (a list of anything else names none)."""
    return [str(a) for a in active] if isinstance(active, list) else []


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

    def __init__(self, proc: subprocess.Popen, stop: Watchdog,
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
            signal_group(self._proc)  # run_job's thread reaps it
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
