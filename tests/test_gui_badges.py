"""One truth per state (issue 37): every badge ends in a state that says something, "not
judged" with its reason included; the app's badges and the exported report say the same word
in the same colour; each state of the file list has its own icon and tooltip, and a legend
opened from the list names them all.

The files are real: torch.save's bytes, scanned and loaded by the real pipeline and sandbox
worker (`gui_support.build(..., "damage")` for the NaN and CRC-damaged copies)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gui_support import LOAD_TIMEOUT_MS, build, wait_loaded
from PySide6.QtWidgets import QApplication

from inspector.core.badges import LIST_STATES, LOOKS, Badge
from inspector.gui.explain import HEALTH_PENDING
from inspector.gui.verdict_style import state_icon
from inspector.gui.widgets.file_list import LEGEND_TEXT

pytest_plugins = ("gui_fixtures",)  # fixtures: window

SIZES = ((1280, 720), (1920, 1080))


@pytest.fixture(scope="module")
def damage(tmp_path_factory):
    """nan.pt (a NaN weight) and crc.pt (a record whose CRC-32 fails), among others."""
    folder = tmp_path_factory.mktemp("badges")
    build(folder, "damage")
    return folder


def encrypted_zip(path: Path) -> Path:
    """A torch.save file whose zip records all say "encrypted" (flag bit 0), as a password-
    protected zip does: the scan cannot read its members and torch's reader refuses it."""
    import torch

    torch.save({"w": torch.ones(4)}, path)
    data = bytearray(path.read_bytes())
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        while at >= 0:
            data[at + flag_at] |= 1
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


def shoot(window, qtbot, artifacts, name: str) -> None:
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        window.resize(width, height)
        QApplication.processEvents()
        qtbot.wait(80)
        assert window.grab().save(str(shots / f"{name}-{width}x{height}-light.png"))


def test_every_badge_state_has_its_own_look_and_every_list_state_its_own_icon(qapp):
    assert set(LOOKS) == set(Badge)
    looks = [LOOKS[s] for s in LIST_STATES]
    assert len({(x.colour, x.glyph) for x in looks}) == len(LIST_STATES)
    assert len({x.word for x in looks}) == len(LIST_STATES)
    images = [state_icon(s).pixmap(32, 32).toImage() for s in LIST_STATES]
    assert all(a != b for i, a in enumerate(images) for b in images[i + 1:])
    # grey is "not judged" and only that: no judged state borrows it
    grey = {s for s in Badge if LOOKS[s].colour == LOOKS[Badge.WEIGHTS_NOT_JUDGED].colour}
    assert grey == {Badge.UNREADABLE, Badge.WEIGHTS_NOT_JUDGED, Badge.SKIPPED}


def test_a_load_the_jail_refuses_ends_the_weights_badge_in_not_judged_with_why(
        window, qtbot, tmp_path, artifacts):
    (doc,) = window.open_paths([encrypted_zip(tmp_path / "locked.pt")])
    wait_loaded(qtbot, doc, ("load_failed",))
    banner = window.overview.health_banner
    assert banner.accessibleName() == f"Weights health: {LOOKS[Badge.WEIGHTS_NOT_JUDGED].word}"
    assert banner.title.text() != HEALTH_PENDING.headline
    why = banner.subtitle.text()
    assert why.startswith("Not judged: the sandbox could not load it: ")
    assert "encryption" in why  # the loader's own reason, not a generic line
    shoot(window, qtbot, artifacts, "badge-not-judged")


def test_a_declined_load_is_a_final_state_too(window, qtbot, small):
    folder, _ = small
    (doc,) = window.open_paths([folder / "suspicious.pt"])
    wait_loaded(qtbot, doc, ("needs_decision",))
    assert window.overview.health_banner.title.text() == HEALTH_PENDING.headline  # may load
    window.overview.decline_button.click()
    qtbot.waitUntil(lambda: doc.state == "declined", timeout=LOAD_TIMEOUT_MS)
    banner = window.overview.health_banner
    assert banner.accessibleName().endswith(LOOKS[Badge.WEIGHTS_NOT_JUDGED].word)
    assert banner.subtitle.text() == "Not judged: you chose not to load it."


def _cells(report_html: str) -> list[tuple[str, str]]:
    """(colour, word) of each badge cell of the report's summary table."""
    summary = report_html.split('data-section="summary"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'<b style="color: (#[0-9a-f]{6})">([^<]+)</b>', summary)


def _banner(banner) -> tuple[str, str]:
    """(colour, word) of an Overview badge, as painted."""
    colour = re.search(r"background: (#[0-9a-f]{6})", banner.styleSheet()).group(1)
    return colour, banner.accessibleName().split(": ", 1)[1]


def test_the_app_and_the_exported_report_agree_on_a_nan_file(window, qtbot, damage, tmp_path,
                                                              artifacts):
    (doc,) = window.open_paths([damage / "nan.pt"])
    wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: doc.health is not None, timeout=LOAD_TIMEOUT_MS)
    out = tmp_path / "nan-report.html"
    window.write_report(out, [doc])
    qtbot.waitUntil(out.exists, timeout=LOAD_TIMEOUT_MS)
    code, weights = _cells(out.read_text())
    assert code == _banner(window.overview.banner)
    assert weights == _banner(window.overview.health_banner)
    assert code[1] == "No code found" and weights[1] == "Weights corrupted"
    assert code[0] != LOOKS[Badge.WEIGHTS_NOT_JUDGED].colour  # judged: not the grey
    window.tabs.setCurrentWidget(window.overview)
    shoot(window, qtbot, artifacts, "badge-nan-file")


def test_crc_damage_and_nan_weights_get_distinct_icons_tooltips_and_a_legend(
        window, qtbot, damage, artifacts):
    docs = window.open_paths([damage / "crc.pt", damage / "nan.pt"])
    for doc in docs:
        wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: docs[1].health is not None, timeout=LOAD_TIMEOUT_MS)
    crc, nan = (window.file_list.item(i) for i in range(2))
    assert crc.icon().pixmap(32, 32).toImage() != nan.icon().pixmap(32, 32).toImage()
    assert crc.toolTip().splitlines()[1] == (f"{LOOKS[Badge.DAMAGED].word}: "
                                             f"{LOOKS[Badge.DAMAGED].meaning}")
    assert nan.toolTip().splitlines()[1].startswith(f"{LOOKS[Badge.WEIGHTS_CORRUPTED].word}: ")
    button = window.files.legend_button
    assert button.text() == LEGEND_TEXT and button.isVisible()
    button.click()
    legend = window.files.legend
    qtbot.waitUntil(legend.isVisible)
    words = [word.text() for _icon, word, _meaning in legend.rows]
    assert words == [f"<b>{LOOKS[s].word}</b>" for s in LIST_STATES]
    shoot(window, qtbot, artifacts, "list-icons")
    assert legend.grab().save(str(artifacts / "screens" / "list-legend-light.png"))
