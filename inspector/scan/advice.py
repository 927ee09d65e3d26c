"""The one word and the "What to do" of a file, following the worse of its two verdicts.

A file has a code-safety verdict (the static scan) and a weights-health status (the jailed
load). What a person must do follows the worse of them: a file whose code is safe but whose
weights hold NaN or a flipped exponent bit is never told "load it", and a file whose own
checksums or sizes do not hold is `damaged` (corruption), never the code-risk word
`suspicious`. The wording names the file's format: a safetensors file holds no pickle at all,
so it gets no pickle or `torch.load` advice. The CLI, the report and the GUI read this module,
so every view says the same thing.

Which findings mean damaged data (`INTEGRITY_CODES`): a CRC mismatch, a record the pickle
needs but the archive lacks, a record shorter than its storage, tensor data beyond the end of
a safetensors file, or a zip cut short before its end record is corruption: every output names
it as such (with the member and, for a CRC, both checksums in the message) and never turns it
into a question about which globals to allow.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.core.badges import LOOKS, Badge
from inspector.core.vocabulary import DAMAGED, HealthStatus, Severity, Verdict
from inspector.layout.torchscript import CODE_ARCHIVES
from inspector.scan.result import Finding, ScanResult

SAFETENSORS = "safetensors"

INTEGRITY_CODES = frozenset({
    "zip-crc-mismatch", "zip-missing-record", "zip-member-unreadable", "storage-size-mismatch",
    "storage-record-larger", "safetensors-bounds", "zip-truncated",
})


def integrity_findings(scan: ScanResult | None) -> list[Finding]:
    """The scan's findings that mean damaged data, in the scan's order."""
    return [f for f in (scan.findings if scan else ()) if f.code in INTEGRITY_CODES]


def describe(finding: Finding) -> str:
    """One line: the finding's message and the member it concerns."""
    where = f" [{finding.member}]" if finding.member else ""
    return f"{finding.code}: {finding.message}{where}"


@dataclass(frozen=True)
class Advice:
    """The word to show, a one-line headline and what the user should do; `case` names which
    of the cases below it is, so a view can word it its own way (the GUI names its menus)."""

    word: str
    headline: str
    action: str
    case: str
    meaning: str = ""
    """What the verdict means for this format, where its module words it (GGUF, ONNX)."""


GET_IT_AGAIN = ("Get it again from its source and compare its SHA-256 with the publisher's; "
                "if a copy on your own storage keeps changing, check the disk.")

_DAMAGED = Advice(DAMAGED, "Damaged — the file's data is corrupted (not a question of code)",
                  "Do not use it. " + GET_IT_AGAIN, case="damaged")
_DANGEROUS = Advice(Verdict.DANGEROUS, "Dangerous — do not load this file",
                    "Do not load it (not with torch.load, pickle or joblib). Get it again from "
                    "its source and verify it against the publisher's checksum; ask for a "
                    "safetensors version.",
                    case="dangerous")
_UNREADABLE = Advice(Verdict.ERROR, "Could not be read as a checkpoint",
                     "Check that the download finished (compare its size and SHA-256 with the "
                     "source) and that it is a PyTorch, safetensors or NumPy file.",
                     case="unreadable")
_CODE_ARCHIVE = Advice(Verdict.SUSPICIOUS, "Suspicious — it carries code that runs when loaded",
                       "Read its code before loading it anywhere; if you only need the weights, "
                       "convert it to safetensors.",
                       case="code_archive")
_SUSPICIOUS = Advice(Verdict.SUSPICIOUS, "Suspicious — your decision is needed",
                     "Allow exactly the globals you recognise for this one load (--allow-global "
                     "MODULE.NAME), never weights_only=False; then convert it to safetensors.",
                     case="suspicious")
_SAFE_PICKLE = Advice(Verdict.SAFE, "Safe — no code in the pickle",
                      "Load it with torch.load(path, weights_only=True); convert it to "
                      "safetensors to drop pickle altogether, and record its SHA-256 in a "
                      "manifest.",
                      case="safe_pickle")
_SAFE_SAFETENSORS = Advice(Verdict.SAFE, "Safe — a safetensors file holds no code",
                           "Load it with safetensors.torch.load_file(path); record its SHA-256 "
                           "in a manifest so later copies can be checked.",
                           case="safe_safetensors")
_BAD_WEIGHTS = Advice(HealthStatus.PROBLEM, "Weights are corrupted or diverged",
                      "Do not use these weights. Diff against an earlier good copy to see "
                      "whether single bits flipped (memory or storage) or training diverged, "
                      "and restore that copy or get the file again from its source.",
                      case="bad_weights")


def is_damaged(scan: ScanResult | None) -> bool:
    """Whether the scan says the file's own checksums, sizes or structure do not hold."""
    return bool(integrity_findings(scan))


def display_word(scan: ScanResult | None) -> str:
    """The code-safety word a person reads: `damaged` for corruption, else the verdict."""
    verdict = scan.verdict if scan else Verdict.ERROR
    if verdict in (Verdict.SUSPICIOUS, Verdict.ERROR) and is_damaged(scan):
        return DAMAGED
    return str(verdict)


@dataclass(frozen=True)
class EntryLine:
    """One folder entry's line, as `scan DIR` prints it and the app's Folder pane shows it:
    its state (a code-safety `Badge`, or `skipped`) and that state's word, its path, what it
    is (`detail`: a skipped entry's reason, an error, or its format and whether weights_only
    loads it) and the first reason it is flagged (`why`, empty for none)."""

    state: str
    word: str
    path: str
    detail: str
    why: str


def entry_line(scan: ScanResult) -> EntryLine:
    """The line of one scanned entry (every entry of a folder gets one, skipped ones too)."""
    if scan.verdict == Verdict.SKIPPED:
        state, word = Verdict.SKIPPED.value, "Skipped"
        detail = f"not a checkpoint ({scan.error or ''})"
    else:
        state = code_safety_badge(scan)
        word = LOOKS[state].word
        loads = "loads" if scan.weights_only_ok else "refused"
        detail = scan.error or f"{scan.format}; weights_only: {loads}"
    flags = [f"{g.import_name}: {g.reason}" for g in scan.globals
             if g.severity != Severity.SAFE]
    flags += [f"{f.code}: {f.message}" for f in scan.findings
              if f.severity != Severity.INFO]
    return EntryLine(str(state), word, scan.path, detail, flags[0] if flags else "")


def code_safety_badge(scan: ScanResult | None, health: str | None = None) -> Badge:
    """The code-safety badge every view shows (`core.badges.LOOKS`): damage before danger as
    in `advise`, and `no_code`, not `safe`, beside corrupted weights (`health` a problem)."""
    if scan is None:
        return Badge.SCANNING
    verdict = scan.verdict
    if display_word(scan) == DAMAGED:
        return Badge.DAMAGED
    if verdict == Verdict.DANGEROUS:
        return Badge.DANGEROUS
    if verdict == Verdict.ERROR:
        return Badge.UNREADABLE
    if verdict == Verdict.SUSPICIOUS:
        return Badge.SUSPICIOUS
    return Badge.NO_CODE if health == HealthStatus.PROBLEM else Badge.SAFE


def file_badge(scan: ScanResult | None, health: str | None = None) -> Badge:
    """A file's one state in a list of files, the worse of its two badges: dangerous, damaged
    bytes, corrupted weights, suspicious, unreadable, weights worth a look, then safe."""
    code = code_safety_badge(scan, health)
    if code in (Badge.DANGEROUS, Badge.DAMAGED, Badge.SCANNING):
        return code
    if health == HealthStatus.PROBLEM:
        return Badge.WEIGHTS_CORRUPTED
    if code != Badge.SAFE:
        return code
    return Badge.WEIGHTS_CHECK if health == HealthStatus.WARNING else Badge.SAFE


def advise(scan: ScanResult | None, health: str | None = None) -> Advice:
    """The advice for a file: damage and danger first, then bad weights, then the scan."""
    verdict = scan.verdict if scan else None
    fmt = scan.format if scan else None
    word = display_word(scan)
    if word == DAMAGED:
        return _DAMAGED
    if verdict == Verdict.DANGEROUS:
        return _DANGEROUS
    if verdict == Verdict.ERROR:
        return _UNREADABLE
    if health == HealthStatus.PROBLEM:
        return _BAD_WEIGHTS
    own = _format_advice(fmt, verdict)
    if own is not None:
        return own
    if verdict == Verdict.SUSPICIOUS:
        return _CODE_ARCHIVE if fmt in CODE_ARCHIVES else _SUSPICIOUS
    return _SAFE_SAFETENSORS if fmt == SAFETENSORS else _SAFE_PICKLE


def _format_advice(fmt: str | None, verdict: str | None) -> Advice | None:
    """A format module's own advice for a safe or suspicious file (`FormatSpec.safe_advice`):
    a GGUF or ONNX file holds no pickle, so the pickle advice would mislead."""
    from inspector.formats import spec_of

    spec = spec_of(fmt) if fmt else None
    if spec is None or verdict not in (Verdict.SAFE, Verdict.SUSPICIOUS):
        return None
    own = spec.safe_advice if verdict == Verdict.SAFE else spec.suspicious_advice
    if own is None:
        return None
    return Advice(Verdict(verdict), own.headline, own.action, case=f"{verdict}:{spec.format}",
                  meaning=own.meaning)
