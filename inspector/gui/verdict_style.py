"""Colours, words and icons for verdicts and statuses, shared by every pane."""

from __future__ import annotations

from functools import cache
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPainterPath, QPen, QPixmap

from inspector.core.badges import LOOKS, VERDICT_BADGES, Badge, Look, status_look, weights_badge
from inspector.core.vocabulary import Verdict
from inspector.scan.advice import code_safety_badge, file_badge
from inspector.scan.result import ScanResult

Style = Look
"""How one verdict or status looks; the badges' looks are `core.badges.LOOKS`."""

VERDICTS: dict[str, Style] = {**{v: LOOKS[b] for v, b in VERDICT_BADGES.items()},
                               "pending": LOOKS[Badge.SCANNING]}
"""A scan verdict's or a finding severity's look (the pickle pane's imports, the findings)."""

CORRUPT = LOOKS[Badge.DAMAGED]
"""A finding that says the file's own checksums or sizes do not hold."""



def verdict_style(verdict: str | None) -> Style:
    """Style of a scan verdict or a finding's severity; absent verdicts show as pending."""
    return VERDICTS.get(verdict or "pending", VERDICTS[Verdict.ERROR])


def code_safety_style(scan: ScanResult | None, health: str | None = None) -> Style:
    """The code-safety badge (`scan.advice.code_safety_badge`): Damaged for integrity
    findings, "No code found" beside weights whose `health` status is a problem."""
    return LOOKS[code_safety_badge(scan, health)]


def weights_style(health: str | None, loaded: bool | None) -> Style:
    """The weights-health badge: judged, not judged yet, or not judged (`loaded` False)."""
    return LOOKS[weights_badge(health, loaded)]


def health_style(status: str | None) -> Style:
    """Style of a weights-health status or a health finding's severity."""
    return weights_style(status, False)


def file_state(doc: Any) -> Badge:
    """The file's state in the list: the worse of its two badges (`scan.advice.file_badge`)."""
    return file_badge(doc.scan, _health_status(doc))


def _health_status(doc: Any) -> str | None:
    """The document's weights-health status, None until judged."""
    return doc.health.status if doc.health is not None else None


def document_icon(doc: Any) -> QIcon:
    """A file's list icon: the icon of its state (`file_state`), one per state."""
    return state_icon(file_state(doc))


def state_icon(state: Badge) -> QIcon:
    """The list icon of one state: its colour and glyph."""
    look = LOOKS[state]
    return badge_icon(look.colour, look.glyph)


def document_words(doc: Any) -> str:
    """The file's state first, then code safety and, once judged, weights health."""
    status = _health_status(doc)
    parts = [LOOKS[file_state(doc)].word, code_safety_style(doc.scan, status).word]
    if status:
        parts.append(health_style(status).word)
    return "; ".join(dict.fromkeys(parts))


def state_tooltip(doc: Any) -> str:
    """What the list row's icon means, in one line: its word and its meaning."""
    look = LOOKS[file_state(doc)]
    return f"{look.word}: {look.meaning}"


def status_style(status: str) -> Style:
    """Style of a verify/diff status (`core.badges.STATUS_LOOKS`)."""
    return status_look(status)


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


@cache
def shield_icon(colour: str, size: int = 128, checked: bool = True) -> QIcon:
    """The application's shield mark with a check, or (`checked` False: nothing judged yet)
    with a magnifying glass, so an empty window does not read as "safe"."""
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
    p.setBrush(Qt.BrushStyle.NoBrush)
    if checked:
        check = QPainterPath(QPointF(32 * s, 50 * s))
        check.lineTo(45 * s, 63 * s)
        check.lineTo(69 * s, 37 * s)
        p.drawPath(check)
    else:
        p.drawEllipse(QPointF(46 * s, 44 * s), 13 * s, 13 * s)
        p.drawLine(QPointF(56 * s, 54 * s), QPointF(67 * s, 66 * s))
    p.end()
    return QIcon(pix)
