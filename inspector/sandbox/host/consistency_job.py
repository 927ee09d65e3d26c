"""Client side of the consistency check: build the worker request and run it in the jail.

Plain Python without torch, shared by the CLI and the GUI's Consistency pane. The checkpoint is
scanned first and refused exactly as `inspect` refuses it; the work itself happens in the
worker operation `consistency` (inspector.sandbox.worker.consistency.op.consistency_op).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspector.core.progress import CancelToken
from inspector.sandbox.host.admission import check_loadable, static_scan
from inspector.sandbox.host.claims.consistency import check_consistency, resolved_device
from inspector.sandbox.host.claims.consistency_events import LiveEvents
from inspector.sandbox.host.claims.errors import Facts, checked_error
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.jobs import SandboxError, run_job
from inspector.sandbox.protocol import Limits


def _nvidia_device() -> bool:
    """Whether an NVIDIA device node exists (Linux), without importing torch or NVML."""
    return os.path.exists("/dev/nvidiactl")


@dataclass
class ConsistencyRequest:
    """What the user asked for; `to_request` turns it into the worker's JSON request."""

    path: str
    device: str = "auto"
    repeats: int = 10
    seed: int = 0
    inject: dict[str, int | str] | None = None
    model: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    input_shape: list[int] = field(default_factory=list)
    input_dtype: str = "float32"
    reload: bool = True
    python_path: list[str] = field(default_factory=list)
    allow_globals: list[str] = field(default_factory=list)

    def refusal(self) -> str | None:
        """Why the runs cannot honour this request (None when they can): a fault is flipped
        before one of runs 1 to `repeats`, into an element and a bit that exist, or never
        (and a reply saying it was would be a self-test that tested nothing)."""
        if self.repeats < 2:
            return "repeats must be at least 2"
        fault = self.inject
        if fault is None:
            return None
        iteration = fault.get("iteration", 2)
        if not (isinstance(iteration, int) and 1 <= iteration <= self.repeats):
            return (f"the fault is asked before run {iteration}, but the runs are 1 to "
                    f"{self.repeats}")
        if any(not isinstance(fault.get(n), int) or fault[n] < 0 for n in ("index", "bit")):
            return "the fault's element and bit must be numbers from 0"
        return None

    def to_request(self) -> dict[str, Any]:
        """The worker request (op `consistency`), with jail read paths and limits; `auto`
        names the GPU this host has (`claims.consistency.resolved_device`)."""
        path = Path(self.path).resolve()
        gigabytes = path.stat().st_size / 1e9
        python_path = [str(Path(p).resolve()) for p in self.python_path]
        limits = Limits(cpu_seconds=int(300 + 30 * gigabytes * self.repeats))
        device = resolved_device(self.device)
        if device.startswith("cuda") or (device == "auto" and _nvidia_device()):
            limits = limits.on_gpu()
        request: dict[str, Any] = {
            "op": "consistency",
            "path": str(path),
            # the user's code folders only for the user's model: a probe reads the file alone
            "paths": python_path if self.model else [],
            "device": device,
            "repeats": self.repeats,
            "seed": self.seed,
            "inject": self.inject,
            "allow_globals": list(self.allow_globals),
            "limits": limits.to_json(),
        }
        if self.model:
            request.update(model=self.model, model_kwargs=self.model_kwargs,
                           input_shape=list(self.input_shape), input_dtype=self.input_dtype,
                           reload=self.reload, python_path=python_path)
        return request


def describe_bits(e: dict[str, Any]) -> str:
    """`bit 22 (mantissa)` for a few bits, else how many bits differ and of which kinds."""
    if len(e["bits"]) <= 3:
        return ", ".join(f"bit {b} ({k})" for b, k in zip(e["bits"], e["kinds"], strict=False))
    return f"{len(e['bits'])} bits differ ({', '.join(sorted(set(e['kinds'])))})"


def _number(value: Any) -> str:
    return f"{value:.7g}" if isinstance(value, float) else str(value)


def describe_element(name: str, e: dict[str, Any]) -> str:
    """One line for a changed element of a consistency result: where, values, bits."""
    where = ",".join(map(str, e["position"]))
    return (f"{name}[{where}] (element {e['index']}): {_number(e['expected'])} -> "
            f"{_number(e['actual'])}, {describe_bits(e)}")


def run_consistency(
    spec: ConsistencyRequest,
    on_event: Callable[[dict], None] | None = None,
    cancel: CancelToken | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Scan, then run the check in a jailed worker and check its reply against the file's
    bytes and the request (`claims.consistency.check_consistency`), and its live events
    against both (`claims.consistency_events`: `on_event` is given only the events that pass,
    each run's marked `checked: False` until the end); raises SandboxError with a one-line
    message; a request the runs cannot honour is refused before any work."""
    refusal = spec.refusal()
    if refusal is not None:
        raise SandboxError("bad_request", refusal)
    target = Path(spec.path).resolve()
    if not target.is_file():
        raise SandboxError("not_found", f"{spec.path}: no such file")
    scan = static_scan(target)
    check_loadable(scan, spec.allow_globals, override_dangerous=False)
    # what the file's bytes say, measured while the worker loads and repeats
    expected = Expected(target, counts=True, start=not spec.model)
    request = spec.to_request()
    events = LiveEvents(request, on_event)  # a view is given only the events that pass
    try:
        result = run_job(dict(request), on_event=events, cancel=cancel, timeout=timeout)
    except SandboxError as exc:
        expected.stop()
        raise checked_error(exc, Facts([scan], tuple(spec.allow_globals))) from None  # as inspect's
    except BaseException:
        expected.stop()
        raise
    check_consistency(expected, result, request)  # the reply is a claim until it passes
    # the runs as the events told them, once they agree with the checked reply (never the
    # reply's own `iterations`)
    result["iterations"] = [run.to_json() for run in events.finish(result)]
    result["path"] = os.fspath(target)
    result["scan_verdict"] = scan.verdict
    return result
