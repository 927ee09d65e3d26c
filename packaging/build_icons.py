"""Render the application icon's PNG sizes from resources/checkpoint-inspector.svg with QtSvg.

Run after editing the SVG: `.venv/bin/python packaging/build_icons.py` (works offscreen). The PNGs
are committed so installing the app never needs this step.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "resources" / "checkpoint-inspector.svg"
OUT = ROOT / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def render(svg: Path, size: int) -> QImage:
    """The SVG drawn on a transparent square of `size` pixels."""
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg}: not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def main() -> int:
    """Write resources/icons/checkpoint-inspector-<N>.png for every size."""
    app = QGuiApplication.instance() or QGuiApplication(["build_icons", "-platform", "offscreen"])
    OUT.mkdir(exist_ok=True)
    for size in SIZES:
        target = OUT / f"checkpoint-inspector-{size}.png"
        if not render(SVG, size).save(str(target), "PNG"):
            print(f"could not write {target}", file=sys.stderr)
            return 1
        print(target.relative_to(ROOT))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
