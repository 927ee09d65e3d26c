"""A checkpoint's save record, found in the journals above it and checked against the disk now,
as `run verify` checks it: what a signature's verdict on that path is held to
(`signing.ledger_binding`), so a signature believed for a path never outweighs its own run's
record of it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from inspector.core.progress import CancelToken
from inspector.run.checkpoints import CheckpointCheck, LedgerError, RunLedger, check_saves
from inspector.run.record_lookup import find_record


@dataclass(frozen=True)
class RecordCheck:
    """The record of a path and its check now (`check_saves`: bytes, sizes, and for a folder
    save the whole listing, `unwritten`), or why no record above it can be trusted (`error`:
    journals that disagree, a record on a line whose seal failed)."""

    ledger: RunLedger | None = None
    check: CheckpointCheck | None = None
    error: str | None = None


def check_record(path: str | os.PathLike[str],
                 cancel: CancelToken | None = None) -> RecordCheck | None:
    """The record of the checkpoint (or a file of the folder checkpoint) at `path`, checked
    against the disk; None when no journal above it records it."""
    try:
        found = find_record(path)
    except LedgerError as exc:
        return RecordCheck(error=exc.message)
    if found is None:
        return None
    ledger, record = found
    # `signed`: a journal line calling the checkpoint gone is weighed against the disk where
    # the journal is not authenticated, as `run verify --public-key` does
    [check] = check_saves(ledger, [record], cancel=cancel, signed=True)
    return RecordCheck(ledger, check)
