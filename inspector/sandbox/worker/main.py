"""The jailed worker: `python -I -m inspector.sandbox.worker.main`, the only process that unpickles.

Protocol. The client writes one JSON request line on stdin. The worker jails itself (see
`jail.py`) *before* it imports torch or opens any input and says so in its first line, the
handshake `{"type": "jail", ...}`: the client takes the jail level from this line only, and
refuses to go on when it is weaker than the caller requires. The worker then imports the
operation's module and waits for a second line, `{"start": true, "nonce": str, ...more request
fields}`, before it touches an input (so the client's static scan overlaps the worker's
start-up and still gates the load). A streamed request sends later parts, one JSON object a
line, until EOF; an operation that streams reads them as `request["_parts"]` (the dry run's
readings of files the client walks meanwhile), the others never read them.

It writes JSON lines on stdout:

    {"type": "jail", "level": ..., "description": ..., "active": [...], "missing": {...},
     "platform": ...}                                        exactly once, first
    {"type": "progress", "stage": str, "done": int, "total": int}
    {"type": "tensor", "key": ..., "dtype": ..., ...}       one per tensor, as soon as ready
    {"type": "tensors", "records": [...]}   `inspect`: several tensors' records at once
    {"type": "object", "key": ..., "python_type": ..., "repr": ...}   one per non-tensor leaf
    {"type": "result", ..., "peak_rss_kb": int, "nonce": str}  the return value (last line)
    {"type": "error", "code": str, "message": str, "globals": [...]}   instead of a result

After the result the worker closes the protocol descriptor. A second `jail` line, a `result`
without the start line's nonce, anything after the result, a line that is not a JSON object,
a line over the client's line bound or output over its total bound is a protocol violation:
the client kills the worker and the job fails (`protocol_violation`).

Request keys read here: `op` (a name in OPS), `path` and/or `paths` (inputs the jail lets the
worker read), `output_fd` (an inherited descriptor for the only output, conversions only),
`output_bytes` (its size limit), `limits` (fields of `sandbox.protocol.Limits`; one left out
takes its default). Every other key belongs to the operation.

Threads. `torch_threads` is the job's share of the cores (the client sends
`parallel.job_threads()`: all of them for one job, fewer when it runs several at once). The
worker sets torch's intra-op pool to it once the operation's module is imported, hands it to
the operation as `request["_threads"]` (the `inspect` op's pool of statistics threads) and
reports it as the result's `compute_threads`.

Forked workers. Within `sandbox.host.launch.fork_server()`, the worker is not a fresh
interpreter but a child the fork server (`forkserver.py`) forked for this job after importing
torch and every op's module; the child runs this same `main` on its own pipes, so the protocol
and the order (request, jail, handshake, start line, input) are the same; the server started no
thread pool, so the child's torch threads are only those its `torch_threads` asks for.

Operations. OPS maps an operation name to "module:function"; each area adds its own entry
and keeps its code in its own module. An operation is

    def op(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict

It runs inside the jail, streams events with `emit` (thread-safe), checks `cancel` (set when
the worker gets SIGTERM) in long loops, and returns a JSON-serialisable dict that becomes the
`result` event. It reports an expected failure by raising `LoadError(code, message, globals)`
(inspector.tensors.load) or any exception with `code` and `message` attributes. Never print to
stdout: stdout is redirected to stderr so stray output cannot corrupt the protocol.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from inspector.core.errors import CodedError
from inspector.core.progress import Cancelled, CancelToken
from inspector.sandbox.protocol import Limits, disabled_layers, selftest, selftest_payload
from inspector.sandbox.worker import fresh_root
from inspector.sandbox.worker.jail import JailConfig, apply_jail, die_with_parent, enter_namespaces
from inspector.tensors.mapped import open_maps

OPS: dict[str, str] = {
    "inspect": "inspector.sandbox.worker.inspect_op:inspect",
    "convert": "inspector.sandbox.worker.convert:convert",
    "digests": "inspector.tensors.sources:digests",
    "diff": "inspector.sandbox.worker.diff:diff",
    "consistency": "inspector.sandbox.worker.consistency.op:consistency_op",
    "dry-run": "inspector.sandbox.worker.dry_run:dry_run",
}

SELFTEST_OP = "inspector.sandbox.worker.selftest:run_payload"
"""The test-only operation `selftest-payload`, registered under `protocol.SELFTEST_ENV`."""


def jail_config(request: dict) -> JailConfig:
    """The jail for a request: its inputs readable, its output descriptor writable."""
    paths = [request["path"]] if request.get("path") else []
    paths += list(request.get("paths", ()))
    payload = selftest_payload(os.environ)
    paths += [payload] if payload else []
    inputs_bytes = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    return JailConfig(
        read_paths=paths,
        output_fd=request.get("output_fd"),
        limits=Limits.from_json(request.get("limits", {})),
        # mmapped inputs and outputs count towards the address space, on top of the budget.
        mapped_bytes=inputs_bytes + int(request.get("output_bytes", 0)),
        output_bytes=int(request.get("output_bytes", 0)),
        disabled=disabled_layers(os.environ),
        gpu=fresh_root.gpu_minor(str(request.get("device", "cpu"))),
    )


def one_gpu(request: dict, gpu: fresh_root.GpuPaths) -> None:
    """Point CUDA at the one GPU the jail lets in, by its UUID, so it is `cuda:0` whatever
    guards are active; a request for `cuda:N` then runs on `cuda:0` (the same GPU)."""
    uuid = gpu.uuid
    if uuid is None:  # no driver information: CUDA numbers what it can open
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = uuid  # read when CUDA starts, after this
    if str(request.get("device", "")).startswith("cuda"):
        request["device"] = "cuda:0"


class _Emitter:
    """Thread-safe JSON-lines writer on the protocol descriptor."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        line = json.dumps(event, allow_nan=False, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


def _resolve(op: str) -> Callable:
    # Read per job, not at import: a forked worker gets its job's environment after the fork
    # server imported this module.
    ops = {**OPS, "selftest-payload": SELFTEST_OP} if selftest(os.environ) else OPS
    if op not in ops:
        raise _Refused("unknown_op", f"unknown operation {op!r}; known: {', '.join(sorted(ops))}")
    module, func = ops[op].split(":")
    return getattr(importlib.import_module(module), func)


class _Refused(CodedError):
    """The request itself is refused (unknown op, malformed, never started)."""


def _peak_rss_kb() -> int | None:
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _set_threads(request: dict) -> int:
    """The job's compute threads (`torch_threads`, else every core), set as torch's pool."""
    threads = Limits.from_json(request.get("limits", {})).compute_threads()
    torch = sys.modules.get("torch")
    if torch is None:
        return threads
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def _later_parts(stream) -> Iterator[dict]:
    """The request's later parts, one JSON object a line until EOF: a streamed request (the
    dry run's readings, sent while the client still walks the files) reads them as it goes."""
    for line in stream:
        try:
            part = json.loads(line)
        except ValueError:
            part = None
        if not isinstance(part, dict):
            raise _Refused("bad_request", "a later part of the request is not a JSON object")
        yield part


def main(pid_namespace_made: bool = False) -> int:
    """Read the request, jail, run the operation, report.

    `pid_namespace_made`: the fork server forked this worker into a PID namespace of its
    own (`jail.pid_namespace_for_next_child`)."""
    # The client kills the worker's group when a job ends, but a client killed itself
    # (SIGKILL, or SIGTERM's default action) runs no `finally`. Set before the handshake: the
    # client sends the start line only after reading it, so a client that died first never
    # lets an input be opened. The jail's init holds the same signal for the worker, which
    # can clear its own.
    die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    emit = _Emitter(protocol)
    config: JailConfig | None = None
    try:
        request = json.loads(sys.stdin.readline() or "{}")
        if not isinstance(request, dict) or "op" not in request:
            raise _Refused("bad_request", "the request must be a JSON object with an 'op'")
        config = jail_config(request)
        # read before the jail: it lists /dev and runs ldconfig, which seccomp would kill
        gpu = fresh_root.host_gpu(config.gpu) if config.gpu is not None else None
        # the relay and init never come back from here
        entered = enter_namespaces(config, pid_namespace_made)
        maps_fd = open_maps()  # the worker's own, before Landlock closes /proc
        level = apply_jail(config, entered)
        if gpu is not None:
            one_gpu(request, gpu)
        emit({"type": "jail", **level})
        request["_maps_fd"] = maps_fd
        cancel = CancelToken()
        signal.signal(signal.SIGTERM, lambda *_: cancel.cancel())
        op = _resolve(request["op"])
        if selftest(os.environ):
            from inspector.sandbox.worker.selftest import run_prelude

            run_prelude()
        request["_threads"] = _set_threads(request)
        start = json.loads(sys.stdin.readline() or "{}")
        if not isinstance(start, dict) or start.pop("start", None) is not True:
            raise _Refused("not_started", "the client did not start the operation")
        nonce = start.pop("nonce", None)
        request.update(start)
        request["_parts"] = _later_parts(sys.stdin)
        result = op(request, emit, cancel)
        emit({"type": "result", **result, "peak_rss_kb": _peak_rss_kb(),
              "compute_threads": request["_threads"], "nonce": nonce})
        # EOF right after the result tells the client nothing else follows.
        protocol.close()
        return 0
    except Cancelled:
        emit({"type": "error", "code": "cancelled", "message": "cancelled"})
    except MemoryError:
        allowance = "" if config is None else (
            f" ({config.limits.allowance(config.mapped_bytes)})")
        emit({"type": "error", "code": "memory_limit",
              "message": f"the worker ran out of its memory allowance{allowance}"})
    except Exception as exc:  # every failure must reach the client as an event
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            emit({"type": "error", "code": code, "message": getattr(exc, "message", str(exc)),
                  "globals": list(getattr(exc, "globals", []))})
        else:
            import traceback  # only here: its imports are a few ms of every worker's start

            traceback.print_exc()
            emit({"type": "error", "code": "internal",
                  "message": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]})
    return 1


if __name__ == "__main__":
    status = main()
    sys.stderr.flush()
    # Everything is reported and flushed; skip tearing down torch's modules (a noticeable
    # part of a short job's wall time).
    os._exit(status)
