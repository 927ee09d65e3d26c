"""What a file must pass before a worker may load it: the static scan, then the refusals.

The scan (`scan.engine`) runs in this process, with the loaders' own readings of the file's
pickles done by the real unpicklers, inert, in a jailed `dry-run` worker (`dry_run_reader`):
nothing of the file's runs here. `check_loadable` then refuses a dangerous file, a dangerous
global the caller asked to allow, and a format the worker does not load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from inspector.core.vocabulary import Severity, Verdict
from inspector.sandbox.host.exits import KILLED_CODES
from inspector.sandbox.host.jobs import SandboxError, run_job
from inspector.sandbox.protocol import Limits
from inspector.scan import readings
from inspector.scan.result import ScanResult

DRY_RUN_LIMITS = Limits(cpu_seconds=120, memory_mb=2048)


class DryRunReader:
    """`scan.readings`' reader: the `dry-run` op (the real unpicklers, inert) in one jailed
    worker for all the files of a request, forked from the fork server when one runs. A
    worker killed by a limit or a signal (`exits.KILLED_CODES`) loses no other file's
    readings: the file it was reading (the item its progress stopped at, and that item's
    `group`) is read once more on its own, and a new worker reads the rest (`_read_on`); a
    second death of that file is its `unread` reason, saying what ended both workers."""

    def __call__(self, request: dict) -> dict:
        """Run the readings of a complete request."""
        job = {**request, "limits": DRY_RUN_LIMITS.to_json()}
        progress = _Progress()
        try:
            return run_job(job, on_event=progress)
        except SandboxError as exc:
            if exc.code not in KILLED_CODES:
                raise
            return _read_on(job, exc, progress.done)

    def gated(self, request: dict, gate: Callable[[], Iterator[dict]]) -> dict:
        """Start the worker on `request` (what it may read), and run `gate` (the walk) while it
        starts; the parts of readings `gate` yields stream to it (`run_job`). `held_mb`: the
        held bytes the blob file may still receive, added to the memory allowance."""
        request = dict(request)
        memory = DRY_RUN_LIMITS.memory_mb + int(request.pop("held_mb", 0))
        limits = replace(DRY_RUN_LIMITS, memory_mb=memory)
        sent: list[dict] = []

        def recorded() -> Iterator[dict]:
            made = gate()
            for part in [made] if isinstance(made, dict) else made:
                sent.append(part)
                yield part

        job = {**request, "limits": limits.to_json()}
        progress = _Progress()
        try:
            return run_job(job, gate=recorded, on_event=progress)
        except SandboxError as exc:
            if exc.code not in KILLED_CODES:
                raise
            # every part went (the gate runs to its end): the rest read as one request
            items = [item for part in sent for item in part.get("readings", [])]
            return _read_on({**job, "readings": items}, exc, progress.done)


class _Progress:
    """The readings a job's worker finished (its last `dry-run` progress event)."""

    def __init__(self) -> None:
        self.done = 0

    def __call__(self, event: dict) -> None:
        if event.get("type") == "progress" and isinstance(event.get("done"), int):
            self.done = event["done"]


def _read_on(job: dict, killed: SandboxError, done: int) -> dict:
    """The answer of a job whose worker was `killed` after `done` readings: the file it was
    reading once more on its own (a second death is that file's `unread` reason), then the
    other files' readings in a new worker, each later death handled the same way. A worker
    that died after its last reading has its whole job run once more."""
    items = job["readings"]
    pending = list(range(len(items)))
    readings: list[dict] = []
    unread: dict[int, str] = {}
    while pending:
        if done >= len(pending):  # no reading was under way: nothing to tell a file by
            readings += _subset(job, pending, first=killed)
            break
        group = items[pending[done]].get("group")
        alone = [n for n in pending if items[n].get("group") == group]
        try:
            readings += _subset(job, alone, first=killed)
        except SandboxError as exc:
            unread[group] = exc.message
        pending = [n for n in pending if n not in alone]
        progress = _Progress()
        try:
            readings += _subset(job, pending, progress) if pending else []
            break
        except SandboxError as exc:
            if exc.code not in KILLED_CODES:
                raise
            killed, done = exc, progress.done
    return {"readings": readings, "unread": unread}


def _subset(job: dict, chosen: list[int], progress: _Progress | None = None,
            first: SandboxError | None = None) -> list[dict]:
    """The readings of the job's items `chosen`, by a new worker, numbered as in the job;
    `progress` follows it. `first`: the death this run repeats, named in its own death's
    message."""
    try:
        answer = run_job({**job, "readings": [job["readings"][n] for n in chosen]},
                         on_event=progress)
    except SandboxError as exc:
        if first is None:
            raise
        raise SandboxError(exc.code, f"{exc.message}; retried once, the first worker too "
                           f"ended so ({first.code})", exc.globals, exc.sandbox,
                           exc.stderr) from None
    return [{**r, "index": chosen[int(r["index"])]} for r in answer.get("readings", [])]


dry_run_reader = DryRunReader()


def static_scan(path: Path) -> ScanResult:
    """The `scan` contract for one file, or for a DCP folder as a whole, with the loaders' own
    readings (the installed reader, else `dry_run_reader`); nothing of the file's
    runs in this process."""
    from inspector.scan.dcp_folder import is_dcp_folder, scan_folder
    from inspector.scan.engine import scan_file

    with readings.using(readings.current_reader() or dry_run_reader):
        return scan_folder(path) if is_dcp_folder(path) else scan_file(path)


def check_loadable(scan: ScanResult, allow_globals: Iterable[str],
                   override_dangerous: bool) -> None:
    """Raise SandboxError when the scan says this file must not reach torch.load."""
    fmt = scan.format
    severity = {f"{g.module}.{g.name}": g.severity for g in scan.globals}
    if scan.verdict == Verdict.DANGEROUS and not override_dangerous:
        bad = [name for name, sev in severity.items() if sev == Severity.DANGEROUS]
        name = Path(scan.path or "the file").name
        calls = [c for g in scan.globals if g.severity == Severity.DANGEROUS for c in g.calls]
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
    from inspector.formats import loadable

    if fmt not in loadable():
        what = scan.error if fmt == "unknown" else None  # the reason, not "unknown"
        detail = f": {scan.error}" if scan.error and not what else ""
        raise SandboxError("unsupported_format",
                           f"cannot load this file: {what}" if what
                           else f"cannot load this file (format {fmt}){detail}")
