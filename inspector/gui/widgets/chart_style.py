"""Colours for charts, banners and cell marks, picked for the current palette (light or dark).

Panes ask here instead of hard-coding colours, so every chart and banner stays readable when
View → Theme (or the system) switches between light and dark.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette

# Tableau-10 for a light background; the same hues lifted for a near-black one, where the
# dark originals (a navy blue above all) vanish.
_SERIES_LIGHT = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                 "#9467bd", "#8c564b", "#e377c2", "#17becf")
_SERIES_DARK = ("#5fa8e8", "#ffa24d", "#5cd65c", "#ff6b68",
                "#c3a3f0", "#c99a8c", "#f5a3d9", "#4fe0f0")
_ROLES_LIGHT = {"bad": "#c0392b", "good": "#2e7d32", "warn": "#d35400", "mark": "#8e44ad"}
_ROLES_DARK = {"bad": "#ff6b68", "good": "#66bb6a", "warn": "#ffa24d", "mark": "#c3a3f0"}


def is_dark(palette: QPalette) -> bool:
    """True when the palette's window colour is dark."""
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def series_colour(index: int, palette: QPalette) -> QColor:
    """The colour of data series `index` (a GPU, a curve) on this palette."""
    colours = _SERIES_DARK if is_dark(palette) else _SERIES_LIGHT
    return QColor(colours[index % len(colours)])


def role_colour(role: str, palette: QPalette) -> QColor:
    """A meaning's colour on this palette: "bad", "good", "warn" or "mark"."""
    return QColor((_ROLES_DARK if is_dark(palette) else _ROLES_LIGHT)[role])


def text_colour(palette: QPalette) -> QColor:
    """The palette's text colour (axis labels, titles)."""
    return palette.color(QPalette.ColorRole.Text)


def base_colour(palette: QPalette) -> QColor:
    """The palette's base colour (chart backgrounds)."""
    return palette.color(QPalette.ColorRole.Base)


def banner_css(role: str, palette: QPalette) -> str:
    """Style-sheet declarations for a banner of one meaning: a faint tint of the role's colour
    over the base, a border and text in the palette's text colour (readable in both themes)."""
    accent, base = role_colour(role, palette), base_colour(palette)
    mix = 0.25 if is_dark(palette) else 0.12
    tint = QColor.fromRgbF(*(b + (a - b) * mix for a, b in (
        (accent.redF(), base.redF()), (accent.greenF(), base.greenF()),
        (accent.blueF(), base.blueF()))))
    return (f"background: {tint.name()}; color: {text_colour(palette).name()}; "
            f"border: 1px solid {accent.name()}; border-radius: 4px;")
