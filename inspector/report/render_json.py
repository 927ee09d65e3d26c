"""The report as JSON, the document `schema.json` describes."""

from __future__ import annotations

import json
import os
from importlib import resources

from inspector.core.atomic import write_text_atomic
from inspector.report.model import Report


def load_schema() -> dict:
    """The versioned JSON schema shipped with the package."""
    return json.loads(resources.files("inspector.report").joinpath("schema.json").read_text())


def write_json(report: Report, path: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Write the report atomically as indented UTF-8 JSON."""
    write_text_atomic(path, report.dumps(), overwrite=overwrite)
