"""What the training guard recorded in a run folder, read without torch: the per-step loss and
gradient norm of each rank, the alarms with their attribution, and the data order per rank.

The guard (`inspector.guard`, in the training process) writes per-step files in blocks
(`run.blocklog`): `RUN_DIR/guard/rank-NNNNN.jsonl` (`{"s": STEP, "loss": L, "gn": G, "a":
RULE | None}`, non-finite numbers as "nan"/"inf") and the order ledger (`run.order_log`); the
journal names each file once (`guard.metrics`, `order.ledger`) and holds every `guard.alarm`.
The GUI's Run pane and `report RUN_DIR` read a run through `read_run_metrics`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspector.core.strict_json import NON_FINITE, strict
from inspector.core.termtext import counted
from inspector.run import journal
from inspector.run.blocklog import read_lines
from inspector.run.order_log import LEDGER_KIND, read_ledger
from inspector.run.status import GUARD_ALARM, run_file

METRICS_KIND = "guard.metrics"
METRICS_DIR = "guard"
ORDER_RULES = frozenset({"sample-duplicated", "sample-skipped", "resume-order",
                         "worker-seed-shared"})
"""The alarms the data-order ledger raises (the rest are the numerics guard's)."""
JOURNAL_FIELDS = frozenset({"kind", "seq", "prev", "seal", "mac"})
"""Fields the journal adds to every record (its chain), not the alarm's own."""
NO_DEVICE_STATE = "no GPU health recorded (the guard attaches NVML state to transient alarms)"


def metrics_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """Where one rank's per-step metrics live in a run folder."""
    return Path(run_dir) / METRICS_DIR / f"rank-{rank:05d}.jsonl"


def _number(value: Any) -> float:
    """A metrics or alarm value as a float: "nan"/"inf" strings back to floats, else NaN."""
    if isinstance(value, str):
        return NON_FINITE.get(value, math.nan)
    return float(value) if isinstance(value, int | float) else math.nan


@dataclass(frozen=True)
class Alarm:
    """One `guard.alarm` record: the rule broken at a step, the action and what it was blamed on."""

    line: int
    step: int | None
    rank: int | None
    rule: str
    value: Any
    threshold: Any
    action: str
    attribution: str | None
    scene: str | None
    params: tuple[str, ...]
    time: float | None
    device: Mapping[str, Any] | None
    """NVML health at the alarm (`{"gpus": [...], "xids": [...]}` or `{"note": ...}`); None
    when the guard attached none (it does for transient alarms only)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the record holds (worker, samples, epoch, rerun, worst)."""

    @classmethod
    def from_entry(cls, entry: journal.JournalEntry) -> Alarm:
        """Read one journal entry; missing fields count as unknown."""
        r = dict(entry.record)
        known = ("step", "rank", "rule", "value", "threshold", "action", "attribution",
                 "scene", "params", "time", "device", "host")
        step, rank = r.get("step"), r.get("rank")
        params = r.get("params") if isinstance(r.get("params"), list) else []
        device = r.get("device") if isinstance(r.get("device"), dict) else None
        return cls(entry.line, step if isinstance(step, int) else None,
                   rank if isinstance(rank, int) else None, str(r.get("rule", "unknown")),
                   r.get("value"), r.get("threshold"), str(r.get("action", "unknown")),
                   r.get("attribution"), r.get("scene"), tuple(str(p) for p in params),
                   r.get("time") if isinstance(r.get("time"), int | float) else None, device,
                   {k: v for k, v in r.items() if k not in known and k not in JOURNAL_FIELDS})

    @property
    def is_order(self) -> bool:
        """Raised by the data-order ledger rather than the numerics guard."""
        return self.rule in ORDER_RULES

    def device_text(self) -> str:
        """The NVML state recorded with the alarm, in one line."""
        if self.device is None:
            return NO_DEVICE_STATE
        if "note" in self.device:
            return str(self.device["note"])
        parts = []
        for gpu in self.device.get("gpus", []):
            ecc = gpu.get("ecc_uncorrected_volatile")
            parts.append(f"GPU {gpu.get('index')} {gpu.get('name', '')}: uncorrected ECC "
                         f"{'n/a' if ecc is None else ecc}, retired pending "
                         f"{gpu.get('retired_pending', 'n/a')}, remap failure "
                         f"{gpu.get('remapped_failure', 'n/a')}")
        xids = self.device.get("xids", [])
        parts.append(counted(len(xids), "XID") + (": " + ", ".join(str(x.get("xid")) for x in xids)
                                              if xids else ""))
        return "; ".join(parts)

    def label(self) -> str:
        """One line: step, rule, value against threshold, action, attribution, scene."""
        where = f"step {self.step}" if self.step is not None else "unknown step"
        rank = f" (rank {self.rank})" if self.rank not in (None, 0) else ""
        against = f", threshold {_short(self.threshold)}" if self.threshold is not None else ""
        blame = f", {self.attribution}" if self.attribution else ""
        scene = f", scene {self.scene}" if self.scene else ""
        return (f"{where}{rank}: {self.rule} ({_short(self.value)}{against}), "
                f"{self.action}{blame}{scene}")

    def to_json(self) -> dict[str, Any]:
        """The report's `alarms` entry (strict JSON: non-finite numbers as strings)."""
        return strict({"line": self.line, "step": self.step, "rank": self.rank,
                       "rule": self.rule, "value": self.value, "threshold": self.threshold,
                       "action": self.action, "attribution": self.attribution,
                       "scene": self.scene, "params": list(self.params), "time": self.time,
                       "device": dict(self.device) if self.device is not None else None,
                       "device_text": self.device_text()})


def _short(value: Any) -> str:
    """A value for a one-line label: numbers to 4 significant digits, lists cut short."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value[:4]) + (", …]" if len(value) > 4 else "]")
    return str(value)


@dataclass(frozen=True)
class StepSeries:
    """One rank's per-step loss and gradient norm, in step order (a re-recorded step: the later)."""

    rank: int
    path: Path
    steps: tuple[int, ...]
    loss: tuple[float, ...]
    grad_norm: tuple[float, ...]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankOrder:
    """One rank's data order: steps recorded, each worker's seeds, the alarms on its order."""

    rank: int
    path: Path
    steps: int
    first_step: int | None
    last_step: int | None
    sessions: int
    seeds: tuple[tuple[int, int, Mapping[str, Any]], ...]
    """(epoch, worker, seeds) as recorded, one per worker per epoch."""
    alarms: tuple[Alarm, ...]
    problems: tuple[str, ...] = ()

    def count(self, rule: str) -> int:
        """How many alarms of one rule this rank's order raised."""
        return sum(a.rule == rule for a in self.alarms)


@dataclass(frozen=True)
class RunMetrics:
    """Everything the guard recorded in one run folder."""

    run_dir: Path
    series: tuple[StepSeries, ...] = ()
    alarms: tuple[Alarm, ...] = ()
    order: tuple[RankOrder, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def recorded(self) -> bool:
        """The guard wrote something into this run."""
        return bool(self.series or self.alarms or self.order)


def _named_files(read: journal.Journal, kind: str, run_dir: Path) -> dict[int, Path]:
    """rank -> the file the journal's sound records of `kind` name (the last one per rank),
    inside the run folder: a forged or spliced line names no file of this run."""
    out: dict[int, Path] = {}
    for entry in read.of_kind(kind):
        path, rank = run_file(run_dir, entry.record.get("path")), entry.record.get("rank", 0)
        if path is not None and isinstance(rank, int):
            out[rank] = path
    return out


def read_series(path: Path, rank: int) -> StepSeries:
    """One rank's metrics file; unreadable lines are problems, never values."""
    records, problems = read_lines(path)
    by_step: dict[int, tuple[float, float]] = {}
    for obj in records:
        step = obj.get("s")
        if isinstance(step, int):
            by_step[step] = (_number(obj.get("loss")), _number(obj.get("gn")))
        else:
            problems.append(f"{path}: a metrics line lacks its step: {obj!r:.80}")
    steps = sorted(by_step)
    return StepSeries(rank, path, tuple(steps), tuple(by_step[s][0] for s in steps),
                      tuple(by_step[s][1] for s in steps), tuple(problems))


def _rank_order(path: Path, rank: int, alarms: tuple[Alarm, ...]) -> RankOrder:
    read = read_ledger(path)
    sessions = {s.session for s in read.steps}
    seeds = tuple((int(s.get("e", 0)), int(s.get("w", -1)), dict(s.get("seeds") or {}))
                  for s in read.seeds)
    return RankOrder(rank, path, len(read.steps), read.steps[0].step if read.steps else None,
                     read.steps[-1].step if read.steps else None, len(sessions), seeds,
                     tuple(a for a in alarms if a.is_order and (a.rank or 0) == rank),
                     tuple(read.problems))


def read_alarms(read: journal.Journal) -> tuple[Alarm, ...]:
    """Every `guard.alarm` record on a sound line of a journal, in journal order (a forged
    line, or another run's, raised no alarm here)."""
    return tuple(Alarm.from_entry(e) for e in read.of_kind(GUARD_ALARM))


def read_run_metrics(read: journal.Journal, run_dir: str | os.PathLike[str]) -> RunMetrics:
    """The guard's records in a run: from its journal (already read) and the files it names."""
    run_dir = Path(run_dir)
    alarms = read_alarms(read)
    problems: list[str] = []
    series, order = [], []
    for rank, path in sorted(_named_files(read, METRICS_KIND, run_dir).items()):
        if path.is_file():
            series.append(read_series(path, rank))
        else:
            problems.append(f"{path}: the guard's metrics file is missing")
    for rank, path in sorted(_named_files(read, LEDGER_KIND, run_dir).items()):
        if path.is_file():
            order.append(_rank_order(path, rank, alarms))
        else:
            problems.append(f"{path}: the data-order ledger is missing")
    for part in (*series, *order):
        problems += part.problems
    return RunMetrics(run_dir, tuple(series), alarms, tuple(order), tuple(problems))
