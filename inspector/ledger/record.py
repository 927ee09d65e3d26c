"""The ledger record of one save, built from what was measured on disk and appended durably."""

from __future__ import annotations

import dataclasses
import os
import statistics
from pathlib import Path

from inspector.core.termtext import counted
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
    summary,
)

SIZE_JUMP = 1.5
"""A checkpoint this many times larger or smaller than the median of its predecessors is a
warning in its record (a dropped optimizer state, a model saved twice, a truncated write)."""
SIZE_HISTORY = 5
"""How many earlier verified saves of the same rank the size median is taken over."""


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


def size_warning(ledger: RunLedger | None, size: int, rank: int, writer: str) -> str | None:
    """A warning when `size` differs sharply from the median of recent verified saves of the
    same rank and writer."""
    if ledger is None:
        return None
    earlier = [s.size for s in ledger.saves if s.rank == rank and s.writer == writer
               and s.outcome == SaveOutcome.VERIFIED][-SIZE_HISTORY:]
    if not earlier:
        return None
    median = statistics.median(earlier)
    if median <= 0 or 1 / SIZE_JUMP <= size / median <= SIZE_JUMP:
        return None
    return (f"size {_mb(size)} is {size / median:.2f}x the median of the last "
            f"{counted(len(earlier), 'checkpoint')} ({_mb(median)})")


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n:,.0f} bytes"
