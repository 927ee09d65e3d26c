"""Where a training run stands, from its journal: checkpoints saved and verified, guard alarms,
consistency outcomes, and whether a saved checkpoint changed on disk after it was saved.

What `telemetry --serve --run DIR` publishes under `ckpt_inspector_*`. Records are read by
their kind and named fields only, from the journal's sound lines (`Journal.sound`); a record
that lacks a field counts with that part unknown, and a save naming no file inside the run
folder is left out.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspector.integrity.hashing import sha256_file
from inspector.run import journal

LEDGER_SAVE = "ledger.save"
GUARD_ALARM = "guard.alarm"
CONSISTENCY = "consistency.result"


@dataclass(frozen=True)
class SavedCheckpoint:
    """One `ledger.save` record: what was written, and whether it verified when saved."""

    path: Path
    step: int | None
    time: float | None
    size: int | None
    sha256: str | None
    verified: bool | None


@dataclass(frozen=True)
class RunStatus:
    """One run folder's journal, summarised."""

    run: str
    folder: Path
    started: float | None = None
    saves: tuple[SavedCheckpoint, ...] = ()
    alarms: Mapping[tuple[str, str], int] = field(default_factory=dict)
    last_alarm: float | None = None
    consistency: Mapping[str, int] = field(default_factory=dict)
    journal_problems: int = 0
    error: str | None = None

    def last_save(self) -> SavedCheckpoint | None:
        """The newest save."""
        return self.saves[-1] if self.saves else None

    def last_verified(self) -> SavedCheckpoint | None:
        """The newest save that verified."""
        return next((s for s in reversed(self.saves) if s.verified), None)

    def unverified_seconds(self, now: float) -> float | None:
        """Seconds since the newest verified checkpoint (since the run began if none); None
        when the journal carries no time at all."""
        verified = self.last_verified()
        since = verified.time if verified and verified.time is not None else self.started
        return None if since is None else max(0.0, now - since)


def _number(value: Any) -> float | None:
    """A finite number a record holds, else None (JSON readers take `NaN`, `Infinity` and
    1e999 as floats, and no step, size or time is one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        return None
    return number if math.isfinite(number) else None


def run_file(folder: Path, raw: object) -> Path | None:
    """The file a journal record's `path` names in the run folder, or None when it names none
    inside it (absolute, `..`, not text): a record is never a way to read any other file."""
    if not isinstance(raw, str) or not raw or "\0" in raw:
        return None
    parts = raw.replace("\\", "/").split("/")
    if raw.startswith("/") or ".." in parts:
        return None
    return folder / Path(*parts)


def _saved(folder: Path, record: Mapping[str, Any]) -> SavedCheckpoint | None:
    """The save a record names, or None when it names no file inside the run folder (an
    absolute path or `..` would have the watch hash any file on the machine)."""
    path = run_file(folder, record.get("path"))
    if path is None:
        return None
    step, size = _number(record.get("step")), _number(record.get("size"))
    verified = record.get("verified")
    sha = record.get("sha256")
    return SavedCheckpoint(
        path=path,
        step=None if step is None else int(step),
        time=_number(record.get("time")),
        size=None if size is None else int(size),
        sha256=sha if isinstance(sha, str) else None,
        verified=verified if isinstance(verified, bool) else None,
    )


def read_run(folder: str | os.PathLike[str]) -> RunStatus:
    """Summarise RUN_DIR/journal.jsonl; an unreadable journal gives a status with `error`."""
    root = Path(folder)
    name = root.resolve().name
    try:
        got = journal.read(journal.journal_path(root))
    except OSError as exc:
        return RunStatus(name, root, error=f"cannot read its journal: {exc.strerror or exc}")
    # only lines whose own seal and place hold (`of_kind`): a forged line, or another run's
    # spliced in, would publish a fresh verified save that never was
    times = [t for e in got.sound if (t := _number(e.record.get("time"))) is not None]
    saves = [s for e in got.of_kind(LEDGER_SAVE) if (s := _saved(root, e.record))]
    alarms: Counter[tuple[str, str]] = Counter()
    alarm_times = []
    for entry in got.of_kind(GUARD_ALARM):
        rec = entry.record
        alarms[(str(rec.get("rule", "unknown")), str(rec.get("action", "unknown")))] += 1
        if (t := _number(rec.get("time"))) is not None:
            alarm_times.append(t)
    outcomes = Counter(str(e.record.get("outcome", "unknown")) for e in got.of_kind(CONSISTENCY))
    return RunStatus(
        run=name, folder=root, started=min(times) if times else None, saves=tuple(saves),
        alarms=dict(alarms), last_alarm=max(alarm_times) if alarm_times else None,
        consistency=dict(outcomes), journal_problems=len(got.problems),
    )


class ChangeWatch:
    """Whether saved checkpoints still hold the bytes the ledger recorded.

    A file is hashed again only when its size or modification time moved since the last look,
    so watching many large checkpoints costs one stat each per refresh.
    """

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[int, int, str]] = {}

    def changed(self, save: SavedCheckpoint) -> bool | None:
        """True when the file's SHA-256 differs from the recorded one; None when it is gone
        (retention deletes old checkpoints) or the ledger recorded no hash."""
        if save.sha256 is None:
            return None
        try:
            st = os.stat(save.path)
        except OSError:
            return None
        if save.size is not None and st.st_size != save.size:
            return True
        key = (st.st_size, st.st_mtime_ns)
        cached = self._seen.get(save.path)
        if cached is None or cached[:2] != key:
            try:
                digest = sha256_file(save.path)
            except OSError:
                return None
            cached = self._seen[save.path] = (*key, digest)
        return cached[2] != save.sha256.lower()
