"""The Overview's answer to "what is this?": the architecture guess in one line and, for a
training checkpoint, the resume-readiness checklist, one row per item in words.

Both come from the inspect result (`architecture`, `resume`), which the client computes on the
job's thread, so a checkpoint of thousands of tensors costs the UI thread nothing here.
Colours come from `chart_style` for the current palette and are re-picked on a palette change;
every row says its status in words too, so colour is never the only signal.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFormLayout, QLabel, QWidget

from inspector.checkpoint.results import InspectResult
from inspector.checkpoint.resume import (
    MISMATCH,
    MISSING,
    PRESENT,
    ResumeChecklist,
    alarming,
    headline,
    item_label,
    resume_text,
    status_word,
)
from inspector.gui.widgets.chart_style import role_colour

_MARKS = {PRESENT: ("✓", "good"), MISMATCH: ("⚠", "warn"), MISSING: ("✗", "bad")}
WEIGHTS_ONLY = ("Weights only — no optimizer, scheduler or grad-scaler state: not a training "
                "checkpoint, so there is nothing to resume")
"""The Resume row of a loaded file without training state (a resume checklist would call
every missing part a failure of something the file never meant to be)."""


class ResumeView(QLabel):
    """The checklist: a headline (ready or not) and a row per item; or words without one."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.checklist: ResumeChecklist | None = None
        self.otherwise = ""
        self.whose = ""
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setAccessibleName("Resume readiness")

    def show_checklist(self, checklist: ResumeChecklist | None, otherwise: str = "",
                       whose: str = "") -> None:
        """Show `checklist` (its headline followed by `whose`: whose word it is), or the words
        `otherwise`."""
        self.checklist, self.otherwise, self.whose = checklist, otherwise, whose
        self._render()

    def changeEvent(self, event: QEvent) -> None:
        """Re-pick the row colours when the theme changes."""
        if event.type() == QEvent.Type.PaletteChange:
            self._render()
        super().changeEvent(event)

    def _render(self) -> None:
        if self.checklist is None:
            self.setText(html.escape(self.otherwise))
            self.setAccessibleDescription(self.otherwise)
            return
        self.setText(resume_html(self.checklist, self.palette(), self.whose))
        self.setAccessibleDescription(resume_text(self.checklist) + self.whose)


def resume_html(checklist: ResumeChecklist, palette: QPalette, whose: str = "") -> str:
    """The checklist as rich text: each row's mark and status coloured by meaning, in words;
    `whose` follows the headline (whose word the checklist is)."""
    rows = []
    for i in checklist.items:
        glyph, role = _MARKS[i.status] if alarming(i) else ("–", "")
        mark = html.escape(f"{glyph} {status_word(i)}")
        if alarming(i):
            mark = f"<span style='color:{role_colour(role, palette).name()}'>{mark}</span>"
        rows.append(f"<tr><td>{html.escape(item_label(i))}&nbsp;&nbsp;</td>"
                    f"<td><b>{mark}</b>&nbsp;&nbsp;</td><td>{html.escape(i.detail)}</td></tr>")
    return (f"<b>{html.escape(headline(checklist))}</b>{html.escape(whose)}"
            f"<table>{''.join(rows)}</table>")


class ModelSummary:
    """Fills the Overview form's Architecture field and its Resume row: the checklist for a
    training checkpoint, WEIGHTS_ONLY for other loaded files."""

    def __init__(self, form: QFormLayout, architecture: QLabel) -> None:
        self.form, self.architecture_label = form, architecture
        self.resume = ResumeView()
        form.addRow("Resume:", self.resume)
        form.setRowVisible(self.resume, False)

    def show(self, result: InspectResult | None, whose: str = "") -> None:
        """Show what an inspect result says (typed on its job's thread), its checklist's
        headline followed by `whose` (whose word it is); a dash before (or without) one."""
        arch = result.architecture if result is not None else None
        resume = result.resume if result is not None else None
        self.architecture_label.setText(arch.summary() if arch is not None else "—")
        self.resume.show_checklist(resume, WEIGHTS_ONLY if arch is not None else "", whose)
        self.form.setRowVisible(self.resume, resume is not None or arch is not None)
