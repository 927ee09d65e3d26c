"""The file list's legend: each state a row can show, with its icon, word and meaning.

Opened from the button under the list; the states, words, colours and glyphs are
`core.badges` (`LIST_STATES`, `LOOKS`), the same the list's icons and tooltips use.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QGridLayout, QLabel, QVBoxLayout, QWidget

from inspector.core.badges import LIST_STATES, LOOKS
from inspector.gui.verdict_style import state_icon

ICON_PX = 22


class StateLegend(QDialog):
    """What each icon of the file list means, worst first."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("What the icons mean")
        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        self.rows: list[tuple[QLabel, QLabel, QLabel]] = []
        for row, state in enumerate(LIST_STATES):
            look = LOOKS[state]
            icon = QLabel()
            icon.setPixmap(state_icon(state).pixmap(ICON_PX, ICON_PX))
            word = QLabel(f"<b>{look.word}</b>")
            meaning = QLabel(look.meaning)
            meaning.setWordWrap(True)
            grid.addWidget(icon, row, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(word, row, 1, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(meaning, row, 2)
            self.rows.append((icon, word, meaning))
        grid.setColumnStretch(2, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Each open file's row shows the worse of its code safety and "
                                "its weights health:"))
        layout.addLayout(grid)
        layout.addWidget(buttons)
        self.setMinimumWidth(520)
