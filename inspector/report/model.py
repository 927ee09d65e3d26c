"""The verification report's data model: the session's evidence in, the `Report` out.

The inputs are the public JSON contracts (`scan`, `inspect`, `verify`, …) that the CLI and the
GUI already hold, gathered in `SessionEvidence`; `build.build_report` turns them into a
`Report` (sections from `sections.py`, checklist and problems from `checklist.py`) whose
`to_json()` is the document `schema.json` describes. Renderers read only the `Report`.
Nothing here imports Qt or torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from inspector.checkpoint.contents import DtypeTotal
from inspector.checkpoint.results import (
    ConversionResult,
    DiffResult,
    FolderConversion,
    InspectResult,
)
from inspector.core.envinfo import EnvInfo
from inspector.core.strict_json import strict
from inspector.core.vocabulary import CheckStatus
from inspector.integrity.verify import VerifyResult
from inspector.run.checkpoints import LedgerSummary
from inspector.scan.result import ScanResult

if TYPE_CHECKING:
    from inspector.gpu.telemetry import TelemetryStore
    from inspector.signing.check import SignatureVerdict

SCHEMA_VERSION = 1
PASS, FAIL, NOT_CHECKED = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.NOT_CHECKED


@dataclass
class FileEvidence:
    """What the session learned about one checkpoint; every part but the path is optional."""

    path: str
    scan: dict | ScanResult | None = None
    """The scan contract, or it typed."""
    inspect: dict | InspectResult | None = None
    """The inspect contract, or it typed (the app passes the result it typed on the load's
    thread, so the report does not read it again)."""
    verify: dict | VerifyResult | None = None
    manifest: str | None = None
    conversion: dict | ConversionResult | FolderConversion | None = None
    """A safetensors conversion made in this session (the contract's report, or it typed): one
    file's, or a sharded folder's (`FolderConversion`)."""
    consistency: dict | None = None
    folder: str | None = None
    """The folder the user gave, when this file was found in one (for the backup check)."""
    diff: dict | DiffResult | None = None
    """A comparison with another copy (the `diff` contract, or it typed), when one was made."""


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
    runs: list[LedgerSummary] = field(default_factory=list)
    """The checkpoint ledgers of training-run folders given to the report."""
    signatures: list[SignatureVerdict] = field(default_factory=list)
    """Model folders checked against their OpenSSF Model Signing signatures."""
    problems: list[str] = field(default_factory=list)
    """What the evidence as a whole leaves out (a batch's slices no results file holds)."""


@dataclass
class ToolInfo:
    """Which tool wrote the report, when, and from which command line."""

    name: str
    version: str
    generated_at: str
    command: str | None


@dataclass
class FileInfo:
    """The checkpoint's identity: where it is, how big, when changed, format, SHA-256."""

    path: str
    name: str
    size: int | None
    mtime: str | None
    format: str | None
    sha256: str | None


@dataclass
class ScanInfo:
    """The static scan, trimmed to what a report shows."""

    status: str
    verdict: str | None = None
    weights_only_ok: bool | None = None
    globals: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    error: str | None = None
    weights_only_blockers: list[str] = field(default_factory=list)


@dataclass
class LoadInfo:
    """The jailed weights_only load and the sandbox level it reached."""

    status: str
    """loaded | refused (not loaded by policy: dangerous, or not a torch.load format) |
    failed | not_run"""
    sandbox_level: str | None = None
    sandbox: dict = field(default_factory=dict)
    error: str | None = None


@dataclass
class NonFiniteRow:
    """A tensor holding NaN or Inf, with the counts."""

    key: str
    nan: int
    inf: int


@dataclass
class AbsRow:
    """A tensor's largest finite magnitude."""

    key: str
    dtype: str
    abs_max: float


@dataclass
class TensorSummary:
    """What the loaded tensors add up to."""

    count: int
    parameters: int
    """Elements over all tensors (optimizer state included when the file holds it)."""
    bytes: int
    objects: int
    digest_algorithm: str | None
    dtypes: list[DtypeTotal]
    nonfinite: list[NonFiniteRow]
    """Every tensor holding NaN or Inf, training state included (`HealthInfo` judges them)."""
    largest_abs: list[AbsRow]
    unique_parameters: int | None = None
    """Elements counted once per storage (tied weights once); None for older results."""
    unique_bytes: int | None = None
    unique_unchecked: str | None = None
    """Whose word the unique figures are, with them (`checkpoint.contents.UNIQUE_WORD`): the
    jailed loader's count of its storages, which nothing here checks."""


@dataclass
class HealthInfo:
    """Weights health, the verdict on the values beside the scan's verdict on the code."""

    status: str
    """ok | warning | problem"""
    findings: list[dict]
    """`checkpoint.health` findings: code, key, severity (problem|warning|info), message, ..."""
    weights_checked: int
    state_tensors: int
    unchecked: str | None = None
    """Set when the values health was judged from are the jailed loader's word, which the
    file's bytes could not check here: `as reported by the jailed loader: not checked here,
    <why>` (`sections.LOADER_WORD`)."""


@dataclass
class ClaimsInfo:
    """What the user's process checked of the jailed loader's answer from the file's own bytes:
    the inspect contract's `claims`, with its sentence (`InspectResult.checked_words`)."""

    checked: bool
    tensors: int
    """The tensors whose digests, NaN / Inf counts, ranges and orders were recomputed here."""
    reason: str | None
    """Why nothing was checked here (`checked` false): then the answer is the loader's."""
    words: str


@dataclass
class VerificationInfo:
    """The file and its tensors against a manifest."""

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
    """A safetensors conversion made in this session."""

    status: str
    output: str | None
    sha256: str | None
    details: dict


@dataclass
class ComparisonInfo:
    """The file compared tensor by tensor with another copy, with bit-flip forensics."""

    status: str
    """pass (bit for bit identical) | fail"""
    other: str | None
    counts: dict[str, int]
    tensors: list[dict]
    """Only the tensors that differ, each with at most `MAX_FLIPS_SHOWN` of its flips."""
    single_bit_flips: int
    """Changed elements that differ in exactly one bit: the signature of corruption."""
    checked: str = ""
    """What of the comparison was checked here (`DiffResult.checked_words`)."""


@dataclass
class ConsistencyInfo:
    """A repeat-inference consistency run."""

    status: str
    device: str | None
    repeats: int | None
    failures: list[dict]
    series: list[float]
    """Max abs difference per iteration, for the chart."""
    details: dict
    error: str | None = None
    """Why the run could not finish (no device, worker failure); it then counts as failed."""
    self_test: dict | None = None
    """The fault flipped on purpose ({key, index, bit, iteration}): the run is a test of the
    detector, which passes when the results differ, and says nothing about the file."""
    weights_checked: bool = False
    """Whether the weights the device was given were checked here against the file's bytes
    (the repeats' outputs exist only in the jailed worker either way)."""


@dataclass
class CheckItem:
    """One prevention practice: pass, fail or not checked, and why."""

    id: str
    title: str
    status: str
    detail: str


@dataclass
class ModelInfo:
    """What the loaded checkpoint is: the architecture guess and, for a training checkpoint,
    where it stands and whether a run can resume from it."""

    architecture: str | None
    """The guess in one line (family, layers, hidden size, ...), None when nothing was read."""
    training: str | None
    """Epoch, step, optimizer groups and learning rates, ...; None for weights alone."""
    resume: str | None
    """'Ready to resume' or what stops it; None for weights alone."""
    resume_items: list[dict]
    """One row per thing a resume needs: item, status (in words), detail."""
    unchecked: str | None = None
    """Why every field above is only the jailed loader's word (they are read from its
    records: `LOADER_WORD` and the reason); None when its answer was checked here."""


@dataclass
class ShardsInfo:
    """A sharded checkpoint (a model folder or its index) reported as one file: its shards,
    each with its own SHA-256, and how they cover the index."""

    index: str
    files: list[dict]
    """The inspect contract's `shards` records: file, format, tensors, bytes, sha256."""
    problems: list[dict]
    """Coverage problems (code, message, fatal); a fatal one is also a report problem."""


@dataclass
class CodeInfo:
    """The code a TorchScript or torch.export archive carries (torch.jit.load would run it):
    each file's name, size and flags, not its text."""

    kind: str
    """`torchscript` or `torch-export`."""
    constants: int
    """Tensors kept beside the weights (not part of them)."""
    flags: int
    """Flags over every file."""
    files: list[dict]
    """name, size, truncated, flags (what in it reaches beyond tensor maths)."""


@dataclass
class FileReport:
    """Everything the report says about one file."""

    file: FileInfo
    verdict: str
    problems: list[str]
    checklist: list[CheckItem]
    scan: ScanInfo
    load: LoadInfo
    tensors: TensorSummary | None
    health: HealthInfo | None
    """None when nothing was loaded."""
    verification: VerificationInfo | None
    conversion: ConversionInfo | None
    consistency: ConsistencyInfo | None
    comparison: ComparisonInfo | None = None
    model: ModelInfo | None = None
    """None when nothing was loaded."""
    code: CodeInfo | None = None
    """None unless the file is a TorchScript or torch.export archive that was read."""
    shards: ShardsInfo | None = None
    """None unless the path is a sharded checkpoint (a model folder or a `*.index.json`)."""
    claims: ClaimsInfo | None = None
    """What of the jailed load was checked here (None when nothing was loaded)."""


@dataclass
class GpuTelemetry:
    """One GPU's health over the session."""

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
    recovery_action: str | None = None
    """What the driver last asked for in words (`gpu.telemetry.recovery_words`), kept once
    asked for; "none" when it never asked, None when the device does not report it."""


@dataclass
class TelemetryEvent:
    """An alert or a throttle onset (`gpu.events.timeline`), as the GPU pane marks it."""

    at_s: float
    """Seconds since the first sample."""
    gpu: int | None
    kind: str
    severity: str
    """An `AlertSeverity`; its word is `core.badges.alert_look`'s."""
    message: str


@dataclass
class TelemetrySummary:
    """GPU telemetry over the session."""

    source: str
    samples: int
    duration_s: float | None
    gpus: list[GpuTelemetry]
    events: list[TelemetryEvent] = field(default_factory=list)
    """Every alert and throttle onset, oldest first."""


@dataclass
class Report:
    """The whole verification report; `to_json()` is the schema.json document."""

    schema_version: int
    tool: ToolInfo
    verdict: str
    status: str
    """passed when no file is suspicious or dangerous and no check failed."""
    problems: list[str]
    environment: dict
    files: list[FileReport]
    telemetry: TelemetrySummary | None
    runs: list[dict] = field(default_factory=list)
    """Each run folder's ledger summary (`run.checkpoints.LedgerSummary.to_json`)."""
    signatures: list[dict] = field(default_factory=list)
    """Each signed folder's verdict (`signing.check.SignatureVerdict.to_json`), first in the
    summary."""
    unchecked: list[str] = field(default_factory=list)
    """One line per verdict that rests on the jailed loader's word alone (the file's bytes
    could not check it here), prefixed with the file name: said in the summary, beside the
    problems; it fails nothing by itself (as `inspect`, which judges from that word and says
    so)."""

    def to_json(self) -> dict:
        """The report as a JSON-ready dict (non-finite floats become strings)."""
        return strict(asdict(self))

    def dumps(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.to_json(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"

