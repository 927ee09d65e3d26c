"""The ledger record of one save, built from what was measured on disk and appended durably."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from inspector.core.vocabulary import SaveOutcome
from inspector.integrity.manifest import FileEntry
from inspector.ledger.identity import current_rank, host, now
from inspector.ledger.signing import sign_save
from inspector.run import journal
from inspector.run.checkpoints import (
    SAVE_KIND,
    RunLedger,
    SaveRecord,
    read_ledger,
    size_warning,
    summary,
)


def relative(path: Path, run_dir: Path) -> str:
    """`path` relative to the run folder, with `/` separators."""
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(run_dir))).as_posix()


def prior_ledger(run_dir: Path) -> RunLedger | None:
    """The run's ledger so far, or None before its first record."""
    return read_ledger(run_dir) if journal.journal_path(run_dir).is_file() else None


def append_save(
    run_dir: Path, target: Path, *, layout: str, fmt: str | None, writer: str,
    files: list[FileEntry], outcome: SaveOutcome, detail: str | None,
    step: int | None, epoch: float | None, rank: int | None = None,
) -> SaveRecord:
    """Append the `ledger.save` record of the checkpoint now at `target` (and sign it when a
    signing key is configured, `ledger.signing`); return it."""
    rank = current_rank() if rank is None else rank
    size, sha256 = summary(layout, files)
    warning = size_warning(prior_ledger(run_dir), size, rank, writer)
    record = SaveRecord(
        path=relative(target, run_dir), size=size, sha256=sha256,
        files=tuple(files), outcome=outcome, step=step, epoch=epoch, time=now(), host=host(),
        rank=rank, layout=layout, format=fmt, writer=writer,
        verified=outcome == SaveOutcome.VERIFIED,
        warnings=(warning,) if warning else (), detail=detail,
    )
    path = journal.journal_path(run_dir)
    entry = journal.append(path, SAVE_KIND, record.to_fields())
    chain = entry.record.get("chain") or journal.chain_id(path)  # the first line: its own hash
    record = dataclasses.replace(record, seq=entry.seq, chain=chain)
    sign_save(run_dir, target, record, chain)  # the signature names the save's line and run
    return record
