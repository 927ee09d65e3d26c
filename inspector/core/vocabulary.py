"""The closed vocabularies that results carry: one StrEnum per set of words.

Members are `str`s equal to their values, so JSON output, comparisons with parsed JSON and dict
lookups keep working with the plain words; the values are the public JSON contract and never
change. Where a vocabulary is ordered, the members are declared in that order.
"""

from __future__ import annotations

from enum import StrEnum

DAMAGED = "damaged"
"""The word shown for a file whose data is corrupted (never the JSON `verdict`, which keeps
its contract word; `scan.advice.display_word`)."""


class Verdict(StrEnum):
    """A file's scan verdict; the four ranked ones from best to worst, then `skipped`."""

    SAFE = "safe"
    SUSPICIOUS = "suspicious"
    DANGEROUS = "dangerous"
    ERROR = "error"
    SKIPPED = "skipped"
    """A folder's file that is not a checkpoint; ranks as safe and never fails a gate."""


class Format(StrEnum):
    """What a file is, as the scan contract's `format` names it (`formats` holds each
    one's record: how it is recognised, read, scanned and loaded)."""

    PYTORCH_ZIP = "pytorch-zip"
    TORCHSCRIPT = "torchscript"
    TORCH_EXPORT = "torch-export"
    PYTORCH_LEGACY = "pytorch-legacy"
    PICKLE = "pickle"
    PYTORCH_TAR = "pytorch-tar"
    TAR = "tar"
    COMPRESSED_PICKLE = "compressed-pickle"
    COMPRESSED_ARCHIVE = "compressed-archive"
    DISTCP = "distcp"
    DCP = "dcp"
    """A torch.distributed.checkpoint folder (`.metadata` and its `.distcp` files) as one."""
    SAFETENSORS = "safetensors"
    NPY = "npy"
    NPZ = "npz"
    ZIP = "zip"
    SEVEN_ZIP = "7z"
    GGUF = "gguf"
    ONNX = "onnx"
    UNKNOWN = "unknown"


class Severity(StrEnum):
    """Severity of a scan finding or an imported global, from harmless to dangerous."""

    INFO = "info"
    SAFE = "safe"
    SUSPICIOUS = "suspicious"
    DANGEROUS = "dangerous"


class FileStatus(StrEnum):
    """One file checked against a manifest (the `verify` contract's `files[].status`)."""

    OK = "ok"
    MISMATCH = "mismatch"
    MISSING = "missing"
    SIZE_MISMATCH = "size_mismatch"
    EXTRA = "extra"
    UNCHECKED = "unchecked"
    ORPHAN = "orphan"


class TensorCheckStatus(StrEnum):
    """One tensor checked against a manifest's digests (the `verify` contract's `tensors`)."""

    OK = "ok"
    MISMATCH = "mismatch"
    MISSING = "missing"
    EXTRA = "extra"
    DTYPE_OR_SHAPE_CHANGED = "dtype_or_shape_changed"


class TensorStatus(StrEnum):
    """One tensor compared across two checkpoints (the `diff` contract's `tensors[].status`)."""

    IDENTICAL = "identical"
    CHANGED = "changed"
    ONLY_IN_A = "only_in_a"
    ONLY_IN_B = "only_in_b"
    DTYPE_OR_SHAPE_CHANGED = "dtype_or_shape_changed"
    NOT_COMPARED = "not_compared"


class HealthStatus(StrEnum):
    """The weights' health (`inspect`'s `health.status`), from best to worst."""

    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


class HealthSeverity(StrEnum):
    """One health finding's severity, from mildest to worst."""

    INFO = "info"
    WARNING = "warning"
    PROBLEM = "problem"


class AlertSeverity(StrEnum):
    """A GPU telemetry alert's or event's severity (`gpu.alerts`), from mildest to worst."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class ResumeStatus(StrEnum):
    """One item a training resume needs (`inspect`'s `resume.items[].status`)."""

    PRESENT = "present"
    MISSING = "missing"
    MISMATCH = "mismatch"


class JailLevel(StrEnum):
    """How far the sandbox worker confined itself, from weakest to strongest."""

    PROCESS_ONLY = "process-only"
    PARTIAL = "partial"
    FULL = "full"


class JailRequirement(StrEnum):
    """The weakest jail a load accepts: `--require-jail`, the app's Required sandbox menu."""

    FULL = "full"
    PARTIAL = "partial"
    ANY = "any"  # also process-only: a worker with resource limits alone


DEFAULT_REQUIRED_JAIL = JailRequirement.PARTIAL
"""What a load requires unless told otherwise: at least one isolation layer, and one that keeps
the user's files and the client's environment out of reach (`sandbox.protocol.SECRET_GUARDS`)."""


class DocumentState(StrEnum):
    """Where the desktop app's pipeline stands with one opened file."""

    SCANNING = "scanning"
    QUEUED = "queued"
    LOADING = "loading"
    NEEDS_DECISION = "needs_decision"
    BLOCKED = "blocked"
    DECLINED = "declined"
    LOADED = "loaded"
    LOAD_FAILED = "load_failed"
    CANCELLED = "cancelled"
    ERROR = "error"
    SKIPPED = "skipped"


class ReportStatus(StrEnum):
    """A report's overall outcome (`failed` when it lists problems)."""

    PASSED = "passed"
    FAILED = "failed"


class CheckStatus(StrEnum):
    """A report checklist item's or section's outcome, or one consistency row's (those and
    the sections are only pass or fail)."""

    PASS = "pass"
    FAIL = "fail"
    NOT_CHECKED = "not_checked"


class StepStatus(StrEnum):
    """Whether a report's scan step ran and finished."""

    DONE = "done"
    FAILED = "failed"
    NOT_RUN = "not_run"


class LoadStatus(StrEnum):
    """A report's sandbox load: `refused` is not loaded on purpose."""

    LOADED = "loaded"
    REFUSED = "refused"
    FAILED = "failed"
    NOT_RUN = "not_run"


class SaveOutcome(StrEnum):
    """What the ledger found when it re-read a checkpoint it had just saved."""

    VERIFIED = "verified"
    MISMATCH = "mismatch"
    UNVERIFIED = "unverified"
    UNHEALTHY = "unhealthy"
    """Written and re-read whole, but the weights failed the health check before sealing
    (non-finite, past the guard's learned bounds, or changed since the last optimizer step)."""


class CheckpointState(StrEnum):
    """A ledgered checkpoint's bytes now, against its record."""

    INTACT = "intact"
    CHANGED = "changed"
    MISSING = "missing"
    REMOVED = "removed"
    REPLACED = "replaced"


class SignatureState(StrEnum):
    """A folder against its OpenSSF Model Signing signature (`signing.check`)."""

    INTACT = "intact"
    CHANGED = "changed"
    INVALID = "invalid"
    UNVERIFIED = "unverified"
    UNSIGNED = "unsigned"


class SignerKind(StrEnum):
    """How an OpenSSF Model Signing signature was made: a key, a certificate, Sigstore keyless."""

    KEY = "key"
    CERTIFICATE = "certificate"
    SIGSTORE = "sigstore"
