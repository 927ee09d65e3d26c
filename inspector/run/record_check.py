"""A checkpoint's save record, found in the journals above it and checked against the disk now,
as `run verify` checks it: what a signature's verdict on that path is held to
(`signing.ledger_binding`), so a signature believed for a path never outweighs its own run's
record of it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inspector.core.progress import CancelToken
from inspector.run import journal
from inspector.run.checkpoints import (
    CheckpointCheck,
    LedgerError,
    RunLedger,
    check_saves,
    read_ledger,
)
from inspector.run.record_lookup import PARENT_LEVELS, find_record


@dataclass(frozen=True)
class RecordCheck:
    """The record of a path and its check now (`check_saves`: bytes, sizes, and for a folder
    save the whole listing, `unwritten`), or why no record above it can be trusted (`error`:
    journals that disagree, a record on a line whose seal failed)."""

    ledger: RunLedger | None = None
    check: CheckpointCheck | None = None
    error: str | None = None
    around: tuple[RunLedger, ...] = ()
    """With no record: the journals above the path, none recording it (a ledger's signature
    there that names a save is judged against them: `signing.saves.lost_save`)."""


def check_record(path: str | os.PathLike[str],
                 cancel: CancelToken | None = None) -> RecordCheck | None:
    """The record of the checkpoint (or a file of the folder checkpoint) at `path`, checked
    against the disk; with none, the journals above it (`around`); None when there are none."""
    try:
        found = find_record(path)
        if found is None:
            around = tuple(read_ledger(folder) for folder in _journal_folders(path))
            return RecordCheck(around=around) if around else None
    except LedgerError as exc:
        return RecordCheck(error=exc.message)
    ledger, record = found
    # `signed`: a journal line calling the checkpoint gone is weighed against the disk where
    # the journal is not authenticated, as `run verify --public-key` does
    [check] = check_saves(ledger, [record], cancel=cancel, signed=True)
    return RecordCheck(ledger, check)


def _journal_folders(path: str | os.PathLike[str]) -> list[Path]:
    """The folders above `path` holding a run journal, as far as `find_record` looks."""
    above = list(Path(os.path.abspath(path)).parents)[:PARENT_LEVELS]
    return [folder for folder in above if journal.journal_path(folder).is_file()]
