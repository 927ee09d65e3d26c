"""Lines both conversion views print (one file, a folder of shards)."""

from __future__ import annotations

from inspector.checkpoint.results import ConversionResult
from inspector.core.termtext import escape


def skipped_lines(report: ConversionResult) -> list[str]:
    """A `skipped` line per tensor left out: checked here against the input's dtypes, or,
    where the conversion was not, the loader's word."""
    whose = "" if report.unchecked_reason is None else " (as reported by the jailed loader)"
    return [f"skipped   {escape(str(s.get('key')))}: {escape(str(s.get('reason')))}{whose}"
            for s in report.tensors_skipped if isinstance(s, dict)]
