"""What every view shows for a file: each badge state's word, colour, glyph and meaning.

A file gets two badges, code safety (the static scan) and weights health (the jailed load),
and one state in a list of files, the worse of the two. The app's badges and list icons, the
report's cells and headline colours, the legend and the CLI's verdict lines (in capitals,
`shout`) all read `LOOKS`, so one state is one word and one colour everywhere; a file or
tensor checked against a manifest or another copy reads `STATUS_LOOKS` the same way. Which
state applies is decided by `scan.advice` (code safety, the file) and `weights_badge`
(weights health); every badge ends in a state that says something, "not judged" with its
reason included, never a pending state left behind by a failed step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from inspector.core.vocabulary import (
    AlertSeverity,
    CheckpointState,
    FileStatus,
    HealthStatus,
    TensorStatus,
    Verdict,
)


class Badge(StrEnum):
    """A state a badge or a list row can be in."""

    SCANNING = "scanning"
    SAFE = "safe"
    SUSPICIOUS = "suspicious"
    DANGEROUS = "dangerous"
    UNREADABLE = "unreadable"
    """The scan could not read the file: code safety could not be judged."""
    DAMAGED = "damaged"
    """The file's bytes fail its own checksums or sizes (a CRC, a truncated record)."""
    NO_CODE = "no_code"
    """Code safety of a file that runs no code but whose weights are corrupted."""
    WEIGHTS_OK = "weights_ok"
    WEIGHTS_CHECK = "weights_check"
    WEIGHTS_CORRUPTED = "weights_corrupted"
    """Weights hold NaN or Inf, flipped-exponent outliers or a negative running variance: the
    bytes are whole, the values are not."""
    WEIGHTS_PENDING = "weights_pending"
    WEIGHTS_NOT_JUDGED = "weights_not_judged"
    SKIPPED = "skipped"
    """A folder's entry that is not a checkpoint (`Verdict.SKIPPED`): listed with its reason,
    not judged."""


@dataclass(frozen=True)
class Look:
    """How one state reads: its word, its colour, a glyph for its icon and one line saying
    what it means (tooltips and the legend)."""

    word: str
    colour: str
    glyph: str
    meaning: str


GREY = "#6e6e6e"
"""Not judged (with its reason) and only that: no judged state is grey."""

LOOKS: dict[Badge, Look] = {
    Badge.SCANNING: Look("Scanning", "#5f6fa0", "…", "Being scanned; nothing from it runs."),
    Badge.SAFE: Look("Safe", "#1e8e3e", "✓", "No code runs when it is loaded."),
    Badge.SUSPICIOUS: Look("Suspicious", "#b86e00", "!",
                           "Imports outside weights_only's allowlist: your decision is needed."),
    Badge.DANGEROUS: Look("Dangerous", "#c5221f", "✕",
                          "Loading it would run code or touch the system. Do not load it."),
    Badge.UNREADABLE: Look("Could not be read", GREY, "?",
                           "Not judged: the scan could not read it as a checkpoint."),
    Badge.DAMAGED: Look("Damaged", "#7b1fa2", "≠",
                        "Its bytes fail the checksums or sizes the file itself records."),
    Badge.NO_CODE: Look("No code found", "#1e8e3e", "–",
                        "No code runs when it is loaded, but its weights are corrupted."),
    Badge.WEIGHTS_OK: Look("Weights OK", "#1e8e3e", "✓",
                           "No NaN or Inf, no outlier, no negative running variance, no "
                           "constant or duplicated matrix."),
    Badge.WEIGHTS_CHECK: Look("Weights: check", "#b86e00", "≈",
                              "A constant or all-zero matrix, or duplicated weights."),
    Badge.WEIGHTS_CORRUPTED: Look("Weights corrupted", "#c2185b", "∿",
                                  "Weights hold NaN or Inf, values far beyond the rest of "
                                  "their tensor (a flipped exponent bit), or a negative "
                                  "running variance (a flipped sign bit)."),
    Badge.WEIGHTS_PENDING: Look("Weights not judged yet", "#5f6fa0", "…",
                                "The weights are judged once the sandbox has read them."),
    Badge.WEIGHTS_NOT_JUDGED: Look("Weights not judged", GREY, "–",
                                   "The weights were not read, so their values were not "
                                   "judged."),
    Badge.SKIPPED: Look("Skipped", GREY, "○",
                        "Not judged: not a checkpoint, so it was not scanned (the reason is "
                        "beside it)."),
}

LIST_STATES = (Badge.DANGEROUS, Badge.DAMAGED, Badge.WEIGHTS_CORRUPTED, Badge.SUSPICIOUS,
               Badge.UNREADABLE, Badge.WEIGHTS_CHECK, Badge.SAFE, Badge.SCANNING)
"""The states a row of the file list can show, worst first: the legend's order."""

VERDICT_BADGES: dict[str, Badge] = {Verdict.SAFE: Badge.SAFE, Verdict.SUSPICIOUS: Badge.SUSPICIOUS,
                                    Verdict.DANGEROUS: Badge.DANGEROUS,
                                    Verdict.ERROR: Badge.UNREADABLE}
"""The badge of a bare verdict or severity, where nothing else about the file is known."""

_GREEN, _RED, _AMBER, _BLUE = "#1e8e3e", "#c5221f", "#b86e00", "#5f6fa0"

STATUS_LOOKS: dict[str, Look] = {
    FileStatus.OK: Look("OK", _GREEN, "✓", "The bytes match what the manifest records."),
    TensorStatus.IDENTICAL: Look("Identical", _GREEN, "✓", "Bit for bit the same."),
    FileStatus.MISMATCH: Look("Mismatch", _RED, "✕", "The bytes differ from the record."),
    TensorStatus.CHANGED: Look("Changed", _RED, "✕", "Some elements differ."),
    FileStatus.SIZE_MISMATCH: Look("Size differs", _RED, "✕",
                                   "The size differs from the record."),
    TensorStatus.DTYPE_OR_SHAPE_CHANGED: Look("Dtype or shape changed", _RED, "✕",
                                              "Its type or shape differs."),
    FileStatus.MISSING: Look("Missing", _AMBER, "!", "Recorded but not found."),
    TensorStatus.ONLY_IN_A: Look("Only in this file", _AMBER, "!",
                                 "The other copy does not hold it."),
    TensorStatus.ONLY_IN_B: Look("Only in the other file", _AMBER, "!",
                                 "This copy does not hold it."),
    FileStatus.EXTRA: Look("Not in manifest", _BLUE, "+", "Found but not recorded."),
    CheckpointState.INTACT: Look("Intact", _GREEN, "✓", "The same bytes as when it was saved."),
    CheckpointState.REMOVED: Look("Removed", GREY, "–",
                                  "Rotated away as the ledger records: not checked."),
    CheckpointState.REPLACED: Look("Replaced", GREY, "–",
                                   "A later save took its place: not checked."),
}
"""A verify, diff or run status (`FileStatus`, `TensorCheckStatus`, `TensorStatus` and
`CheckpointState` share their words): the app's rows, the CLI's lines and totals."""


ALERT_LOOKS: dict[AlertSeverity, Look] = {
    AlertSeverity.CRITICAL: Look("Critical", _RED, "✕",
                                 "The GPU's memory or the GPU itself failed, or the driver asks "
                                 "for a reset: act before trusting its results."),
    AlertSeverity.WARNING: Look("Warning", _AMBER, "!",
                                "The GPU ran hot, slowed its clocks or has a repair pending."),
    AlertSeverity.INFO: Look("Info", _BLUE, "i", "Worth knowing; nothing to do."),
}
"""A GPU telemetry alert's or event's severity (`gpu.alerts`): the CLI's alert lines (in
capitals, `shout`), the GPU pane's banner and event log, and the report's telemetry events."""


def alert_look(severity: str) -> Look:
    """An alert severity's look; an unknown one reads as a warning, never as nothing."""
    return ALERT_LOOKS.get(severity, ALERT_LOOKS[AlertSeverity.WARNING])


def status_look(status: str) -> Look:
    """A verify or diff status's look; one without its own reads as its words, in grey."""
    return STATUS_LOOKS.get(status, Look(status.replace("_", " ").capitalize(), GREY, "?", ""))


def shout(word: str) -> str:
    """A state's word as a CLI verdict line leads with it: in capitals, so it stands out in a
    log and a grep for it finds the same word the app shows."""
    return word.upper()


_WEIGHTS = {HealthStatus.OK: Badge.WEIGHTS_OK, HealthStatus.WARNING: Badge.WEIGHTS_CHECK,
            HealthStatus.PROBLEM: Badge.WEIGHTS_CORRUPTED}


def weights_badge(status: str | None, loaded: bool | None) -> Badge:
    """The weights-health badge of a `Health.status` (None until judged); `loaded` is False
    once the file will not be loaded (refused, declined, failed, cancelled), None while it
    may still be."""
    if status:
        return _WEIGHTS.get(status, Badge.WEIGHTS_CORRUPTED)
    return Badge.WEIGHTS_PENDING if loaded is None else Badge.WEIGHTS_NOT_JUDGED
