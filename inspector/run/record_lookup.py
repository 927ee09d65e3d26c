"""The save record of a checkpoint, found from the run journals in the folders above it: what
`verify CHECKPOINT` without a manifest, `report` and the guard's `Shadow(checkpoint=...)` check
a checkpoint against."""

from __future__ import annotations

import os
from pathlib import Path

from inspector.run import journal
from inspector.run.checkpoints import LedgerError, RunLedger, SaveRecord, read_ledger

PARENT_LEVELS = 3
"""How far up from a checkpoint `find_record` looks for a run journal."""


def find_record(path: str | os.PathLike[str]) -> tuple[RunLedger, SaveRecord] | None:
    """The newest save record of the checkpoint (or a file of the folder checkpoint) at
    `path`, from the journals in the folders above it (`PARENT_LEVELS`), all read: a journal
    copied in from another run cannot stand in for the file's own, so those recording it
    must expect the same bytes (and none may be unreadable), else LedgerError
    `records-disagree`; a journal whose only record of it is on a line not trusted (a broken
    seal, a line from another chain) is LedgerError `record-untrusted`. None when no journal
    records it."""
    target = Path(os.path.abspath(path))
    found: list[tuple[RunLedger, SaveRecord]] = []
    for folder in list(target.parents)[:PARENT_LEVELS]:
        if not journal.journal_path(folder).is_file():
            continue
        try:
            ledger = read_ledger(folder)
        except LedgerError as exc:
            raise LedgerError("records-disagree", f"{target}: {exc.message}; it may record "
                              "this checkpoint, so no record above it is taken alone") from exc
        record = _newest_naming(ledger.saves, folder, target)
        if record is not None:
            found.append((ledger, record))
        elif (doubted := _newest_naming(ledger.untrusted, folder, target)) is not None:
            raise LedgerError("record-untrusted", f"{target}: its record, {ledger.path}:"
                              f"{doubted.line}, is on a line not trusted ("
                              f"{_why(ledger, doubted.line)}); no verdict rests on it, check "
                              "the run with `run verify RUN_DIR`")
    if len({_expected_bytes(ledger, record) for ledger, record in found}) > 1:
        named = " and ".join(f"{ledger.path}:{record.line} ({record.label})"
                             for ledger, record in found)
        raise LedgerError("records-disagree", f"{target}: the journals above it record other "
                          f"bytes for it ({named}): one of them is another run's, copied in "
                          "or writing the same path; check it against its own run's "
                          "(`run verify RUN_DIR`)")
    return found[0] if found else None


def _newest_naming(records: tuple[SaveRecord, ...], folder: Path,
                   target: Path) -> SaveRecord | None:
    """The newest of `records` (read from the journal in `folder`) naming `target`."""
    for record in reversed(records):
        places = [record.path, *(f.path for f in record.files)]
        if any(Path(os.path.abspath(folder / p)) == target for p in places):
            return record
    return None


def _why(ledger: RunLedger, line: int) -> str:
    """What the journal reader found wrong with a line."""
    return "; ".join(f"{p.kind}: {p.detail}" for p in ledger.journal.unsound if p.line == line)


def _expected_bytes(ledger: RunLedger, record: SaveRecord) -> tuple[tuple[str, str | None], ...]:
    """Each file a record names, where it lies and its SHA-256: what two records must share."""
    return tuple(sorted((os.path.abspath(ledger.run_dir / f.path), f.sha256)
                        for f in record.files))
