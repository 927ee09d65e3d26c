"""Verification report model and its JSON / HTML / PDF renderers.

`export(session, path)` is the one call the GUI (File → Export report) and the CLI make: the
format comes from the file extension. Qt is imported only for HTML charts and PDF.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path

from inspector.core.progress import CancelToken, ProgressFn
from inspector.report.build import build_report
from inspector.report.model import FileEvidence, Report, SessionEvidence

WRITERS = {
    ".json": "inspector.report.render_json:write_json",
    ".html": "inspector.report.render_html:write_html",
    ".htm": "inspector.report.render_html:write_html",
    ".pdf": "inspector.report.render_pdf:write_pdf",
}

__all__ = ["WRITERS", "FileEvidence", "Report", "SessionEvidence", "UnknownReportFormat",
           "build_report", "export", "output_problem", "write_report", "writer_for"]


class UnknownReportFormat(ValueError):
    """The output's extension names no report format."""


def writer_for(path: str | os.PathLike[str]) -> Callable[..., None]:
    """The writer for the output's extension; UnknownReportFormat if there is none."""
    suffix = Path(path).suffix.lower()
    if suffix not in WRITERS:
        raise UnknownReportFormat(
            f"{Path(path).name}: unknown report format {suffix or '(none)'}; "
            f"use one of {', '.join(sorted(WRITERS))}")
    module, func = WRITERS[suffix].split(":")
    return getattr(importlib.import_module(module), func)


def output_problem(path: Path, force: bool) -> str | None:
    """Why a report cannot be written to `path` (format, existing file, missing folder), in
    one line, before any work is done; None when it can."""
    try:
        writer_for(path)
    except UnknownReportFormat as exc:
        return str(exc)
    if path.exists() and not force:
        return f"{path} exists; pass --force to overwrite it"
    if not path.absolute().parent.is_dir():
        return f"{path.parent}: no such folder"
    return None


def write_report(report: Report, path: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Write an already-built report in the format its extension names, atomically."""
    writer_for(path)(report, path, overwrite=overwrite)


def export(
    session: SessionEvidence,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> Report:
    """Build the report from the session's evidence and write it; returns the report.

    Collects the environment first when the session has none (a few seconds: torch's CUDA and
    cuDNN versions are asked of a subprocess). Call it off the UI thread.
    """
    writer = writer_for(path)
    if session.environment is None:
        from inspector.core.envinfo import collect

        session.environment = collect()
    report = build_report(session, progress=progress, cancel=cancel)
    writer(report, path, overwrite=overwrite)
    return report
