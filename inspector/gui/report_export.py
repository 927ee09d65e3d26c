"""File → Export Report: the session's evidence handed to the report package, off the UI thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspector.core.progress import CancelToken
from inspector.gui.document import FileDocument
from inspector.gui.jobs import EmitFn, JobFn

REPORT_FILTER = "HTML report (*.html);;PDF report (*.pdf);;JSON report (*.json)"


def evidence(docs: list[FileDocument], consistency: dict[str, Any] | None = None,
             consistency_file: str | None = None, telemetry=None, telemetry_source: str = "nvml"):
    """A report.SessionEvidence of what the window learned about each open file."""
    from inspector.report import FileEvidence, SessionEvidence

    files = [
        FileEvidence(
            path=str(d.path), scan=d.scan, inspect=d.inspect, verify=d.verify,
            manifest=(d.verify or {}).get("manifest"), conversion=d.conversion,
            consistency=consistency if consistency_file == str(d.path) else None,
        )
        for d in docs
    ]
    return SessionEvidence(files=files, telemetry=telemetry, telemetry_source=telemetry_source,
                           command="ckpt-inspector (desktop app)")


def export_fn(session, path: Path) -> JobFn:
    """A job that builds the report and writes it; the save dialog already asked to replace."""

    def run(emit: EmitFn, cancel: CancelToken) -> str:
        from inspector.report import export

        def progress(done: int, total: int) -> None:
            emit({"type": "progress", "stage": "report", "done": done, "total": total})

        export(session, path, overwrite=True, progress=progress, cancel=cancel)
        return str(path)

    return run
