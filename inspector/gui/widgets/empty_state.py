"""The inviting first screen: what to drop, an Open button and a sample to try."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from inspector import formats
from inspector.core.vocabulary import Format
from inspector.gui.verdict_style import shield_icon

PROMPT = (f"Drop a {' / '.join(formats.suffixes(Format.PYTORCH_ZIP, Format.SAFETENSORS))} file "
          "or a folder of shards")


class EmptyState(QWidget):
    """Shown while no file is open."""

    open_requested = Signal()
    sample_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("emptyState")
        self.logo = logo = QLabel()
        # a magnifier, not a check: nothing has been judged yet, so nothing reads as "safe"
        logo.setPixmap(shield_icon("#2f65ca", checked=False).pixmap(96, 96))
        logo.setAlignment(Qt.AlignmentFlag.AlignCenter)

        title = QLabel(PROMPT)
        font = QFont(title.font())
        font.setPointSizeF(font.pointSizeF() * 1.45)
        font.setBold(True)
        title.setFont(font)
        title.setWordWrap(True)
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)

        detail = QLabel(
            "It is scanned at once without running any of its code, then loaded in a jailed "
            "process with weights_only=True to show every tensor's statistics and hashes."
        )
        detail.setWordWrap(True)
        detail.setAlignment(Qt.AlignmentFlag.AlignCenter)

        self.open_button = QPushButton("Open…")
        self.open_button.setDefault(True)
        self.open_button.setToolTip("Choose a checkpoint file (Ctrl+O)")
        self.open_button.clicked.connect(self.open_requested)
        self.sample_button = QPushButton("Try a sample")
        self.sample_button.setToolTip(
            "Writes a small benign checkpoint and a harmless malicious demo to your cache "
            "folder and opens both (the demo is only scanned, never loaded)"
        )
        self.sample_button.clicked.connect(self.sample_requested)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.sample_button)
        buttons.addStretch(1)

        box = QVBoxLayout(self)
        box.addStretch(2)
        box.addWidget(logo)
        box.addSpacing(12)
        box.addWidget(title)
        box.addSpacing(6)
        box.addWidget(detail)
        box.addSpacing(18)
        box.addLayout(buttons)
        box.addStretch(3)
        box.setContentsMargins(48, 24, 48, 24)
