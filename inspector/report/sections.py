"""Each report section, summarised from the engine's JSON contract for it."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.checkpoint.contents import UNIQUE_WORD, summarize, tally_dtypes, training_summary
from inspector.checkpoint.health import assess
from inspector.checkpoint.results import (
    ConsistencyResult,
    ConversionResult,
    DiffResult,
    FolderConversion,
    InspectResult,
    TensorStats,
)
from inspector.checkpoint.resume import headline, item_label, status_word
from inspector.core.json_record import as_result, records
from inspector.core.progress import CancelToken, ProgressFn
from inspector.core.vocabulary import FileStatus, LoadStatus, StepStatus, TensorCheckStatus, Verdict
from inspector.fleet.urls import is_url
from inspector.gpu.events import timeline
from inspector.gpu.telemetry import recovery_words
from inspector.integrity.hashing import sha256_file
from inspector.integrity.shard_index import has_one_sha256
from inspector.integrity.verify import VerifyResult
from inspector.report.model import (
    FAIL,
    PASS,
    AbsRow,
    ClaimsInfo,
    CodeInfo,
    ComparisonInfo,
    ConsistencyInfo,
    ConversionInfo,
    FileEvidence,
    FileInfo,
    GpuTelemetry,
    HealthInfo,
    LoadInfo,
    ModelInfo,
    NonFiniteRow,
    ScanInfo,
    ShardsInfo,
    TelemetryEvent,
    TelemetrySummary,
    TensorSummary,
    VerificationInfo,
)
from inspector.scan.result import ScanResult

if TYPE_CHECKING:
    from inspector.gpu.telemetry import TelemetryStore

LARGEST_ABS_ROWS = 10
SERIES_POINTS = 240
"""Chart series are thinned to this many points; a printed chart cannot show more."""

REFUSALS = ("refused_dangerous", "refused_global", "unsupported_format")
"""Sandbox error codes for a file deliberately not loaded (policy, not a failure)."""

FAILURE_KEYS = ("key", "status", "runs_mismatched", "repeat_mismatches", "max_abs_diff",
                "reference_ok", "roundtrip_ok", "first_mismatch")
"""What a failing consistency row keeps in the report."""
CONSISTENCY_BULK = ("tensors", "outputs", "resident_mismatches", "iterations", "sandbox",
                    "timing", "path", "device_label", "device", "repeats", "consistent", "error",
                    "injected")
"""Keys of a consistency result that are summarised elsewhere, not repeated in details."""


def file_info(
    ev: FileEvidence, inspect: InspectResult | None, scan: ScanResult | None,
    progress: ProgressFn | None, cancel: CancelToken | None
) -> FileInfo:
    """The file's identity; hashes it when the session has no SHA-256 for it."""
    path = Path(ev.path)
    # a sharded checkpoint's or a DCP folder's size is its files' sum; each shard's SHA-256 is
    # in the Shards section
    sharded = bool(inspect and inspect.index) or not has_one_sha256(path)
    recorded = inspect.size if inspect is not None else None
    try:
        st = path.stat()
        size, mtime = st.st_size, _iso(st.st_mtime)
    except OSError:
        size, mtime = recorded, None
    if sharded:
        size = recorded
    sha = inspect.sha256 if inspect is not None else None
    if not sha and path.is_file() and not sharded:
        sha = sha256_file(path, progress=progress, cancel=cancel)
    return FileInfo(
        path=ev.path if is_url(ev.path) else os.fspath(path.absolute()),
        name=path.name,
        size=size,
        mtime=mtime,
        format=(inspect.format if inspect is not None else None) or (scan.format if scan else None),
        sha256=sha,
    )


def shards_info(inspect: InspectResult | None) -> ShardsInfo | None:
    """The shards of a sharded checkpoint's inspect result; None for anything else."""
    if inspect is None or not inspect.index:
        return None
    return ShardsInfo(index=inspect.index, files=[s.to_json() for s in inspect.shards or []],
                      problems=list(inspect.problems or []))


def shard_problems(shards: ShardsInfo | None) -> list[str]:
    """The fatal coverage problems as report problems (a wrong `total_size` is only shown,
    as `inspect` only warns of it)."""
    if shards is None:
        return []
    return [f"shard coverage: {p.get('code')}: {p.get('message')}" for p in shards.problems
            if p.get("fatal", True)]


def scan_info(scan: ScanResult | None) -> ScanInfo:
    """The scan as a section ("not_run" without one)."""
    if scan is None:
        return ScanInfo(status=StepStatus.NOT_RUN)
    return ScanInfo(
        status=StepStatus.FAILED if scan.verdict == Verdict.ERROR else StepStatus.DONE,
        verdict=scan.verdict,
        weights_only_ok=scan.weights_only_ok,
        globals=records(scan.globals),
        findings=records(scan.findings),
        error=scan.error,
        weights_only_blockers=[str(b) for b in scan.weights_only_blockers],
    )


def load_info(inspect: InspectResult | None) -> LoadInfo:
    """The inspect contract's load outcome: loaded, refused by policy, or failed."""
    if inspect is None:
        return LoadInfo(status=LoadStatus.NOT_RUN)
    sandbox = inspect.sandbox.to_json() if inspect.sandbox is not None else {}
    error = inspect.error
    if error is None:
        return LoadInfo(status=LoadStatus.LOADED, sandbox_level=sandbox.get("level"),
                        sandbox=sandbox)
    return LoadInfo(status=LoadStatus.REFUSED if error.code in REFUSALS else LoadStatus.FAILED,
                    sandbox_level=sandbox.get("level"), sandbox=sandbox,
                    error=error.message or json.dumps(error.to_json(), sort_keys=True))


def summarize_tensors(inspect: InspectResult) -> TensorSummary:
    """Counts, parameters, bytes by dtype, non-finite tensors and the largest magnitudes."""
    rows = inspect.tensors
    dtypes = tally_dtypes((str(t.dtype), t.numel or 0, t.nbytes or 0) for t in rows)
    magnitudes = [AbsRow(t.key, t.dtype, m) for t in rows if (m := _abs_max(t)) is not None]
    magnitudes.sort(key=lambda r: r.abs_max, reverse=True)
    unique = inspect.unique_storage or {}
    return TensorSummary(
        count=len(rows),
        parameters=sum(d.elements for d in dtypes),
        bytes=sum(d.bytes for d in dtypes),
        objects=len(inspect.objects),
        digest_algorithm=inspect.digest_algorithm,
        dtypes=dtypes,
        nonfinite=[NonFiniteRow(t.key, t.nan, t.inf) for t in rows if t.nan or t.inf],
        largest_abs=magnitudes[:LARGEST_ABS_ROWS],
        unique_parameters=unique.get("numel"),
        unique_bytes=unique.get("nbytes"),
        unique_unchecked=UNIQUE_WORD if unique.get("numel") is not None else None,
    )


LOADER_WORD = "as reported by the jailed loader: not checked here, "
"""How a verdict that rests on the jailed loader's word alone begins; the reason follows (the
words `verify` uses for such a tensor digest)."""


def loaders_word(inspect: InspectResult) -> str | None:
    """The one mark of every section read from the worker's records (weights health, the
    model and training state): why they are only the jailed loader's word (`LOADER_WORD` and
    the reason), or None where its answer was checked here."""
    claims = inspect.claims
    return None if claims is not None and claims.checked else LOADER_WORD + (
        claims.reason if claims is not None and claims.reason else "no check was made")


def health_info(inspect: InspectResult) -> HealthInfo:
    """Weights health as the engine judged it (judged here for results saved before it did);
    `unchecked` says why when the values it was judged from are only the jailed loader's."""
    health = inspect.health or assess(inspect.tensors)
    return HealthInfo(status=health.status, findings=records(health.findings),
                      weights_checked=health.weights_checked, state_tensors=health.state_tensors,
                      unchecked=loaders_word(inspect))


def claims_info(inspect: InspectResult) -> ClaimsInfo:
    """What of the jailed load was checked here, as `inspect` says it (`checked_words`)."""
    claims = inspect.claims
    return ClaimsInfo(checked=bool(claims and claims.checked),
                      tensors=claims.tensors if claims is not None else 0,
                      reason=None if claims is not None and claims.checked else (
                          claims.reason if claims is not None and claims.reason
                          else "no check was made"),
                      words=inspect.checked_words)


def _abs_max(tensor: TensorStats) -> float | None:
    """The largest finite magnitude a tensor row reports, None when it reports none."""
    candidates = [_number(v) for v in (tensor.absmax, tensor.min, tensor.max)]
    finite = [abs(v) for v in candidates if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def verification_info(verify: VerifyResult | None, manifest: str | None
                      ) -> VerificationInfo | None:
    """The verify contract as a section; only non-ok tensors are kept."""
    if verify is None:
        return None
    rows = [*verify.files, *verify.tensors]
    counts: dict[str, int] = {}  # first seen first
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    # as `sha256sum -c`: a file the manifest does not list fails only a --strict check
    tolerated = {FileStatus.OK} if verify.strict else {FileStatus.OK, FileStatus.EXTRA}
    errors = [str(e) for e in verify.errors]
    return VerificationInfo(
        status=FAIL if errors or any(r.status not in tolerated for r in rows) else PASS,
        manifest=manifest or verify.extra.get("manifest"),
        counts=counts,
        files=records(verify.files),
        tensors=records(t for t in verify.tensors if t.status != TensorCheckStatus.OK),
        errors=errors,
    )


MAX_FLIPS_SHOWN = 20
"""Flipped elements listed per tensor in a report; the counts stay exact."""


def model_info(inspect: InspectResult) -> ModelInfo:
    """The inspect result's architecture guess and training state, in the Overview's words,
    marked as the jailed loader's word where its answer was not checked here."""
    training = training_summary(summarize(inspect.tensors, inspect.objects))
    checklist = inspect.resume
    return ModelInfo(
        architecture=inspect.architecture.summary() if inspect.architecture else None,
        training=training or None,
        resume=headline(checklist) if checklist else None,
        resume_items=[{"item": item_label(i), "status": status_word(i), "detail": i.detail}
                      for i in checklist.items] if checklist else [],
        unchecked=loaders_word(inspect),
    )


def code_info(inspect: InspectResult | None) -> CodeInfo | None:
    """A code-carrying archive's code files (names, sizes, flags); None for other files."""
    if inspect is None or inspect.code is None:
        return None
    archive = inspect.code_archive or {}
    files = [{k: c.get(k) for k in ("name", "size", "truncated")} | {"flags": list(
        c.get("flags") or [])} for c in inspect.code]
    return CodeInfo(kind=str(archive.get("kind") or inspect.format),
                    constants=int(archive.get("constants") or 0),
                    flags=sum(len(f["flags"]) for f in files), files=files)


def flagged_code(code: CodeInfo | None) -> str:
    """A code archive's flags as 'FILE: FLAG; ...' (the first five; '' when none): what in
    its code reaches beyond tensor maths, which torch.jit.load would run."""
    flags = [f"{f['name']}: {flag}" for f in (code.files if code else []) for flag in f["flags"]]
    return "; ".join(flags[:5]) + (" ..." if len(flags) > 5 else "")


def code_problems(code: CodeInfo | None) -> list[str]:
    """A code archive whose code is flagged, as one report problem."""
    text = flagged_code(code)
    return [f"{code.kind} code flagged ({code.flags}): {text}"] if text else []


def comparison_info(diff: DiffResult | None) -> ComparisonInfo | None:
    """The diff contract as a section: the tensors that differ and their first flips."""
    if diff is None:
        return None
    changed = diff.differing
    return ComparisonInfo(
        status=FAIL if changed or not diff.identical else PASS,
        other=diff.b.path if diff.b is not None else None,
        counts=dict(diff.counts),
        tensors=[{**t.to_json(), "bitflips": [f.to_json() for f in t.bitflips[:MAX_FLIPS_SHOWN]]}
                 for t in changed],
        single_bit_flips=sum(t.single_bit_flips for t in changed),
        checked=diff.checked_words,
    )


def conversion_record(value: dict | ConversionResult | FolderConversion | None
                      ) -> ConversionResult | FolderConversion | None:
    """A conversion's evidence typed: a `convert --json` contract with `shards` is a folder's."""
    if isinstance(value, dict):
        return (FolderConversion if "shards" in value else ConversionResult).from_json(value)
    return value


def conversion_info(conversion: ConversionResult | FolderConversion | None
                    ) -> ConversionInfo | None:
    """The conversion report as a section."""
    if conversion is None:
        return None
    if isinstance(conversion, FolderConversion):
        return _folder_conversion_info(conversion)
    # a report that carries an error (as `convert --json` prints a failure) did not convert
    failed = conversion.extra.get("error") or not conversion.verified
    details = conversion.to_json()
    return ConversionInfo(
        status=FAIL if failed else PASS,
        output=details.pop("output", None),
        sha256=details.pop("sha256", None),
        details=details,
    )


def _folder_conversion_info(conversion: FolderConversion) -> ConversionInfo:
    """A sharded folder converted shard by shard: passes when every shard was written and
    verified; the details name the index written and each shard, with its own verification."""
    shards = conversion.shards
    failed = not shards or any(s.extra.get("error") or not s.verified for s in shards)
    outputs = conversion.outputs
    index = conversion.index if conversion.index != conversion.input else None
    return ConversionInfo(
        status=FAIL if failed else PASS,
        output=conversion.output_index or (str(Path(outputs[0]).parent) if outputs else None),
        sha256=None,
        details={
            "input": conversion.input,
            **({"index": index} if index else {}),
            "tensors_written": conversion.tensors_written,
            "bytes_written": conversion.bytes_written,
            "notes": [str(p.get("message", "")) for p in conversion.problems],
            "shards": [{"output": Path(str(s.output)).name if s.output else None,
                        "input": Path(str(s.input)).name if s.input else None,
                        "tensors_written": s.tensors_written, "sha256": s.sha256,
                        "verified": s.verified,
                        "checked_here": s.unchecked_reason is None} for s in shards],
        },
    )


def consistency_info(result: dict | ConsistencyResult | None) -> ConsistencyInfo | None:
    """A consistency result as a section: status, failures and the per-run series."""
    result = as_result(ConsistencyResult, result)
    if result is None:
        return None
    failures = [{k: row[k] for k in FAILURE_KEYS if k in row}
                for row in result.tensors + result.outputs if row.get("status") == FAIL]
    failures += [{"key": r.get("key"), "status": "device copy differs",
                  "changed_elements": r.get("changed_elements")}
                 for r in result.resident_mismatches]
    series = [v for v in (_number(i.get("max_abs_diff")) for i in result.iterations)
              if v is not None]
    self_test = result.injected
    error = result.error
    bad = result.nonfinite_weights
    if bad and not error and not self_test:  # no reference can judge a device on NaN weights
        error = (f"not judged: the weights hold NaN/Inf in {', '.join(bad[:5])}, so the device "
                 "cannot be judged on them")
    finished = not error
    # a self-test passes when the detector saw the bit it was given
    passed = finished and bool(result.consistent) != bool(self_test)
    return ConsistencyInfo(
        status=PASS if passed else FAIL,
        device=result.device_label or result.device,
        repeats=result.repeats,
        failures=failures,
        series=_thin(series),
        details={k: v for k, v in result.to_json().items() if k not in CONSISTENCY_BULK},
        error=error,
        self_test=self_test,
        weights_checked=result.claims is not None and result.claims.checked,
    )


def self_test_words(fault: dict) -> str:
    """The injected fault in words: which bit of which weight, before which iteration."""
    return (f"bit {fault.get('bit')} of {fault.get('key')}[{fault.get('index')}] flipped on "
            f"purpose before iteration {fault.get('iteration')}")


def summarize_telemetry(store: TelemetryStore, source: str) -> TelemetrySummary:
    """Per GPU: temperature range, ECC / retired-page / remapped-row deltas and XIDs."""
    xids: dict[int, list[int]] = {}
    for event in list(store.xids):
        xids.setdefault(event.gpu, []).append(event.xid)
    gpus, starts, ends = [], [], []
    for index in store.gpus():
        times, temps = store.series(index, "temperature_gpu")
        if len(times):
            starts.append(float(times[0]))
            ends.append(float(times[-1]))
        # the store keeps float32; two decimals is all a thermometer reading carries
        temp_points = [(float(t), round(float(v), 2)) for t, v in zip(times, temps, strict=True)
                       if math.isfinite(v)]
        latest = store.latest(index)
        retired = _sum_deltas(_delta(store, index, "retired_sbe"),
                              _delta(store, index, "retired_dbe"))
        gpus.append(GpuTelemetry(
            index=index,
            name=str(getattr(latest, "name", None) or f"GPU {index}"),
            samples=store.count(index),
            temperature_min=min((v for _, v in temp_points), default=None),
            temperature_max=max((v for _, v in temp_points), default=None),
            ecc_corrected_delta=_delta(store, index, "ecc_corrected_volatile"),
            ecc_uncorrected_delta=_delta(store, index, "ecc_uncorrected_volatile"),
            retired_pages_delta=retired,
            remapped_rows_delta=_delta(store, index, "remapped_uncorrectable"),
            xids=xids.get(index, []),
            temperature_series=[[round(t - min(starts), 3), v]
                                for t, v in _thin(temp_points)],
            recovery_action=_recovery(store, index),
        ))
    first = min(starts, default=0.0)
    return TelemetrySummary(
        source=source,
        samples=sum(g.samples for g in gpus),
        duration_s=round(max(ends) - first, 3) if starts else None,
        gpus=gpus,
        events=[TelemetryEvent(round(e.timestamp - first, 3), e.gpu, e.kind, e.severity,
                               e.message) for e in timeline(store)],
    )


def _recovery(store: TelemetryStore, index: int) -> str | None:
    """The last recovery action the driver asked for, in words: a request the session saw
    stays in the report after the driver stops asking (a reset was done or the log ends)."""
    _, values = store.series(index, "recovery_action")
    known = [float(v) for v in values if math.isfinite(v)]
    asked = [words for v in known if (words := recovery_words(v))]
    return asked[-1] if asked else ("none" if known else None)


def _delta(store: TelemetryStore, index: int, name: str) -> int | None:
    """Last minus first reading of a counter, None when the device never reported it."""
    _, values = store.series(index, name)
    finite = [float(v) for v in values if math.isfinite(v)]
    return int(finite[-1] - finite[0]) if finite else None


def _sum_deltas(*deltas: int | None) -> int | None:
    known = [d for d in deltas if d is not None]
    return sum(known) if known else None


def _thin(points: list, limit: int = SERIES_POINTS) -> list:
    """Every k-th point so at most `limit` remain, always keeping the last."""
    if len(points) <= limit:
        return list(points)
    step = math.ceil(len(points) / limit)
    return points[::step] + ([points[-1]] if (len(points) - 1) % step else [])


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="seconds")
