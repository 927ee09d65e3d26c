"""What the training guard recorded in a run, as the Run pane shows it: chart curves and marks,
alarm rows, data-order rows and the GPU-telemetry line.

Plain Python over `run.metrics` and `run.checkpoints` (no Qt widgets, no torch); the pane
only draws what these return.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from inspector.core.termtext import counted
from inspector.gui.widgets.event_marks import Mark
from inspector.run.checkpoints import RunLedger
from inspector.run.metrics import Alarm, RunMetrics

Signal = Literal["loss", "grad_norm"]
ALARM_COLUMNS = ("Step", "Rank", "Rule", "Value", "Threshold", "Action", "Attribution",
                 "First non-finite parameters", "Scene", "GPU state")
ORDER_COLUMNS = ("Rank", "Steps recorded", "Steps", "Sessions", "Worker seeds (torch)",
                 "Duplicated", "Wrong after resume", "Shared seeds", "Ledger")
GUARD_DOC = Path(__file__).resolve().parents[3] / "docs" / "guard.md"
"""The guard's guide in a source checkout (an installed package has no docs/ folder)."""
NO_TELEMETRY = ("GPU telemetry: none recorded; the guard attaches NVML state to transient "
                "alarms only, when a GPU is there.")


@dataclass(frozen=True)
class Curve:
    """One rank's values of one signal over steps; non-finite values are NaN (gaps)."""

    rank: int
    steps: np.ndarray
    values: np.ndarray


def curves(metrics: RunMetrics, signal: Signal) -> list[Curve]:
    """Each rank's curve of the loss or the gradient norm."""
    out = []
    for series in metrics.series:
        values = np.asarray(series.loss if signal == "loss" else series.grad_norm, dtype=float)
        out.append(Curve(series.rank, np.asarray(series.steps, dtype=float),
                         np.where(np.isfinite(values), values, np.nan)))
    return out


def chart_marks(ledger: RunLedger | None, metrics: RunMetrics) -> list[Mark]:
    """Alarms (data order "warn", the others "bad") and checkpoint saves ("mark") at their steps."""
    marks = [Mark(float(a.step), "warn" if a.is_order else "bad", a.rule, a.label())
             for a in metrics.alarms if a.step is not None]
    if ledger is not None:
        marks += [Mark(float(s.step), "mark", "ckpt", f"checkpoint {s.path} ({s.outcome.value})")
                  for s in ledger.saves if s.step is not None]
    return marks


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value[:6]) + (", …" if len(value) > 6 else "") or "—"
    return str(value)


def alarm_cells(alarm: Alarm) -> tuple[str, ...]:
    """One alarm's row, column by column (`ALARM_COLUMNS`)."""
    return (_cell(alarm.step), _cell(alarm.rank), alarm.rule, _cell(alarm.value),
            _cell(alarm.threshold), alarm.action, _cell(alarm.attribution),
            _cell(list(alarm.params)), _cell(alarm.scene),
            "—" if alarm.device is None else alarm.device_text())


def order_rows(metrics: RunMetrics) -> list[tuple[str, ...]]:
    """One row per rank's data-order ledger (`ORDER_COLUMNS`)."""
    rows = []
    for rank in metrics.order:
        seeds = ", ".join(f"w{w}: {s.get('torch', '?')}" for _e, w, s in rank.seeds) or "—"
        span = ("—" if rank.first_step is None
                else f"{rank.first_step:,}–{rank.last_step:,}")
        rows.append((str(rank.rank), f"{rank.steps:,}", span, str(rank.sessions), seeds,
                     str(rank.count("sample-duplicated")), str(rank.count("resume-order")),
                     str(rank.count("worker-seed-shared")), rank.path.name))
    return rows


def telemetry_text(metrics: RunMetrics) -> str:
    """The NVML state the guard recorded with its alarms, or one line saying there is none."""
    recorded = [a for a in metrics.alarms if a.device is not None]
    if not recorded:
        return NO_TELEMETRY
    return "GPU telemetry at alarms: " + " · ".join(
        f"step {a.step}: {a.device_text()}" for a in recorded)


def guard_text(metrics: RunMetrics, guide: Path = GUARD_DOC) -> str:
    """What the guard recorded, in one line of rich text; when it recorded nothing, a link to
    the guide that turns it on (`guide`, where that file is there)."""
    if not metrics.recorded:
        where = (f"<a href=\"{guide.as_uri()}\">how to turn it on</a>" if guide.is_file()
                 else "how to turn it on: docs/guard.md in the project's source")
        return f"The training guard recorded nothing in this run ({where})."
    steps = sum(len(s.steps) for s in metrics.series)
    order = sum(a.is_order for a in metrics.alarms)
    text = (f"Guard: {counted(steps, 'step')} on {counted(len(metrics.series), 'rank')}; "
            f"{counted(len(metrics.alarms), 'alarm')}, {order} of them on the data order")
    if metrics.problems:
        text += f"; {counted(len(metrics.problems), 'problem')}: {metrics.problems[0]}"
    return html.escape(text, quote=False)

