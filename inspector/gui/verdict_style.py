"""Colours, words and icons for verdicts and statuses, shared by every pane."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPainterPath, QPen, QPixmap


@dataclass(frozen=True)
class Style:
    """How one verdict or status looks: strong colour, glyph and a short word."""

    colour: str
    glyph: str
    word: str


VERDICTS: dict[str, Style] = {
    "safe": Style("#1e8e3e", "✓", "Safe"),
    "suspicious": Style("#b86e00", "!", "Suspicious"),
    "dangerous": Style("#c5221f", "✕", "Dangerous"),
    "error": Style("#6e6e6e", "?", "Error"),
    "pending": Style("#5f6fa0", "…", "Scanning"),
}

STATUSES: dict[str, Style] = {
    "ok": Style("#1e8e3e", "✓", "OK"),
    "identical": Style("#1e8e3e", "✓", "Identical"),
    "mismatch": Style("#c5221f", "✕", "Mismatch"),
    "changed": Style("#c5221f", "✕", "Changed"),
    "size_mismatch": Style("#c5221f", "✕", "Size differs"),
    "dtype_or_shape_changed": Style("#c5221f", "✕", "Dtype or shape changed"),
    "missing": Style("#b86e00", "!", "Missing"),
    "only_in_a": Style("#b86e00", "!", "Only in this file"),
    "only_in_b": Style("#b86e00", "!", "Only in the other file"),
    "extra": Style("#5f6fa0", "+", "Not in manifest"),
}


def verdict_style(verdict: str | None) -> Style:
    """Style of a scan verdict; unknown or absent verdicts show as pending."""
    return VERDICTS.get(verdict or "pending", VERDICTS["error"])


def status_style(status: str) -> Style:
    """Style of a verify/diff status."""
    return STATUSES.get(status, Style("#6e6e6e", "?", status.replace("_", " ").capitalize()))


def tint(colour: str, alpha: int = 60) -> QBrush:
    """A translucent background that keeps text readable on light and dark palettes."""
    c = QColor(colour)
    c.setAlpha(alpha)
    return QBrush(c)


@cache
def badge_icon(colour: str, glyph: str, size: int = 64) -> QIcon:
    """A filled circle with a white glyph, drawn at run time so it scales crisply."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setBrush(QColor(colour))
    p.setPen(Qt.PenStyle.NoPen)
    p.drawEllipse(QRectF(2, 2, size - 4, size - 4))
    font = QFont()
    font.setBold(True)
    font.setPixelSize(int(size * 0.6))
    p.setFont(font)
    p.setPen(QPen(QColor("white")))
    p.drawText(QRectF(0, 0, size, size), Qt.AlignmentFlag.AlignCenter, glyph)
    p.end()
    return QIcon(pix)


def verdict_icon(verdict: str | None) -> QIcon:
    """Badge icon of a verdict."""
    s = verdict_style(verdict)
    return badge_icon(s.colour, s.glyph)


@cache
def shield_icon(colour: str, size: int = 128) -> QIcon:
    """The application's shield mark with a check."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = size / 100
    path = QPainterPath(QPointF(50 * s, 6 * s))
    path.lineTo(88 * s, 20 * s)
    path.cubicTo(88 * s, 60 * s, 72 * s, 82 * s, 50 * s, 95 * s)
    path.cubicTo(28 * s, 82 * s, 12 * s, 60 * s, 12 * s, 20 * s)
    path.closeSubpath()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(colour))
    p.drawPath(path)
    pen = QPen(QColor("white"), 9 * s)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    p.setPen(pen)
    check = QPainterPath(QPointF(32 * s, 50 * s))
    check.lineTo(45 * s, 63 * s)
    check.lineTo(69 * s, 37 * s)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawPath(check)
    p.end()
    return QIcon(pix)
