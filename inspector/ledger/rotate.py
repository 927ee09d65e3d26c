"""Keep N checkpoints without ever losing the last good one.

Rotation runs only after the new checkpoint verified and its record is in the ledger, and it
deletes only older checkpoints of the same series (rank, folder and layout). Each deletion is
recorded (`ledger.rotate`, naming the save's `seq`) before the bytes go, so a process killed
in between leaves a stray file the ledger already calls removed, never a record that points at
nothing without saying why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from pathlib import Path

from inspector.core.vocabulary import SaveOutcome
from inspector.ledger.identity import now
from inspector.run import journal
from inspector.run.checkpoints import ROTATE_KIND, RunLedger, SaveRecord, latest_valid, read_ledger


def rotate(run_dir: Path, new: SaveRecord, keep: int) -> list[SaveRecord]:
    """Delete the series' older checkpoints beyond the newest `keep` (the new one counts)."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    if new.outcome != SaveOutcome.VERIFIED:
        return []
    ledger = read_ledger(run_dir)
    folder = new.path.rpartition("/")[0]
    series = [s for s in ledger.live() if s.seq < new.seq and s.rank == new.rank
              and s.layout == new.layout and s.path != new.path
              and s.path.rpartition("/")[0] == folder]
    doomed = series[: max(0, len(series) - (keep - 1))]
    for record in doomed:
        _remove(ledger, record, f"keep={keep}")
    return doomed


def remove_checkpoint(path: str | os.PathLike[str], run_dir: str | os.PathLike[str]) -> bool:
    """Delete a ledgered checkpoint on a trainer's request, unless it is the last valid one."""
    run = Path(run_dir)
    ledger = read_ledger(run) if journal.journal_path(run).is_file() else None
    target = Path(os.path.abspath(path))
    records = [] if ledger is None else [
        s for s in ledger.live() if Path(os.path.abspath(ledger.resolve(s))) == target]
    if ledger is not None and records:
        latest = latest_valid(run)
        if latest is not None and latest.path == records[-1].path:
            # a trainer's "remove the old one" must not take the only good one
            warnings.warn(f"{target}: kept, not deleted: it is the run's last valid "
                          "checkpoint (`ckpt-inspector run verify` says why the newer ones "
                          "are not)", stacklevel=2)
            return False
        for record in records:
            _remove(ledger, record, "removed by the trainer")
    else:
        _delete(target)
    return True


def note_removed(run_dir: Path, reason: str) -> list[SaveRecord]:
    """Record the ledgered checkpoints that someone else (a trainer's rotation) deleted."""
    if not journal.journal_path(run_dir).is_file():
        return []
    ledger = read_ledger(run_dir)
    gone = [s for s in ledger.live() if not os.path.lexists(ledger.resolve(s))]
    for record in gone:
        _append_rotate(ledger, record, reason)
    return gone


def _remove(ledger: RunLedger, record: SaveRecord, reason: str) -> None:
    _append_rotate(ledger, record, reason)
    _delete(ledger.resolve(record))


def _append_rotate(ledger: RunLedger, record: SaveRecord, reason: str) -> None:
    journal.append(ledger.path, ROTATE_KIND, {
        "save_seq": record.seq, "path": record.path, "step": record.step,
        "reason": reason, "time": now(),
    })


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
