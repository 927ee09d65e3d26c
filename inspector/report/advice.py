"""What a report says to do, per file and on its first line: the worse of code and weights.

A report whose scan is clean but whose files are damaged or hold corrupted weights leads with
that, never with "safe" (`scan.advice` words every verdict for its format).
"""

from __future__ import annotations

from inspector.core.badges import Badge, weights_badge
from inspector.core.vocabulary import HealthStatus, Verdict
from inspector.report.model import FileReport, Report
from inspector.scan.advice import DAMAGED, Advice, advise, code_safety_badge
from inspector.scan.result import Finding, ScanResult

WORSE_THAN_CODE = (DAMAGED, HealthStatus.PROBLEM)
"""Words about the data that outrank a safe or suspicious scan in a report's headline."""


def _scan_of(f: FileReport) -> ScanResult:
    """The parts of a file's scan the advice reads, from its report."""
    return ScanResult(f.file.path, format=f.file.format or "unknown", verdict=f.verdict,
                      findings=[Finding.from_json(x) for x in f.scan.findings])


def file_advice(f: FileReport) -> Advice:
    """What to do about one file, following the worse of its code and weights verdicts."""
    return advise(_scan_of(f), f.health.status if f.health else None)


def code_safety(f: FileReport) -> Badge:
    """A file's code-safety badge, the one the app shows (`scan.advice.code_safety_badge`)."""
    return code_safety_badge(_scan_of(f), f.health.status if f.health else None)


def weights_health(f: FileReport) -> Badge:
    """A file's weights-health badge, the one the app shows; a report is written after every
    load ended, so an unjudged file reads "not judged", never "not judged yet"."""
    return weights_badge(f.health.status if f.health else None, False)


CHECKS_FAILED = Advice(
    HealthStatus.PROBLEM,
    "Checks failed — the files carry no code-running imports, but checks beyond them failed",
    "Read the problems below before using these checkpoints: a training guard's alarm, a "
    "checkpoint changed after it was saved, or GPU errors can mean the weights are bad.",
    case="checks-failed")
"""A clean scan with a failed check (a manifest or signature, a training run, GPU telemetry)."""


def bad_data(report: Report) -> Advice | None:
    """What outranks a safe, suspicious or skipped scan on the report's first line: the first
    file whose data is bad, else any check that failed (a file's manifest or signature, a run,
    the telemetry): a failed report never heads as safe."""
    if report.verdict not in (Verdict.SAFE, Verdict.SUSPICIOUS, Verdict.SKIPPED):
        return None
    worse = next((a for a in map(file_advice, report.files) if a.word in WORSE_THAN_CODE), None)
    return worse or (CHECKS_FAILED if report.problems else None)


def headline_word(report: Report) -> str:
    """The report's one word: `damaged` or `problem` when the data or the checks are worse than
    the code."""
    worse = bad_data(report)
    return str(worse.word if worse else report.verdict)
