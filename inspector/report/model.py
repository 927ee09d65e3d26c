"""The verification report: one model, filled from whatever the session did.

The inputs are the public JSON contracts (`scan`, `inspect`, `verify`, …) that the CLI and the
GUI already hold, gathered in `SessionEvidence`; `build_report` turns them into a `Report`
whose `to_json()` is the document `schema.json` describes. Renderers read only the `Report`.
Nothing here imports Qt or torch.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inspector import __version__
from inspector.core.envinfo import EnvInfo
from inspector.core.hashing import sha256_file
from inspector.core.progress import CancelToken, ProgressFn
from inspector.core.verdict import worst

if TYPE_CHECKING:
    from inspector.gpu.telemetry import TelemetryStore

SCHEMA_VERSION = 1
PASS, FAIL, NOT_CHECKED = "pass", "fail", "not_checked"

LARGEST_ABS_ROWS = 10
SERIES_POINTS = 240
"""Chart series are thinned to this many points; a printed chart cannot show more."""

REFUSALS = ("refused_dangerous", "refused_global", "unsupported_format")
"""Sandbox error codes for a file deliberately not loaded (policy, not a failure)."""

FAILURE_KEYS = ("key", "status", "runs_mismatched", "repeat_mismatches", "max_abs_diff",
                "reference_ok", "roundtrip_ok", "first_mismatch")
"""What a failing consistency row keeps in the report."""
CONSISTENCY_BULK = ("tensors", "outputs", "resident_mismatches", "iterations", "sandbox",
                    "timing", "path", "device_label", "device", "repeats", "consistent", "error")
"""Keys of a consistency result that are summarised elsewhere, not repeated in details."""

SAFE_FORMATS = ("safetensors",)
DATA_ONLY_FORMATS = ("npy", "npz")
"""Formats that hold no code unless they embed a pickle (then the scan lists globals)."""


@dataclass
class FileEvidence:
    """What the session learned about one checkpoint; every part but the path is optional."""

    path: str
    scan: dict | None = None
    inspect: dict | None = None
    verify: dict | None = None
    manifest: str | None = None
    conversion: dict | None = None
    consistency: dict | None = None
    folder: str | None = None
    """The folder the user gave, when this file was found in one (for the backup check)."""


@dataclass
class SessionEvidence:
    """Everything a report is built from."""

    files: list[FileEvidence]
    telemetry: TelemetryStore | None = None
    """The session's samples (`inspector.gpu.telemetry.TelemetryStore`), if any were taken."""
    telemetry_source: str = "nvml"
    """"nvml", or the path of a replayed log."""
    environment: EnvInfo | None = None
    command: str | None = None


@dataclass
class ToolInfo:
    name: str
    version: str
    generated_at: str
    command: str | None


@dataclass
class FileInfo:
    path: str
    name: str
    size: int | None
    mtime: str | None
    format: str | None
    sha256: str | None


@dataclass
class ScanInfo:
    status: str
    verdict: str | None = None
    weights_only_ok: bool | None = None
    globals: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    error: str | None = None
    weights_only_blockers: list[str] = field(default_factory=list)


@dataclass
class LoadInfo:
    status: str
    """loaded | refused (not loaded by policy: dangerous, or not a torch.load format) |
    failed | not_run"""
    sandbox_level: str | None = None
    sandbox: dict = field(default_factory=dict)
    error: str | None = None


@dataclass
class DtypeRow:
    dtype: str
    tensors: int
    elements: int
    bytes: int


@dataclass
class NonFiniteRow:
    key: str
    nan: int
    inf: int


@dataclass
class AbsRow:
    key: str
    dtype: str
    abs_max: float


@dataclass
class TensorSummary:
    count: int
    parameters: int
    """Elements over all tensors (optimizer state included when the file holds it)."""
    bytes: int
    objects: int
    digest_algorithm: str | None
    dtypes: list[DtypeRow]
    nonfinite: list[NonFiniteRow]
    largest_abs: list[AbsRow]


@dataclass
class VerificationInfo:
    status: str
    manifest: str | None
    counts: dict[str, int]
    files: list[dict]
    tensors: list[dict]
    """Only the tensors that are not ok; `counts` has the totals."""
    errors: list[str]
    """Checks that could not run (e.g. the worker failed to read the tensors)."""


@dataclass
class ConversionInfo:
    status: str
    output: str | None
    sha256: str | None
    details: dict


@dataclass
class ConsistencyInfo:
    status: str
    device: str | None
    repeats: int | None
    failures: list[dict]
    series: list[float]
    """Max abs difference per iteration, for the chart."""
    details: dict
    error: str | None = None
    """Why the run could not finish (no device, worker failure); it then counts as failed."""


@dataclass
class CheckItem:
    id: str
    title: str
    status: str
    detail: str


@dataclass
class FileReport:
    file: FileInfo
    verdict: str
    problems: list[str]
    checklist: list[CheckItem]
    scan: ScanInfo
    load: LoadInfo
    tensors: TensorSummary | None
    verification: VerificationInfo | None
    conversion: ConversionInfo | None
    consistency: ConsistencyInfo | None


@dataclass
class GpuTelemetry:
    index: int
    name: str
    samples: int
    temperature_min: float | None
    temperature_max: float | None
    ecc_corrected_delta: int | None
    ecc_uncorrected_delta: int | None
    retired_pages_delta: int | None
    remapped_rows_delta: int | None
    xids: list[int]
    temperature_series: list[list[float]]
    """[seconds since the first sample, °C] pairs, thinned for the chart."""


@dataclass
class TelemetrySummary:
    source: str
    samples: int
    duration_s: float | None
    gpus: list[GpuTelemetry]


@dataclass
class Report:
    schema_version: int
    tool: ToolInfo
    verdict: str
    status: str
    """passed when no file is suspicious or dangerous and no check failed."""
    problems: list[str]
    environment: dict
    files: list[FileReport]
    telemetry: TelemetrySummary | None

    def to_json(self) -> dict:
        """The report as a JSON-ready dict (non-finite floats become strings)."""
        return _finite(asdict(self))

    def dumps(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.to_json(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def build_report(
    session: SessionEvidence,
    *,
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> Report:
    """Build the report; a file whose SHA-256 the session never computed is hashed now."""
    environment = session.environment
    files = [_file_report(ev, session.files, progress, cancel) for ev in session.files]
    telemetry = (summarize_telemetry(session.telemetry, session.telemetry_source)
                 if session.telemetry is not None else None)
    problems = [f"{f.file.name}: {p}" for f in files for p in f.problems]
    if telemetry is not None:
        problems += _telemetry_problems(telemetry)
    verdict = worst(f.verdict for f in files)
    return Report(
        schema_version=SCHEMA_VERSION,
        tool=ToolInfo(
            name="ckpt-inspector",
            version=__version__,
            generated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            command=session.command,
        ),
        verdict=verdict,
        status="passed" if not problems else "failed",
        problems=problems,
        environment=environment.to_json() if environment is not None else {},
        files=files,
        telemetry=telemetry,
    )


def _file_report(
    ev: FileEvidence,
    session_files: list[FileEvidence],
    progress: ProgressFn | None,
    cancel: CancelToken | None,
) -> FileReport:
    scan_dict = ev.scan or (ev.inspect or {}).get("scan")
    scan = _scan_info(scan_dict)
    load = _load_info(ev.inspect)
    tensors = summarize_tensors(ev.inspect) if load.status == "loaded" else None
    verification = _verification_info(ev.verify, ev.manifest)
    conversion = _conversion_info(ev.conversion)
    consistency = _consistency_info(ev.consistency)
    info = _file_info(ev, scan_dict, progress, cancel)
    verdict = scan.verdict or ("error" if scan.status == "failed" else "safe")
    checklist = [
        _check_safe_format(info, scan, conversion),
        _check_hash_on_record(ev.path, verification),
        _check_weights_only(info, scan, load),
        _check_backup(ev, session_files),
        _check_deterministic(consistency),
    ]
    return FileReport(
        file=info,
        verdict=verdict,
        problems=_file_problems(verdict, scan, load, tensors, verification, conversion,
                                consistency),
        checklist=checklist,
        scan=scan,
        load=load,
        tensors=tensors,
        verification=verification,
        conversion=conversion,
        consistency=consistency,
    )


def _file_info(
    ev: FileEvidence, scan: dict | None, progress: ProgressFn | None, cancel: CancelToken | None
) -> FileInfo:
    path = Path(ev.path)
    inspect = ev.inspect or {}
    try:
        st = path.stat()
        size, mtime = st.st_size, _iso(st.st_mtime)
    except OSError:
        size, mtime = inspect.get("size"), None
    sha = inspect.get("sha256")
    if not sha and path.is_file():
        sha = sha256_file(path, progress=progress, cancel=cancel)
    return FileInfo(
        path=os.fspath(path.absolute()),
        name=path.name,
        size=size,
        mtime=mtime,
        format=inspect.get("format") or (scan or {}).get("format"),
        sha256=sha,
    )


def _scan_info(scan: dict | None) -> ScanInfo:
    if scan is None:
        return ScanInfo(status="not_run")
    return ScanInfo(
        status="failed" if scan.get("verdict") == "error" else "done",
        verdict=scan.get("verdict"),
        weights_only_ok=scan.get("weights_only_ok"),
        globals=list(scan.get("globals") or []),
        findings=list(scan.get("findings") or []),
        error=scan.get("error"),
        weights_only_blockers=[str(b) for b in scan.get("weights_only_blockers") or []],
    )


def _load_info(inspect: dict | None) -> LoadInfo:
    if inspect is None:
        return LoadInfo(status="not_run")
    sandbox = dict(inspect.get("sandbox") or {})
    error = inspect.get("error")
    status = "loaded"
    if isinstance(error, dict):
        status = "refused" if error.get("code") in REFUSALS else "failed"
        error = error.get("message") or json.dumps(error, sort_keys=True)
    elif error:
        status = "failed"
    return LoadInfo(status=status, sandbox_level=sandbox.get("level"), sandbox=sandbox,
                    error=error)


def summarize_tensors(inspect: dict) -> TensorSummary:
    """Counts, parameters, bytes by dtype, non-finite tensors and the largest magnitudes."""
    rows = inspect.get("tensors") or []
    by_dtype: dict[str, DtypeRow] = {}
    nonfinite, magnitudes = [], []
    for t in rows:
        dtype = str(t.get("dtype"))
        agg = by_dtype.setdefault(dtype, DtypeRow(dtype, 0, 0, 0))
        agg.tensors += 1
        agg.elements += int(t.get("numel") or 0)
        agg.bytes += int(t.get("nbytes") or 0)
        nan, inf = int(t.get("nan") or 0), int(t.get("inf") or 0)
        if nan or inf:
            nonfinite.append(NonFiniteRow(str(t.get("key")), nan, inf))
        magnitude = _abs_max(t)
        if magnitude is not None:
            magnitudes.append(AbsRow(str(t.get("key")), dtype, magnitude))
    magnitudes.sort(key=lambda r: r.abs_max, reverse=True)
    return TensorSummary(
        count=len(rows),
        parameters=sum(d.elements for d in by_dtype.values()),
        bytes=sum(d.bytes for d in by_dtype.values()),
        objects=len(inspect.get("objects") or []),
        digest_algorithm=inspect.get("digest_algorithm"),
        dtypes=sorted(by_dtype.values(), key=lambda d: d.bytes, reverse=True),
        nonfinite=nonfinite,
        largest_abs=magnitudes[:LARGEST_ABS_ROWS],
    )


def _abs_max(tensor: dict) -> float | None:
    """The largest finite magnitude a tensor row reports, None when it reports none."""
    candidates = [_number(tensor.get(k)) for k in ("absmax", "abs_max", "min", "max")]
    finite = [abs(v) for v in candidates if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _verification_info(verify: dict | None, manifest: str | None) -> VerificationInfo | None:
    if verify is None:
        return None
    files = list(verify.get("files") or [])
    all_tensors = list(verify.get("tensors") or [])
    errors = [str(e) for e in verify.get("errors") or []]
    counts: dict[str, int] = {}
    for row in files + all_tensors:
        counts[row.get("status", "unknown")] = counts.get(row.get("status", "unknown"), 0) + 1
    failed = errors or any(row.get("status") != "ok" for row in files + all_tensors)
    return VerificationInfo(
        status=FAIL if failed else PASS,
        manifest=manifest or verify.get("manifest"),
        counts=counts,
        files=files,
        tensors=[t for t in all_tensors if t.get("status") != "ok"],
        errors=errors,
    )


def _conversion_info(conversion: dict | None) -> ConversionInfo | None:
    if conversion is None:
        return None
    verified = conversion.get("verified")
    failed = conversion.get("error") or verified is False
    return ConversionInfo(
        status=FAIL if failed else PASS,
        output=conversion.get("output"),
        sha256=conversion.get("sha256"),
        details={k: v for k, v in conversion.items() if k not in ("output", "sha256")},
    )


def _consistency_info(result: dict | None) -> ConsistencyInfo | None:
    if result is None:
        return None
    rows = (result.get("tensors") or []) + (result.get("outputs") or [])
    failures = [{k: row[k] for k in FAILURE_KEYS if k in row}
                for row in rows if row.get("status") == "fail"]
    failures += [{"key": r.get("key"), "status": "device copy differs",
                  "changed_elements": r.get("changed_elements")}
                 for r in result.get("resident_mismatches") or []]
    series = [v for v in (_number(i.get("max_abs_diff")) for i in result.get("iterations") or [])
              if v is not None]
    passed = bool(result.get("consistent")) and not result.get("error")
    return ConsistencyInfo(
        status=PASS if passed else FAIL,
        device=result.get("device_label") or result.get("device"),
        repeats=result.get("repeats"),
        failures=failures,
        series=_thin(series),
        details={k: v for k, v in result.items() if k not in CONSISTENCY_BULK},
        error=result.get("error"),
    )


def _check_safe_format(
    info: FileInfo, scan: ScanInfo, conversion: ConversionInfo | None
) -> CheckItem:
    title = "Stored in a format that cannot run code"
    fmt = (info.format or "").lower()
    if scan.status == "not_run" and not fmt:
        return CheckItem("safe_format", title, NOT_CHECKED, "the file was not scanned")
    if _holds_no_pickle(info, scan):
        return CheckItem("safe_format", title, PASS, f"{info.format} holds only tensor data")
    if conversion is not None and conversion.status == PASS:
        return CheckItem("safe_format", title, PASS,
                         f"verified safetensors conversion written: {conversion.output}")
    return CheckItem("safe_format", title, FAIL,
                     f"{info.format or 'this format'} is pickle-based; convert it to safetensors")


def _check_hash_on_record(path: str, verification: VerificationInfo | None) -> CheckItem:
    title = "SHA-256 on record matches"
    if verification is None:
        return CheckItem("hash_on_record", title, NOT_CHECKED, "no manifest was given")
    row = _manifest_row(path, verification)
    if row is None or row.get("status") == "extra":
        return CheckItem("hash_on_record", title, FAIL,
                         f"{Path(path).name} is not listed in {verification.manifest}")
    if row.get("status") == "ok":
        return CheckItem("hash_on_record", title, PASS, f"matches {verification.manifest}")
    return CheckItem("hash_on_record", title, FAIL,
                     f"{row.get('status')} against {verification.manifest}")


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
    if scan.status == "not_run":
        return CheckItem("weights_only", title, NOT_CHECKED, "the file was not scanned")
    if _holds_no_pickle(info, scan):
        return CheckItem("weights_only", title, PASS,
                         f"{info.format} holds no pickle: nothing for weights_only to refuse")
    if not scan.weights_only_ok:
        refused = scan.weights_only_blockers or [
            f"{g.get('module')}.{g.get('name')}" for g in scan.globals
            if g.get("severity") != "safe"]
        names = ", ".join(refused[:5]) or "its pickle opcodes"
        return CheckItem("weights_only", title, FAIL, f"would be refused because of {names}")
    if load.status == "failed":
        return CheckItem("weights_only", title, FAIL, f"the jailed load failed: {load.error}")
    detail = "loaded in the jail" if load.status == "loaded" else "accepted by the static scan"
    return CheckItem("weights_only", title, PASS, detail)


def _holds_no_pickle(info: FileInfo, scan: ScanInfo) -> bool:
    fmt = (info.format or "").lower()
    return (any(s in fmt for s in SAFE_FORMATS + DATA_ONLY_FORMATS) and not scan.globals
            and scan.status == "done")


def _check_backup(ev: FileEvidence, session_files: list[FileEvidence]) -> CheckItem:
    title = "Another checkpoint kept beside it"
    if not ev.folder:
        return CheckItem("backup", title, NOT_CHECKED, "a single file was given, not a folder")
    own_set = _shard_set(Path(ev.path))
    others = [
        other for other in session_files
        if other.folder == ev.folder
        and Path(other.path).resolve() not in own_set
        and _is_checkpoint(other)
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
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
        except (OSError, ValueError, AttributeError):
            continue
        shards = {(path.parent / name).resolve() for name in set(weight_map.values())}
        if path.resolve() in shards:
            members |= shards
    return members


def _is_checkpoint(ev: FileEvidence) -> bool:
    scan = ev.scan or (ev.inspect or {}).get("scan") or {}
    return scan.get("format") not in (None, "unknown") and scan.get("verdict") != "error"


def _check_deterministic(consistency: ConsistencyInfo | None) -> CheckItem:
    title = "Repeat-inference run gave identical results"
    if consistency is None:
        return CheckItem("deterministic", title, NOT_CHECKED, "no consistency run in this session")
    where = f" on {consistency.device}" if consistency.device else ""
    if consistency.status == PASS:
        return CheckItem("deterministic", title, PASS, f"identical every repeat{where}")
    if consistency.error:
        return CheckItem("deterministic", title, FAIL,
                         f"the run failed{where}: {consistency.error}")
    return CheckItem("deterministic", title, FAIL,
                     f"{len(consistency.failures) or 'some'} results differed{where}")


def _file_problems(
    verdict: str,
    scan: ScanInfo,
    load: LoadInfo,
    tensors: TensorSummary | None,
    verification: VerificationInfo | None,
    conversion: ConversionInfo | None,
    consistency: ConsistencyInfo | None,
) -> list[str]:
    problems = []
    if verdict in ("suspicious", "dangerous"):
        names = [f"{g.get('module')}.{g.get('name')}" for g in scan.globals
                 if g.get("severity") == verdict]
        problems.append(f"{verdict}" + (f": imports {', '.join(names[:5])}" if names else ""))
    if scan.status == "failed":
        problems.append(f"scan failed: {scan.error}")
    if load.status == "failed":
        problems.append(f"jailed load failed: {load.error}")
    if tensors is not None and tensors.nonfinite:
        problems.append(f"{len(tensors.nonfinite)} tensors contain NaN or Inf")
    if verification is not None and verification.status == FAIL:
        bad = {k: v for k, v in verification.counts.items() if k != "ok"}
        detail = ", ".join(f"{v} {k}" for k, v in sorted(bad.items()))
        problems.append(f"manifest verification failed ({detail or 'error'})")
    if conversion is not None and conversion.status == FAIL:
        problems.append("safetensors conversion was not verified")
    if consistency is not None and consistency.error:
        problems.append(f"consistency run failed: {consistency.error}")
    elif consistency is not None and consistency.status == FAIL:
        problems.append("consistency run found differing results")
    return problems


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
        ))
    return TelemetrySummary(
        source=source,
        samples=sum(g.samples for g in gpus),
        duration_s=round(max(ends) - min(starts), 3) if starts else None,
        gpus=gpus,
    )


def _delta(store: TelemetryStore, index: int, name: str) -> int | None:
    """Last minus first reading of a counter, None when the device never reported it."""
    _, values = store.series(index, name)
    finite = [float(v) for v in values if math.isfinite(v)]
    return int(finite[-1] - finite[0]) if finite else None


def _sum_deltas(*deltas: int | None) -> int | None:
    known = [d for d in deltas if d is not None]
    return sum(known) if known else None


def _telemetry_problems(telemetry: TelemetrySummary) -> list[str]:
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
    return problems


def _thin(points: list, limit: int = SERIES_POINTS) -> list:
    """Every k-th point so at most `limit` remain, always keeping the last."""
    if len(points) <= limit:
        return list(points)
    step = math.ceil(len(points) / limit)
    return points[::step] + ([points[-1]] if (len(points) - 1) % step else [])


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="seconds")


def _finite(value):
    """Replace NaN / ±Inf floats with strings so the document is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
