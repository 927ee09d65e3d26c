"""Report charts drawn with QPainter on a QImage and returned as PNG bytes (no display needed)."""

from __future__ import annotations

import math

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QGuiApplication, QImage, QPainter, QPen

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
SCALE = 2
"""Drawn at twice the CSS size so charts stay sharp when printed."""

_app: QGuiApplication | None = None
"""Kept referenced so Python does not destroy the application while charts are drawn."""


def ensure_gui() -> None:
    """Make sure a Qt application exists; headless callers get the offscreen platform.

    A full QApplication, not a QGuiApplication: widgets created later in the same process
    (a test session, a script that also opens a window) need one, and Qt allows only one.
    """
    global _app
    if QGuiApplication.instance() is None:
        from PySide6.QtWidgets import QApplication

        _app = QApplication(["ckpt-inspector", "-platform", "offscreen"])


def bar_chart(title: str, rows: list[tuple[str, float]], unit: str, width: int = 640) -> bytes:
    """Horizontal bars, one per (label, value), largest first as given; PNG bytes."""
    ensure_gui()
    bar_h, gap, top = 22, 8, 36
    height = top + len(rows) * (bar_h + gap) + 12
    image, painter = _canvas(width, height)
    font = _font(10)
    metrics = QFontMetricsF(font)
    _title(painter, title, width)
    painter.setFont(font)
    label_w = max((metrics.horizontalAdvance(label) for label, _ in rows), default=0) + 16
    value_w = max((metrics.horizontalAdvance(_fmt(v, unit)) for _, v in rows), default=0) + 16
    span = max((v for _, v in rows), default=0) or 1
    plot_w = max(width - label_w - value_w - 16, 40)
    for i, (label, value) in enumerate(rows):
        y = top + i * (bar_h + gap)
        painter.setPen(QColor("#222"))
        painter.drawText(QRectF(8, y, label_w - 16, bar_h),
                         int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), label)
        w = max(plot_w * value / span, 1)
        painter.fillRect(QRectF(label_w, y, w, bar_h), QColor(PALETTE[i % len(PALETTE)]))
        painter.setPen(QColor("#222"))
        painter.drawText(QRectF(label_w + w + 6, y, value_w, bar_h),
                         int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                         _fmt(value, unit))
    return _png(image, painter)


def line_chart(
    title: str,
    series: list[tuple[str, list[tuple[float, float]]]],
    x_label: str,
    y_label: str,
    width: int = 640,
    height: int = 260,
) -> bytes:
    """Step-free polylines, one colour per series, with axes, ticks and a legend; PNG bytes."""
    ensure_gui()
    image, painter = _canvas(width, height)
    _title(painter, title, width)
    points = [p for _, pts in series for p in pts]
    xs = [p[0] for p in points] or [0.0, 1.0]
    ys = [p[1] for p in points] or [0.0, 1.0]
    x_ticks = _ticks(min(xs), max(xs))
    y_ticks = _ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    font = _font(9)
    metrics = QFontMetricsF(font)
    left = max(metrics.horizontalAdvance(_fmt(t, "")) for t in y_ticks) + 24
    plot = QRectF(left, 48, width - left - 16, height - 48 - 40)
    painter.setFont(font)

    def to_px(x: float, y: float) -> QPointF:
        return QPointF(plot.left() + (x - x0) / ((x1 - x0) or 1) * plot.width(),
                       plot.bottom() - (y - y0) / ((y1 - y0) or 1) * plot.height())

    grid = QPen(QColor("#ddd"))
    for t in y_ticks:
        p = to_px(x0, t)
        painter.setPen(grid)
        painter.drawLine(QPointF(plot.left(), p.y()), QPointF(plot.right(), p.y()))
        painter.setPen(QColor("#444"))
        painter.drawText(QRectF(0, p.y() - 8, left - 6, 16),
                         int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                         _fmt(t, ""))
    for t in x_ticks:
        p = to_px(t, y0)
        painter.setPen(QColor("#444"))
        painter.drawLine(QPointF(p.x(), plot.bottom()), QPointF(p.x(), plot.bottom() + 4))
        painter.drawText(QRectF(p.x() - 40, plot.bottom() + 4, 80, 16),
                         int(Qt.AlignmentFlag.AlignHCenter), _fmt(t, ""))
    painter.setPen(QPen(QColor("#444"), 1))
    painter.drawRect(plot)
    painter.drawText(QRectF(plot.left(), height - 20, plot.width(), 16),
                     int(Qt.AlignmentFlag.AlignHCenter), x_label)
    painter.drawText(QRectF(8, 28, 200, 16), int(Qt.AlignmentFlag.AlignLeft), y_label)
    for i, (_, pts) in enumerate(series):
        painter.setPen(QPen(QColor(PALETTE[i % len(PALETTE)]), 2))
        poly = [to_px(x, y) for x, y in pts]
        if len(poly) == 1:
            painter.drawEllipse(poly[0], 3, 3)
        painter.drawPolyline(poly)
    legend_x = plot.right()
    for i, (name, _) in reversed(list(enumerate(series))):
        color = QColor(PALETTE[i % len(PALETTE)])
        w = metrics.horizontalAdvance(name)
        legend_x -= w + 28
        painter.fillRect(QRectF(legend_x, 34, 12, 4), color)
        painter.setPen(QColor("#222"))
        painter.drawText(QPointF(legend_x + 16, 40), name)
    return _png(image, painter)


def _canvas(width: int, height: int) -> tuple[QImage, QPainter]:
    image = QImage(width * SCALE, height * SCALE, QImage.Format.Format_RGB32)
    image.setDevicePixelRatio(SCALE)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
    return image, painter


def _title(painter: QPainter, title: str, width: int) -> None:
    painter.setFont(_font(11, bold=True))
    painter.setPen(QColor("#111"))
    painter.drawText(QRectF(8, 4, width - 16, 22),
                     int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), title)


def _font(points: int, bold: bool = False) -> QFont:
    font = QFont("DejaVu Sans")
    font.setStyleHint(QFont.StyleHint.SansSerif)
    font.setPixelSize(int(points * 1.33))
    font.setBold(bold)
    return font


def _png(image: QImage, painter: QPainter) -> bytes:
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round-numbered ticks covering [lo, hi]."""
    if hi <= lo:  # a flat series (e.g. zero difference every run) gets a unit-high axis
        hi = lo + 1
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(lo / step) * step
    ticks = [start]
    while ticks[-1] < hi - 1e-12 * abs(hi):
        ticks.append(ticks[-1] + step)
    return ticks


def _fmt(value: float, unit: str) -> str:
    if unit == "B":
        return human_bytes(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
        return f"{value:.2e}"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{text} {unit}".strip()


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
