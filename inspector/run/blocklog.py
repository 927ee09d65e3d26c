"""Per-step JSON-lines files written in blocks: cheap enough for every step of every rank.

Not the run journal: lines are buffered and flushed every `flush_every` lines, fsync'd only at
`close`, so a crash can cost the last block and cut its last line short (readers report such a
line, never parse it as a record). The journal holds one record naming each file. No torch here:
the CLI and the app read these files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class BlockWriter:
    """Appends JSON lines to one file in blocks; `close` flushes and fsyncs."""

    def __init__(self, path: Path, flush_every: int = 64) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh = open(path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self._flush_every = max(1, flush_every)
        self._pending = 0

    def write(self, obj: dict[str, Any]) -> None:
        """Write one line (flushed with its block)."""
        self._fh.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
        self._pending += 1
        if self._pending >= self._flush_every:
            self._fh.flush()
            self._pending = 0

    def flush(self) -> None:
        """Hand the buffered lines to the OS now (before a halt)."""
        self._fh.flush()
        self._pending = 0

    def close(self) -> None:
        """Flush, fsync and close (again: nothing)."""
        if self._fh.closed:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()


def read_lines(path: str | os.PathLike[str]) -> tuple[list[dict], list[str]]:
    """Every JSON object line of a block file, and one problem per line that is not one."""
    records, problems = [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                obj = None  # not JSON, or nested deeper than any record this project writes
            if isinstance(obj, dict):
                records.append(obj)
            else:
                end = "" if line.endswith("\n") else " (cut short: the run ended mid-write)"
                problems.append(f"{path}:{number}: not a record{end}")
    return records, problems
