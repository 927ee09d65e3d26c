"""Build a `Report` from a session's evidence."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from inspector import __version__
from inspector.checkpoint.results import DiffResult, InspectResult
from inspector.core.json_record import as_result
from inspector.core.progress import CancelToken, ProgressFn
from inspector.core.termtext import counted
from inspector.core.verdict import worst
from inspector.core.vocabulary import (
    LoadStatus,
    ReportStatus,
    SignatureState,
    StepStatus,
    Verdict,
)
from inspector.integrity.verify import VerifyResult
from inspector.report.checklist import (
    checklist,
    file_problems,
    record_problems,
    telemetry_problems,
    unchecked_lines,
)
from inspector.report.model import (
    SCHEMA_VERSION,
    FileEvidence,
    FileReport,
    Report,
    SessionEvidence,
    ToolInfo,
)
from inspector.report.sections import (
    claims_info,
    code_info,
    code_problems,
    comparison_info,
    consistency_info,
    conversion_info,
    conversion_record,
    file_info,
    health_info,
    load_info,
    model_info,
    scan_info,
    shard_problems,
    shards_info,
    summarize_telemetry,
    summarize_tensors,
    verification_info,
)
from inspector.run.checkpoints import LedgerSummary
from inspector.scan.result import ScanResult

if TYPE_CHECKING:
    from inspector.signing.check import SignatureVerdict


def build_report(
    session: SessionEvidence,
    *,
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> Report:
    """Build the report; a file whose SHA-256 the session never computed is hashed now."""
    environment = session.environment
    # each file's inspect contract is read once, here at the report's entry; the backup check
    # of every file looks at the others' scans
    evidence = [(ev, as_result(InspectResult, ev.inspect)) for ev in session.files]
    files = [_file_report(ev, inspect, evidence, progress, cancel) for ev, inspect in evidence]
    telemetry = (summarize_telemetry(session.telemetry, session.telemetry_source)
                 if session.telemetry is not None else None)
    # the signature leads: a folder whose signature does not hold is told before any file
    problems = [signature_problem(v) for v in session.signatures
                if v.state != SignatureState.INTACT]
    problems += session.problems
    problems += [f"{f.file.name}: {p}" for f in files for p in f.problems]
    if telemetry is not None:
        problems += telemetry_problems(telemetry)
    for run in session.runs:
        problems += run_problems(run)
    verdict = worst(f.verdict for f in files)
    unchecked = [f"{f.file.name}: {line}" for f in files for line in unchecked_lines(f)]
    return Report(
        schema_version=SCHEMA_VERSION,
        tool=ToolInfo(
            name="ckpt-inspector",
            version=__version__,
            generated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            command=session.command,
        ),
        verdict=verdict,
        status=ReportStatus.PASSED if not problems else ReportStatus.FAILED,
        problems=problems,
        environment=environment.to_json() if environment is not None else {},
        files=files,
        telemetry=telemetry,
        runs=[run.to_json() for run in session.runs],
        signatures=[v.to_json() for v in session.signatures],
        unchecked=unchecked,
    )


def signature_problem(verdict: SignatureVerdict) -> str:
    """A signature that is not intact, in one line: which state, and why."""
    why = verdict.reason or f"signed by {verdict.signer}, but a signed file changed"
    return f"signature {verdict.signature}: {verdict.state}: {why}"


def run_problems(run: LedgerSummary) -> list[str]:
    """A run folder's problems: checkpoints changed or missing, a broken chain, guard alarms."""
    where = Path(run.journal).parent.name or run.journal
    out = [f"run {where}: {counted(n, 'ledgered checkpoint')} {what}"
           for n, what in ((run.changed, "changed since saved"), (run.missing, "missing")) if n]
    out += [f"run {where}: ledger {p}" for p in run.problems]
    if run.saves and run.latest_valid is None:
        out.append(f"run {where}: no ledgered checkpoint is still valid")
    out += [f"run {where}: guard alarm at {a.label()}" for a in run.alarms]
    return out


def _file_report(
    ev: FileEvidence,
    inspect: InspectResult | None,
    session_files: list[tuple[FileEvidence, InspectResult | None]],
    progress: ProgressFn | None,
    cancel: CancelToken | None,
) -> FileReport:
    scanned = as_result(ScanResult, ev.scan) or (inspect.scan if inspect is not None else None)
    scan = scan_info(scanned)
    load = load_info(inspect)
    loaded = inspect if load.status == LoadStatus.LOADED else None
    tensors = summarize_tensors(loaded) if loaded is not None else None
    health = health_info(loaded) if loaded is not None else None
    claims = claims_info(loaded) if loaded is not None else None
    verification = verification_info(as_result(VerifyResult, ev.verify), ev.manifest)
    conversion = conversion_info(conversion_record(ev.conversion))
    consistency = consistency_info(ev.consistency)
    comparison = comparison_info(as_result(DiffResult, ev.diff))
    model = model_info(loaded) if loaded is not None else None
    code = code_info(inspect)
    info = file_info(ev, inspect, scanned, progress, cancel)
    shards = shards_info(inspect)
    verdict = scan.verdict or (Verdict.ERROR if scan.status == StepStatus.FAILED else Verdict.SAFE)
    report = FileReport(
        file=info,
        verdict=verdict,
        problems=[],
        checklist=[],
        scan=scan,
        load=load,
        tensors=tensors,
        health=health,
        verification=verification,
        conversion=conversion,
        consistency=consistency,
        comparison=comparison,
        model=model,
        code=code,
        shards=shards,
        claims=claims,
    )
    report.problems = file_problems(report) + shard_problems(shards) + code_problems(code)
    report.checklist = checklist(ev, inspect, session_files, report)
    report.problems += record_problems(report)
    return report
