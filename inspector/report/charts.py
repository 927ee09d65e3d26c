"""Report charts drawn with QPainter on a QImage and returned as PNG bytes (no display needed)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

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
    """Horizontal bars, one per (label, value), largest first as given; PNG bytes. A value
    that is no finite number gets no bar, only its text."""
    ensure_gui()
    bar_h, gap, top = 22, 8, 36
    height = top + len(rows) * (bar_h + gap) + 12
    with _painting(width, height) as (image, painter):
        font = _font(10)
        metrics = QFontMetricsF(font)
        _title(painter, title, width)
        painter.setFont(font)
        label_w = max((metrics.horizontalAdvance(label) for label, _ in rows), default=0) + 16
        value_w = max((metrics.horizontalAdvance(_fmt(v, unit)) for _, v in rows),
                      default=0) + 16
        span = max((v for _, v in rows if _finite(v) is not None), default=0) or 1
        plot_w = max(width - label_w - value_w - 16, 40)
        for i, (label, value) in enumerate(rows):
            y = top + i * (bar_h + gap)
            painter.setPen(QColor("#222"))
            painter.drawText(QRectF(8, y, label_w - 16, bar_h),
                             int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                             label)
            w = _bar_width(value, span, plot_w)
            painter.fillRect(QRectF(label_w, y, w, bar_h), QColor(PALETTE[i % len(PALETTE)]))
            painter.setPen(QColor("#222"))
            painter.drawText(QRectF(label_w + w + 6, y, value_w, bar_h),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                             _fmt(value, unit))
    return _png(image)


def _bar_width(value: float, span: float, plot_w: float) -> float:
    """A bar's width in pixels, 1 to `plot_w`; 0 for a value that is no finite number."""
    number = _finite(value)
    if number is None:
        return 0.0
    fraction = _fraction(number, 0.0, float(span))
    return min(max(plot_w * fraction, 1.0), plot_w)


def line_chart(
    title: str,
    series: list[tuple[str, list[tuple[float, float]]]],
    x_label: str,
    y_label: str,
    width: int = 640,
    height: int = 260,
) -> bytes:
    """Step-free polylines, one colour per series, with axes, ticks and a legend; PNG bytes.
    A point that is no finite number is left out (the line breaks there), and the chart
    says how many were."""
    ensure_gui()
    finite = [(name, [_point(p) for p in pts]) for name, pts in series]
    points = [p for _, pts in finite for p in pts if p is not None]
    left_out = sum(p is None for _, pts in finite for p in pts)
    x_ticks = _ticks(min((x for x, _ in points), default=0.0),
                     max((x for x, _ in points), default=1.0))
    y_ticks = _ticks(min((y for _, y in points), default=0.0),
                     max((y for _, y in points), default=1.0))
    with _painting(width, height) as (image, painter):
        _title(painter, title, width)
        font = _font(9)
        metrics = QFontMetricsF(font)
        left = max(metrics.horizontalAdvance(_fmt(t, "")) for t in y_ticks) + 24
        plot = QRectF(left, 48, width - left - 16, height - 48 - 40)
        painter.setFont(font)
        _axes(painter, plot, x_ticks, y_ticks, left)
        painter.setPen(QPen(QColor("#444"), 1))
        painter.drawText(QRectF(plot.left(), height - 20, plot.width(), 16),
                         int(Qt.AlignmentFlag.AlignHCenter), x_label)
        painter.drawText(QRectF(8, 28, 200, 16), int(Qt.AlignmentFlag.AlignLeft), y_label
                         + (f" ({left_out} not finite, not drawn)" if left_out else ""))
        for i, (_, pts) in enumerate(finite):
            painter.setPen(QPen(QColor(PALETTE[i % len(PALETTE)]), 2))
            for run in _runs(pts):
                poly = [_to_px(plot, x_ticks, y_ticks, x, y) for x, y in run]
                if len(poly) == 1:
                    painter.drawEllipse(poly[0], 3, 3)
                painter.drawPolyline(poly)
        _legend(painter, plot, [name for name, _ in series], metrics)
    return _png(image)


def _point(point: tuple[float, float]) -> tuple[float, float] | None:
    x, y = (_finite(v) for v in point)
    return None if x is None or y is None else (x, y)


def _runs(points: list[tuple[float, float] | None]) -> list[list[tuple[float, float]]]:
    """The stretches of a series between the points left out."""
    runs: list[list[tuple[float, float]]] = [[]]
    for p in points:
        if p is None:
            runs.append([])
        else:
            runs[-1].append(p)
    return [run for run in runs if run]


def _axes(painter: QPainter, plot: QRectF, x_ticks: list[float], y_ticks: list[float],
          left: float) -> None:
    """Grid lines and labels of the ticks, and the plot's frame."""
    grid = QPen(QColor("#ddd"))
    for t in y_ticks:
        p = _to_px(plot, x_ticks, y_ticks, x_ticks[0], t)
        painter.setPen(grid)
        painter.drawLine(QPointF(plot.left(), p.y()), QPointF(plot.right(), p.y()))
        painter.setPen(QColor("#444"))
        painter.drawText(QRectF(0, p.y() - 8, left - 6, 16),
                         int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                         _fmt(t, ""))
    for t in x_ticks:
        p = _to_px(plot, x_ticks, y_ticks, t, y_ticks[0])
        painter.setPen(QColor("#444"))
        painter.drawLine(QPointF(p.x(), plot.bottom()), QPointF(p.x(), plot.bottom() + 4))
        painter.drawText(QRectF(p.x() - 40, plot.bottom() + 4, 80, 16),
                         int(Qt.AlignmentFlag.AlignHCenter), _fmt(t, ""))
    painter.setPen(QPen(QColor("#444"), 1))
    painter.drawRect(plot)


def _legend(painter: QPainter, plot: QRectF, names: list[str], metrics: QFontMetricsF) -> None:
    legend_x = plot.right()
    for i, name in reversed(list(enumerate(names))):
        color = QColor(PALETTE[i % len(PALETTE)])
        legend_x -= metrics.horizontalAdvance(name) + 28
        painter.fillRect(QRectF(legend_x, 34, 12, 4), color)
        painter.setPen(QColor("#222"))
        painter.drawText(QPointF(legend_x + 16, 40), name)


def _to_px(plot: QRectF, x_ticks: list[float], y_ticks: list[float], x: float, y: float
           ) -> QPointF:
    return QPointF(plot.left() + _fraction(x, x_ticks[0], x_ticks[-1]) * plot.width(),
                   plot.bottom() - _fraction(y, y_ticks[0], y_ticks[-1]) * plot.height())


def _fraction(value: float, lo: float, hi: float) -> float:
    """Where `value` lies from `lo` (0) to `hi` (1), halved first so that no difference of
    two finite numbers overflows; 0 on an empty span."""
    span = hi / 2 - lo / 2
    return (value / 2 - lo / 2) / span if span > 0 else 0.0


def _finite(value: object) -> float | None:
    """`value` as a finite float, or None (NaN, an infinity, a number too large for a float,
    anything else)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


@contextlib.contextmanager
def _painting(width: int, height: int) -> Iterator[tuple[QImage, QPainter]]:
    """A white canvas and its painter, the painter ended however the drawing ends (a
    painter left open on a destroyed image crashes the process)."""
    image = QImage(width * SCALE, height * SCALE, QImage.Format.Format_RGB32)
    image.setDevicePixelRatio(SCALE)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        yield image, painter
    finally:
        painter.end()


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


def _png(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round-numbered finite ticks covering [lo, hi], two at least, for any finite `lo` <=
    `hi`: a flat series, one so large that adding 1 changes nothing, and one spanning the
    whole float range included."""
    lo, hi = _axis(lo, hi)
    raw = hi / count - lo / count  # as `_fraction`: hi - lo may overflow
    if not raw > 0:  # a span below the smallest float's count-th part
        return [lo, hi]
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), 0.0)
    ticks = [math.floor(lo / step) * step if step > 0 else math.nan]
    while math.isfinite(ticks[-1]) and ticks[-1] < hi - 1e-12 * abs(hi) \
            and len(ticks) <= 4 * count:
        ticks.append(ticks[-1] + step)
    if len(ticks) < 2 or len(ticks) > 4 * count or len(set(ticks)) != len(ticks) \
            or not all(math.isfinite(t) for t in ticks):
        return [lo, hi]  # no round steps fit (rounding, or overflow): the ends themselves
    return ticks


def _axis(lo: float, hi: float) -> tuple[float, float]:
    """The axis's ends: `lo` and `hi` as given, finite, with a span that a step can cross
    (a flat series, e.g. zero difference every run, gets a unit-high axis, or one a quarter
    of its size where adding 1 would change nothing)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    lo, hi = min(lo, hi), max(lo, hi)
    least = max(abs(lo), abs(hi)) * 1e-9
    if hi / 2 - lo / 2 > least / 2:
        return lo, hi
    pad = max(1.0, abs(lo) / 4)
    return (lo, lo + pad) if math.isfinite(lo + pad) else (lo - pad, lo)


def _fmt(value: float, unit: str) -> str:
    if _finite(value) is None:  # inf / nan as Python writes them; no float holds the rest
        word = repr(value) if isinstance(value, float) else "out of range"
        return f"{word} {unit}".strip()
    value = float(value)
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
