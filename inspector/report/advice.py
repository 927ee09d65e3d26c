"""What a report says to do, per file and on its first line: the worse of code and weights.

A report whose scan is clean but whose files are damaged or hold corrupted weights leads with
that, never with "safe" (`core.advice` words every verdict for its format).
"""

from __future__ import annotations

from inspector.core.advice import DAMAGED, Advice, advise
from inspector.core.vocabulary import HealthStatus, Verdict
from inspector.report.model import FileReport, Report

WORSE_THAN_CODE = (DAMAGED, HealthStatus.PROBLEM)
"""Words about the data that outrank a safe or suspicious scan in a report's headline."""


def file_advice(f: FileReport) -> Advice:
    """What to do about one file, following the worse of its code and weights verdicts."""
    scan = {"verdict": f.verdict, "format": f.file.format, "findings": f.scan.findings}
    return advise(scan, f.health.status if f.health else None)


def bad_data(report: Report) -> Advice | None:
    """The first file's advice whose data is bad, when it outranks the scan verdict."""
    if report.verdict not in (Verdict.SAFE, Verdict.SUSPICIOUS):
        return None
    return next((a for a in map(file_advice, report.files) if a.word in WORSE_THAN_CODE), None)


def headline_word(report: Report) -> str:
    """The report's one word: `damaged` or `problem` when the data is worse than the code."""
    worse = bad_data(report)
    return str(worse.word if worse else report.verdict)
