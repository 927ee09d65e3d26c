"""The Overview's answer to "what is this?": the architecture guess in one line and, for a
training checkpoint, the resume-readiness checklist, one row per item in words.

Colours come from `chart_style` for the current palette and are re-picked on a palette change;
every row says its status in words too, so colour is never the only signal.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFormLayout, QLabel, QWidget

from inspector.core.architecture import Architecture, guess_architecture
from inspector.core.contents import Contents
from inspector.core.resume import (
    MISMATCH,
    MISSING,
    PRESENT,
    ResumeChecklist,
    alarming,
    headline,
    item_label,
    resume_checklist,
    resume_text,
    status_word,
)
from inspector.gui.chart_style import role_colour

_MARKS = {PRESENT: ("✓", "good"), MISMATCH: ("⚠", "warn"), MISSING: ("✗", "bad")}


class ArchitectureCache:
    """The guess for one tensor list, made again only when the list changes (a refresh
    follows every document change, and a large checkpoint has thousands of keys)."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._value: Architecture | None = None

    def get(self, tensors: list[dict[str, Any]]) -> Architecture:
        """The architecture guessed from `tensors`."""
        key = (id(tensors), len(tensors))
        if key != self._key or self._value is None:
            self._key, self._value = key, guess_architecture(tensors)
        return self._value


class ResumeView(QLabel):
    """The checklist: a headline (ready or not) and a row per item."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.checklist: ResumeChecklist | None = None
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setAccessibleName("Resume readiness")

    def show_for(self, contents: Contents, tensors: list[dict[str, Any]],
                 objects: list[dict[str, Any]]) -> bool:
        """Show the checklist of a training checkpoint; False (and cleared) for weights alone."""
        self.checklist = (resume_checklist(contents, tensors, objects)
                          if tensors and contents.is_training_checkpoint else None)
        self._render()
        return self.checklist is not None

    def changeEvent(self, event: QEvent) -> None:
        """Re-pick the row colours when the theme changes."""
        if event.type() == QEvent.Type.PaletteChange:
            self._render()
        super().changeEvent(event)

    def _render(self) -> None:
        if self.checklist is None:
            self.clear()
            self.setAccessibleDescription("")
            return
        self.setText(resume_html(self.checklist, self.palette()))
        self.setAccessibleDescription(resume_text(self.checklist))


def resume_html(checklist: ResumeChecklist, palette: QPalette) -> str:
    """The checklist as rich text: each row's mark and status coloured by meaning, in words."""
    rows = []
    for i in checklist.items:
        glyph, role = _MARKS[i.status] if alarming(i) else ("–", "")
        mark = html.escape(f"{glyph} {status_word(i)}")
        if alarming(i):
            mark = f"<span style='color:{role_colour(role, palette).name()}'>{mark}</span>"
        rows.append(f"<tr><td>{html.escape(item_label(i))}&nbsp;&nbsp;</td>"
                    f"<td><b>{mark}</b>&nbsp;&nbsp;</td><td>{html.escape(i.detail)}</td></tr>")
    return f"<b>{html.escape(headline(checklist))}</b><table>{''.join(rows)}</table>"


class ModelSummary:
    """Fills the Overview form's Architecture field and its Resume row (shown only for a
    training checkpoint)."""

    def __init__(self, form: QFormLayout, architecture: QLabel) -> None:
        self.form, self.architecture_label = form, architecture
        self.cache = ArchitectureCache()
        self.resume = ResumeView()
        form.addRow("Resume:", self.resume)
        form.setRowVisible(self.resume, False)

    def show(self, contents: Contents | None, tensors: list[dict[str, Any]],
             objects: list[dict[str, Any]]) -> None:
        """Show what the loaded tensors say; nothing (a dash) before any tensor arrives."""
        loaded = contents is not None and bool(tensors)
        self.architecture_label.setText(self.cache.get(tensors).summary() if loaded else "—")
        shown = loaded and self.resume.show_for(contents, tensors, objects)
        self.form.setRowVisible(self.resume, shown)
