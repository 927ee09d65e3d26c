"""Item-data roles and alignments as plain ints.

Item models answer data() thousands of times per paint; comparing PySide's enum objects costs
twenty times an int comparison, and OR-ing alignment flags builds a new enum each time.
"""

from PySide6.QtCore import Qt

DISPLAY = Qt.ItemDataRole.DisplayRole.value
TOOLTIP = Qt.ItemDataRole.ToolTipRole.value
FONT = Qt.ItemDataRole.FontRole.value
ALIGNMENT = Qt.ItemDataRole.TextAlignmentRole.value
BACKGROUND = Qt.ItemDataRole.BackgroundRole.value
USER = Qt.ItemDataRole.UserRole.value
ROW = USER + 1
"""The row dict behind an index (None for a tree's prefix nodes)."""

RIGHT = (Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter).value
HORIZONTAL = Qt.Orientation.Horizontal
