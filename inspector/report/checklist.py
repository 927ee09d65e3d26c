"""The prevention checklist and the one-line problems a report headlines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from inspector import formats
from inspector.checkpoint.results import InspectResult
from inspector.core.json_record import as_result
from inspector.core.termtext import counted
from inspector.core.vocabulary import (
    FileStatus,
    Format,
    HealthSeverity,
    HealthStatus,
    LoadStatus,
    Severity,
    StepStatus,
    Verdict,
)
from inspector.integrity.shard_index import ShardError, read_index
from inspector.report.model import (
    FAIL,
    NOT_CHECKED,
    PASS,
    CheckItem,
    CodeInfo,
    ConsistencyInfo,
    ConversionInfo,
    FileEvidence,
    FileInfo,
    FileReport,
    HealthInfo,
    LoadInfo,
    ScanInfo,
    TelemetrySummary,
    VerificationInfo,
)
from inspector.report.sections import flagged_code, self_test_words
from inspector.scan.advice import INTEGRITY_CODES, describe
from inspector.scan.dcp_folder import FORMAT as DCP
from inspector.scan.pickles.policy import KNOWN_DATA
from inspector.scan.result import Finding, ScanResult

SAFE_FORMATS = tuple(s.format for s in formats.all_specs()
                     if not s.holds_code and (s.loadable or s.tensors is not None))
"""Tensor formats whose loader runs no code the file carries (`FormatSpec.holds_code`)."""
DATA_ONLY_FORMATS = (Format.NPY, Format.NPZ)
"""Formats that hold no code unless they embed a pickle (then the scan lists globals)."""


def checklist(
    ev: FileEvidence,
    inspect: InspectResult | None,
    session_files: list[tuple[FileEvidence, InspectResult | None]],
    f: FileReport,
) -> list[CheckItem]:
    """The five prevention practices and the weights' health, each pass / fail / not checked,
    from the file's sections (`session_files`: every file's evidence with its typed inspect
    result)."""
    return [
        _check_safe_format(f.file, f.scan, f.conversion, f.code),
        _check_hash_on_record(ev.path, f.verification, _several_files(inspect)),
        _check_weights_only(f.file, f.scan, f.load),
        _check_backup(ev, session_files),
        _check_deterministic(f.consistency),
        _check_weights_health(f.health),
    ]


def _several_files(inspect: InspectResult | None) -> bool:
    """A sharded checkpoint or a torch.distributed.checkpoint folder: files, no one SHA-256."""
    return inspect is not None and (bool(inspect.index) or inspect.format == DCP)


def _check_weights_health(health: HealthInfo | None) -> CheckItem:
    """Pass or fail on the weights' values; where those values are only the jailed loader's
    word (`health.unchecked`), a problem it reports still fails, said to be its word, and
    anything else is not checked here: a loader the input took over can describe repaired
    weights."""
    title = "Weights are healthy (no NaN or Inf, no flipped-exponent outliers)"
    if health is None:
        return CheckItem("weights_health", title, NOT_CHECKED, "the weights were not loaded")
    by_severity = _findings_by_severity(health)
    whose = f"{health.unchecked}; " if health.unchecked else ""
    if health.status == HealthStatus.PROBLEM:
        return CheckItem("weights_health", title, FAIL,
                         whose + "; ".join(by_severity[HealthSeverity.PROBLEM][:5]))
    detail = f"{health.weights_checked} weight tensors judged"
    if by_severity[HealthSeverity.WARNING]:
        detail += "; warnings: " + "; ".join(by_severity[HealthSeverity.WARNING][:5])
    if health.unchecked:
        return CheckItem("weights_health", title, NOT_CHECKED,
                         f"{whose}the loader's values gave {health.status}: {detail}")
    return CheckItem("weights_health", title, PASS, detail)


def unchecked_lines(f: FileReport) -> list[str]:
    """What of one file's verdicts rests on the jailed loader's word alone, one line each."""
    if f.health is None or not f.health.unchecked:
        return []
    return [f"weights health ({f.health.status}) {f.health.unchecked}"]


def _findings_by_severity(health: HealthInfo) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {s: [] for s in HealthSeverity}
    for f in health.findings:
        out.setdefault(str(f.get("severity")), []).append(f"{f.get('key')}: {f.get('message')}")
    return out


def _check_safe_format(
    info: FileInfo, scan: ScanInfo, conversion: ConversionInfo | None, code: CodeInfo | None
) -> CheckItem:
    title = "Stored in a format that cannot run code"
    fmt = (info.format or "").lower()
    if scan.status == StepStatus.NOT_RUN and not fmt:
        return CheckItem("safe_format", title, NOT_CHECKED, "the file was not scanned")
    if _holds_no_pickle(info, scan):
        return CheckItem("safe_format", title, PASS, f"{info.format} holds only tensor data")
    flagged = flagged_code(code)
    if flagged:  # fails even beside a conversion: the file itself still carries that code
        return CheckItem("safe_format", title, FAIL,
                         f"its {code.kind} code, which torch.jit.load runs, is flagged: "
                         f"{flagged}")
    if conversion is not None and conversion.status == PASS:
        return CheckItem("safe_format", title, PASS,
                         f"verified safetensors conversion written: {conversion.output}")
    if code is not None:
        return CheckItem("safe_format", title, FAIL,
                         f"a {code.kind} archive carries code that torch.jit.load runs "
                         f"({len(code.files)} files, none flagged); convert it to safetensors")
    return CheckItem("safe_format", title, FAIL,
                     f"{info.format or 'this format'} is pickle-based; convert it to safetensors")


def _check_hash_on_record(path: str, verification: VerificationInfo | None,
                          sharded: bool = False) -> CheckItem:
    title = "SHA-256 on record matches"
    if verification is None:
        return CheckItem("hash_on_record", title, NOT_CHECKED, "no manifest was given")
    if sharded:  # a folder has no SHA-256: the report verified each of its files
        bad = [r for r in verification.files if r.get("status") != FileStatus.OK]
        if verification.files and not bad:
            return CheckItem("hash_on_record", title, PASS,
                             f"every shard matches {verification.manifest}")
        return CheckItem("hash_on_record", title, FAIL,
                         f"{len(bad)} of {counted(len(verification.files), 'shard file')} not ok "
                         f"against {verification.manifest}")
    row = _manifest_row(path, verification)
    if row is None or row.get("status") == FileStatus.EXTRA:
        return CheckItem("hash_on_record", title, FAIL,
                         f"{Path(path).name} is not listed in {verification.manifest}")
    if row.get("status") == FileStatus.OK:
        return CheckItem("hash_on_record", title, PASS, f"matches {verification.manifest}")
    return CheckItem("hash_on_record", title, FAIL,
                     f"{row.get('status')} against {verification.manifest}")


def record_problems(f: FileReport) -> list[str]:
    """The checklist's own hash item failing where the verification passed (the checkpoint's
    file or a shard of it is one the manifest does not list, which `sha256sum -c` tolerates):
    a problem, as a failed verification is, so no report passes on it. A file the report
    holds only a verification of (a batch verify's extra, a README: never scanned nor loaded
    as a checkpoint) is judged by that verification alone, as `verify` judged it."""
    verification = f.verification
    examined = f.scan.status != StepStatus.NOT_RUN or f.load.status != LoadStatus.NOT_RUN
    if verification is None or verification.status == FAIL or not examined:
        return []  # none given, `file_problems` already names it, or no checkpoint of ours
    return [f"SHA-256 on record: {item.detail}" for item in f.checklist
            if item.id == "hash_on_record" and item.status == FAIL]


def _manifest_row(path: str, verification: VerificationInfo) -> dict | None:
    """This file's verify row: by path under the manifest, by unique name, or the only row."""
    rows = verification.files
    target = Path(path).resolve()
    base = Path(verification.manifest).resolve().parent if verification.manifest else Path.cwd()
    for row in rows:
        if row.get("path") and (base / row["path"]).resolve() == target:
            return row
    same_name = [r for r in rows if Path(str(r.get("path", ""))).name == target.name]
    if len(same_name) == 1:
        return same_name[0]
    return rows[0] if len(rows) == 1 else None


def _check_weights_only(info: FileInfo, scan: ScanInfo, load: LoadInfo) -> CheckItem:
    title = "Loads with torch.load(weights_only=True)"
    if scan.status == StepStatus.NOT_RUN:
        return CheckItem("weights_only", title, NOT_CHECKED, "the file was not scanned")
    if _holds_no_pickle(info, scan):
        return CheckItem("weights_only", title, PASS,
                         f"{info.format} holds no pickle: nothing for weights_only to refuse")
    if info.format == DCP:
        return _dcp_weights_only(title, scan, load)
    if not scan.weights_only_ok:
        refused = scan.weights_only_blockers or [
            f"{g.get('module')}.{g.get('name')}" for g in scan.globals
            if g.get("severity") != Severity.SAFE]
        names = ", ".join(refused[:5]) or "its pickle opcodes"
        return CheckItem("weights_only", title, FAIL, f"weights_only=True refuses it: {names}")
    if load.status == LoadStatus.FAILED:
        return CheckItem("weights_only", title, FAIL, f"the jailed load failed: {load.error}")
    detail = ("loaded in the jail" if load.status == LoadStatus.LOADED
              else "accepted by the static scan")
    return CheckItem("weights_only", title, PASS, detail)


def _dcp_weights_only(title: str, scan: ScanInfo, load: LoadInfo) -> CheckItem:
    """What the worker did with a torch.distributed.checkpoint folder: torch.load refuses its
    `.metadata`'s classes, so the worker reads it with the weights_only unpickler allowed
    DCP's plain data classes (`policy.KNOWN_DATA`) and every stored item with
    weights_only=True."""
    if load.status == LoadStatus.FAILED:
        return CheckItem("weights_only", title, FAIL, f"the jailed load failed: {load.error}")
    if load.status == LoadStatus.LOADED:
        return CheckItem("weights_only", title, PASS,
                         "a torch.distributed.checkpoint folder, loaded in the jail: .metadata "
                         "by the weights_only unpickler under the DCP allow-list"
                         f"{_first(_names(scan, lambda g, name: name in KNOWN_DATA), ' ({})')}"
                         ", every item with weights_only=True")
    refused = _names(scan, lambda g, name: g.get("severity") != Severity.SAFE)
    if refused:
        return CheckItem("weights_only", title, FAIL,
                         f"the DCP allow-list refuses its .metadata: {_first(refused, '{}')}")
    return CheckItem("weights_only", title, NOT_CHECKED,
                     "a torch.distributed.checkpoint folder is read only in the jail (its "
                     ".metadata under the DCP allow-list), and it was not loaded"
                     + (f": {load.error}" if load.error else ""))


def _names(scan: ScanInfo, keep: Callable[[dict, str], bool]) -> list[str]:
    """The scan's globals as sorted dotted names, those `keep(global, name)` accepts."""
    return sorted({name for g in scan.globals
                   if keep(g, name := f"{g.get('module')}.{g.get('name')}")})


def _first(names: list[str], template: str) -> str:
    """The first five names in `template` ('' when there are none)."""
    if not names:
        return ""
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return template.format(", ".join(names[:5]) + more)


def _holds_no_pickle(info: FileInfo, scan: ScanInfo) -> bool:
    fmt = (info.format or "").lower()
    return (any(s in fmt for s in SAFE_FORMATS + DATA_ONLY_FORMATS) and not scan.globals
            and scan.status == StepStatus.DONE)


def _check_backup(ev: FileEvidence,
                  session_files: list[tuple[FileEvidence, InspectResult | None]]) -> CheckItem:
    title = "Another checkpoint kept beside it"
    if not ev.folder:
        return CheckItem("backup", title, NOT_CHECKED, "a single file was given, not a folder")
    own_set = _shard_set(Path(ev.path))
    others = [
        other for other, inspect in session_files
        if other.folder == ev.folder
        and Path(other.path).resolve() not in own_set
        and _is_checkpoint(other, inspect)
    ]
    if others:
        return CheckItem("backup", title, PASS, f"also in the folder: {Path(others[0].path).name}")
    return CheckItem("backup", title, FAIL,
                     "no other checkpoint in the folder; a failed save would leave nothing to "
                     "fall back to")


def _shard_set(path: Path) -> set[Path]:
    """The file itself plus its sibling shards named by a `*.index.json` weight_map."""
    members = {path.resolve()}
    for index in path.parent.glob("*.index.json"):
        try:
            weight_map = read_index(index).weight_map
        except ShardError:
            continue
        shards = {(path.parent / name).resolve() for name in set(weight_map.values())}
        if path.resolve() in shards:
            members |= shards
    return members


def _is_checkpoint(ev: FileEvidence, inspect: InspectResult | None) -> bool:
    scan = as_result(ScanResult, ev.scan) or (inspect.scan if inspect is not None else None)
    return scan is not None and scan.format != "unknown" and scan.verdict != Verdict.ERROR


def _check_deterministic(consistency: ConsistencyInfo | None) -> CheckItem:
    title = "Repeat-inference run gave identical results"
    if consistency is None:
        return CheckItem("deterministic", title, NOT_CHECKED, "no consistency run in this session")
    where = f" on {consistency.device}" if consistency.device else ""
    # the repeats' outputs exist only in the jailed worker: a pass is its word
    word = ", as reported by the jailed worker " + (
        "(the weights it was given checked here)" if consistency.weights_checked
        else "(nothing of its answer checked here)")
    if consistency.self_test and not consistency.error:
        fault = self_test_words(consistency.self_test)
        if consistency.status == PASS:
            return CheckItem("deterministic", "Fault-injection self-test (not a check of the "
                             "file)", PASS, f"detected: {fault}{where}{word}")
        return CheckItem("deterministic", "Fault-injection self-test (not a check of the file)",
                         FAIL, f"NOT detected: {fault}{where}; the detector did not work")
    if consistency.status == PASS:
        return CheckItem("deterministic", title, PASS, f"identical every repeat{where}{word}")
    if consistency.error:
        return CheckItem("deterministic", title, FAIL,
                         f"the run failed{where}: {consistency.error}")
    return CheckItem("deterministic", title, FAIL,
                     f"{len(consistency.failures) or 'some'} results differed{where}")


def file_problems(f: FileReport) -> list[str]:
    """One line per problem found in one file's sections."""
    verdict, scan, load, health = f.verdict, f.scan, f.load, f.health
    verification, conversion = f.verification, f.conversion
    consistency, comparison = f.consistency, f.comparison
    problems = []
    damage = [f for f in map(Finding.from_json, scan.findings) if f.code in INTEGRITY_CODES]
    problems.extend(f"damaged: {describe(f)}" for f in damage)
    if verdict in (Verdict.SUSPICIOUS, Verdict.DANGEROUS):
        names = [f"{g.get('module')}.{g.get('name')}" for g in scan.globals
                 if g.get("severity") == verdict]
        if names or not damage:
            problems.append(f"{verdict}" + (f": imports {', '.join(names[:5])}" if names
                                            else ""))
    if scan.status == StepStatus.FAILED:
        problems.append(f"scan failed: {scan.error}")
    if load.status == LoadStatus.FAILED:
        problems.append(f"jailed load failed: {load.error}")
    if health is not None and health.status == HealthStatus.PROBLEM:
        keys = sorted({str(f.get("key")) for f in health.findings
                       if f.get("severity") == HealthSeverity.PROBLEM})
        problems.append(f"weights health problem in {len(keys)} tensor"
                        f"{'' if len(keys) == 1 else 's'}: {', '.join(keys[:5])}"
                        + (" ..." if len(keys) > 5 else ""))
    if verification is not None and verification.status == FAIL:
        bad = {k: v for k, v in verification.counts.items() if k != FileStatus.OK}
        detail = ", ".join(f"{v} {k}" for k, v in sorted(bad.items()))
        problems.append(f"manifest verification failed ({detail or 'error'})")
    if conversion is not None and conversion.status == FAIL:
        problems.append("safetensors conversion was not verified")
    if comparison is not None and comparison.status == FAIL:
        flips = comparison.single_bit_flips
        problems.append(
            f"differs from {comparison.other or 'the other copy'} in "
            f"{counted(len(comparison.tensors), 'tensor')}"
            + (f", {counted(flips, 'single-bit flip')}" if flips else ""))
    if consistency is not None and consistency.error:
        problems.append(f"consistency run failed: {consistency.error}")
    elif consistency is not None and consistency.status == FAIL and consistency.self_test:
        problems.append("the consistency self-test did not detect its injected fault")
    elif consistency is not None and consistency.status == FAIL:
        problems.append("consistency run found differing results")
    return problems


def telemetry_problems(telemetry: TelemetrySummary) -> list[str]:
    """One line per GPU health problem seen during the session."""
    problems = []
    for gpu in telemetry.gpus:
        label = f"GPU {gpu.index} ({gpu.name})"
        if gpu.ecc_uncorrected_delta:
            problems.append(f"{label}: uncorrected ECC errors rose by {gpu.ecc_uncorrected_delta}")
        if gpu.retired_pages_delta:
            problems.append(f"{label}: {gpu.retired_pages_delta} memory pages retired")
        if gpu.remapped_rows_delta:
            problems.append(f"{label}: {gpu.remapped_rows_delta} rows remapped (uncorrectable)")
        if gpu.xids:
            problems.append(f"{label}: XID events {sorted(set(gpu.xids))}")
        if gpu.recovery_action not in (None, "none"):
            problems.append(f"{label}: the driver asks to {gpu.recovery_action}")
    return problems
