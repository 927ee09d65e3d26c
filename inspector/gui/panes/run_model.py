"""A training run's checkpoints as table rows: the ledger's records and their state now.

`run_rows(ledger, checks)` is plain Python over `run.checkpoints` (no Qt, no torch);
`RunTableModel` serves those rows to a view.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QModelIndex, QObject

from inspector.core.badges import status_look
from inspector.core.vocabulary import CheckpointState, SaveOutcome
from inspector.gui import roles
from inspector.gui.verdict_style import tint
from inspector.run.checkpoints import CheckpointCheck, ResumeChoice, RunLedger, SaveRecord

CHECKING = "checking…"
COLUMNS = ("Step", "Epoch", "Saved (UTC)", "Size", "At save", "Now", "Rank", "Ledger line",
           "Checkpoint", "Detail")
NUMERIC = frozenset({0, 1, 3, 6, 7})


@dataclass(frozen=True)
class RunRow:
    """One ledgered checkpoint as the table shows it."""

    record: SaveRecord
    location: Path
    state: CheckpointState | None
    """None while the check runs."""
    detail: str
    chain: str
    """'ok', or what the journal's chain says about this record's line."""

    def cells(self) -> tuple[str, ...]:
        """The row's text, column by column."""
        r = self.record
        epoch = "" if r.epoch is None else f"{r.epoch:g}"
        when = r.time.replace("T", " ")[:19]
        state = CHECKING if self.state is None else status_look(self.state).word
        line = f"{r.line}" if self.chain == "ok" else f"{r.line} ({self.chain})"
        notes = "; ".join(filter(None, [self.detail, *r.warnings,
                                        r.detail if r.outcome != SaveOutcome.VERIFIED else ""]))
        return ("" if r.step is None else f"{r.step:,}", epoch, when, _size(r.size),
                r.outcome.value, state, str(r.rank), line, r.path, notes)


def run_rows(ledger: RunLedger, checks: list[CheckpointCheck] | None = None) -> list[RunRow]:
    """The table's rows, newest first, the records whose line failed its seal among them and
    marked; without `checks`, each state is still being checked."""
    chain = {p.line: p.kind for p in ledger.journal.problems}
    by_line = {c.record.line: c for c in checks or ()}
    rows = []
    for record in sorted((*ledger.saves, *ledger.untrusted), key=lambda r: -r.line):
        check = by_line.get(record.line)
        rows.append(RunRow(record, ledger.resolve(record),
                           check.state if check else None, check.detail if check else "",
                           chain.get(record.line, "ok")))
    return rows


def resume_html(choice: ResumeChoice, ledger: RunLedger) -> str:
    """The run's verdict as rich text: the checkpoint to resume from (or that there is none),
    then every newer checkpoint passed over with the reason, as `run latest` says them."""
    record = choice.record
    if record is None:
        lead = (f"<b>No checkpoint to resume from</b>: none of the {len(ledger.saves)} "
                "ledgered checkpoints is still intact.")
    else:
        lead = (f"<b>Resume from {html.escape(record.label)}</b>: "
                f"{html.escape(str(ledger.resolve(record)))}, saved "
                f"{html.escape(record.time.replace('T', ' ')[:19])} (rank {record.rank}), "
                "intact since then.")
    skipped = "".join(f"<li>Skipped {html.escape(r.label)} ({html.escape(r.path)}): "
                      f"{html.escape(why)}</li>" for r, why in choice.skipped)
    ignored = "".join(f"<li>Ignored {html.escape(problem)}</li>" for problem in choice.untrusted)
    return lead + (f"<ul>{skipped}{ignored}</ul>" if skipped or ignored else "")


def chain_text(ledger: RunLedger) -> str:
    """The journal's integrity in one line."""
    if ledger.journal.intact:
        # without a seal key the chain finds damage, not a forger (`journal.unauthenticated`)
        keyed = "sealed with the key" if ledger.journal.authenticated else "no seal key"
        return f"chain intact ({len(ledger.journal.entries)} records, {keyed})"
    named = "; ".join(f"line {p.line} {p.kind}" for p in ledger.journal.problems[:4])
    more = len(ledger.journal.problems) - 4
    return f"chain broken: {named}" + (f" and {more} more" if more > 0 else "")


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} B"


class RunTableModel(roles.RowsModel):
    """The run's checkpoints, one row each, newest first."""

    HEADERS = COLUMNS
    rows: list[RunRow]

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._cells: list[tuple[str, ...]] = []
        self._brushes = {state: tint(status_look(state).colour) for state in CheckpointState}

    def set_rows(self, rows: list[RunRow]) -> None:
        """Show these rows."""
        self._cells = [r.cells() for r in rows]
        super().set_rows(rows)

    def data(self, index: QModelIndex, role: int = roles.DISPLAY):
        row, col = index.row(), index.column()
        if role == roles.DISPLAY:
            return self._cells[row][col]
        if role == roles.ALIGNMENT and col in NUMERIC:
            return roles.RIGHT
        if role == roles.BACKGROUND and col == 5:
            state = self.rows[row].state
            return self._brushes.get(state) if state is not None else None
        if role == roles.TOOLTIP:
            return str(self.rows[row].location)
        return None
