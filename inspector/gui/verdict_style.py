"""Colours, words and icons for verdicts and statuses, shared by every pane."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPainterPath, QPen, QPixmap

from inspector.core.vocabulary import FileStatus, HealthStatus, TensorStatus, Verdict
from inspector.scan.damage import integrity_findings
from inspector.scan.result import ScanResult


@dataclass(frozen=True)
class Style:
    """How one verdict or status looks: strong colour, glyph and a short word."""

    colour: str
    glyph: str
    word: str


VERDICTS: dict[str, Style] = {
    Verdict.SAFE: Style("#1e8e3e", "✓", "Safe"),
    Verdict.SUSPICIOUS: Style("#b86e00", "!", "Suspicious"),
    Verdict.DANGEROUS: Style("#c5221f", "✕", "Dangerous"),
    Verdict.ERROR: Style("#6e6e6e", "?", "Error"),
    "pending": Style("#5f6fa0", "…", "Scanning"),
}

CORRUPT = Style("#7b1fa2", "≠", "Damaged")
"""Code safety of a file whose data fails its own checksums or sizes; in the file list, any
damaged file (bad checksums or weights that hold NaN, Inf or flipped-bit outliers)."""

NO_CODE_BUT_DAMAGED = Style("#6e6e6e", "–", "No code found")
"""Code safety of a file with no code but damaged weights: no green check beside the damage."""

HEALTH: dict[str, Style] = {
    HealthStatus.OK: Style("#1e8e3e", "✓", "Weights OK"),
    HealthStatus.WARNING: Style("#b86e00", "!", "Weights: check"),
    HealthStatus.PROBLEM: Style("#c5221f", "✕", "Weights: problem"),
}
HEALTH_UNKNOWN = Style("#6e6e6e", "–", "Weights not judged")

STATUSES: dict[str, Style] = {
    FileStatus.OK: Style("#1e8e3e", "✓", "OK"),
    TensorStatus.IDENTICAL: Style("#1e8e3e", "✓", "Identical"),
    FileStatus.MISMATCH: Style("#c5221f", "✕", "Mismatch"),
    TensorStatus.CHANGED: Style("#c5221f", "✕", "Changed"),
    FileStatus.SIZE_MISMATCH: Style("#c5221f", "✕", "Size differs"),
    TensorStatus.DTYPE_OR_SHAPE_CHANGED: Style("#c5221f", "✕", "Dtype or shape changed"),
    FileStatus.MISSING: Style("#b86e00", "!", "Missing"),
    TensorStatus.ONLY_IN_A: Style("#b86e00", "!", "Only in this file"),
    TensorStatus.ONLY_IN_B: Style("#b86e00", "!", "Only in the other file"),
    FileStatus.EXTRA: Style("#5f6fa0", "+", "Not in manifest"),
}


def verdict_style(verdict: str | None) -> Style:
    """Style of a scan verdict; unknown or absent verdicts show as pending."""
    return VERDICTS.get(verdict or "pending", VERDICTS[Verdict.ERROR])


def code_safety_style(scan: ScanResult | None, health: str | None = None) -> Style:
    """Style of the code-safety badge: the verdict, Damaged for integrity findings, and no
    green check when the weights' `health` status is a problem."""
    verdict = scan.verdict if scan else None
    if verdict in (Verdict.SUSPICIOUS, Verdict.ERROR) and integrity_findings(scan):
        return CORRUPT
    if verdict == Verdict.SAFE and health == HealthStatus.PROBLEM:
        return NO_CODE_BUT_DAMAGED
    return verdict_style(verdict)


def is_damaged(doc: Any) -> bool:
    """True when the file's bytes fail their own checks or its weights are corrupted."""
    return (code_safety_style(doc.scan) is CORRUPT
            or _health_status(doc) == HealthStatus.PROBLEM)


def worse_style(doc: Any) -> Style:
    """The file's worse verdict, code safety or weights health, as the list shows it: a
    dangerous file stays dangerous, any damage reads Damaged, then a suspicious file, then
    weights worth a look; only a safe file with healthy (or unjudged) weights gets a check."""
    safety = code_safety_style(doc.scan)
    if safety.word == VERDICTS[Verdict.DANGEROUS].word:
        return safety
    if is_damaged(doc):
        return CORRUPT
    if safety is not VERDICTS[Verdict.SAFE]:
        return safety
    status = _health_status(doc)
    return HEALTH[status] if status == HealthStatus.WARNING else safety


def health_style(status: str | None) -> Style:
    """Style of the weights-health badge of a `Health.status` or a finding's severity (grey
    until the weights were judged)."""
    return HEALTH.get(status, HEALTH_UNKNOWN)


def _health_status(doc: Any) -> str | None:
    """The document's weights-health status, None until judged."""
    return doc.health.status if doc.health is not None else None


def document_icon(doc: Any) -> QIcon:
    """A file's list icon: the badge of its worse verdict (`worse_style`)."""
    style = worse_style(doc)
    return badge_icon(style.colour, style.glyph)


def document_words(doc: Any) -> str:
    """The worse verdict first, then code safety and, once judged, weights health."""
    status = _health_status(doc)
    parts = [worse_style(doc).word, code_safety_style(doc.scan, status).word]
    if status:
        parts.append(health_style(status).word)
    return "; ".join(dict.fromkeys(parts))


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
