"""Screenshots of the empty window, of every pane of the main window and of its dialogs, at
1280×720 and 1920×1080, light and dark, for a person to look at:
tests/artifacts/screens/SCENE-WxH-THEME.png.

After the empty window, it holds the built-in samples (safe and dangerous), a small
checkpoint verified against its manifest and compared with a copy that has one flipped
exponent bit, a 6-layer model with a flipped exponent (the radar's case), a NaN, a
CRC-damaged, a truncated and a safetensors file, and a parent folder of two sharded models;
the GPU pane reads two fake GPUs live, then replays a log with a critical ECC alert behind a
later temperature warning."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import pytest
from fake_pynvml import FakeGpu, FakeNvml, install
from gui_support import LOAD_TIMEOUT_MS, build, flip_exponent_bit, wait_loaded
from PySide6.QtCore import QPoint
from PySide6.QtGui import QPainter, QPixmap
from PySide6.QtWidgets import QApplication, QWidget
from test_gpu_alerts import ecc_then_hot_log

from inspector.gui import app as appmod
from inspector.gui.dialogs.convert_dialog import ConvertDialog
from inspector.gui.dialogs.report_export import ScopeDialog
from inspector.gui.panes.consistency_layout import PLOT_MIN_HEIGHT

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small

SIZES = ((1280, 720), (1920, 1080))
THEMES = ("light", "dark")
FLIPPED = "model.layers.3.self_attn.k_proj.weight"  # tests/factories.py RADAR_FLIP


def over(window: QWidget, dialog: QWidget) -> QPixmap:
    """The window with `dialog` drawn centred on it, as a user sees it (offscreen, a dialog is
    its own top-level window, so the window's grab alone leaves it out)."""
    picture = window.grab()
    dialog.adjustSize()
    top_left = QPoint((window.width() - dialog.width()) // 2,
                      (window.height() - dialog.height()) // 2)
    painter = QPainter(picture)
    painter.drawPixmap(top_left, dialog.grab())
    painter.end()
    return picture


@pytest.mark.timeout(600)
def test_screenshots_of_every_pane_and_dialog(window, qtbot, small, tmp_path, artifacts,
                                              monkeypatch):
    install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, temperature=61)]))
    folder, _ = small
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(folder / "benign.pt", work / "model.pt")
    flip_exponent_bit(folder / "benign.pt", tmp_path / "model-flipped.pt")
    build(tmp_path / "radar", "radar")
    damage = tmp_path / "damage"
    build(damage, "damage")
    replay_log = tmp_path / "ecc-then-hot.csv"
    replay_log.write_text(ecc_then_hot_log())
    # Other tests save their pictures in the same folder, at the same time under xdist: this
    # test checks that it wrote each of its own, and leaves the others' alone.
    shots = artifacts / "screens"
    shots.mkdir(exist_ok=True)
    started = time.time() - 1  # mtimes may be coarser than time.time()

    def shoot(scenes: dict[str, Callable[[], QWidget | None]]) -> None:
        """Save every scene at every size in every theme; a scene may return a dialog."""
        try:
            for theme in THEMES:
                appmod.set_theme(theme)
                for width, height in SIZES:
                    window.resize(width, height)
                    for name, scene in scenes.items():
                        dialog = scene()
                        QApplication.processEvents()
                        qtbot.wait(100)
                        assert (window.width(), window.height()) == (width, height)
                        picture = over(window, dialog) if dialog else window.grab()
                        assert picture.save(str(shots / f"{name}-{width}x{height}-{theme}.png"))
                        if name == "consistency":  # each chart keeps its height; they scroll
                            graphics = window.consistency.graphics
                            shown = [p for p in window.consistency.plots.values()
                                     if p in graphics.ci.items]
                            assert len(shown) == 4
                            assert graphics.height() >= len(shown) * PLOT_MIN_HEIGHT
        finally:
            appmod.set_theme("system")

    shoot({"empty": lambda: None})
    benign, malicious = window.open_samples()
    model, layered = window.open_paths([work / "model.pt", tmp_path / "radar" / "flipped.pt"])
    nan, crc, truncated, safetensors = window.open_paths(
        [damage / "nan.pt", damage / "crc.pt", damage / "truncated.pt",
         damage / "model.safetensors"])
    alpha, beta = window.open_paths([damage / "parent"])
    wait_loaded(qtbot, malicious, ("blocked",))
    wait_loaded(qtbot, truncated, ("error",))
    for doc in (benign, model, layered, nan, crc, safetensors):
        wait_loaded(qtbot, doc)
    qtbot.waitUntil(lambda: all(d.state == "loaded" and d.result is not None
                                for d in (alpha, beta)), timeout=LOAD_TIMEOUT_MS)
    for doc in (layered, nan):
        qtbot.waitUntil(lambda d=doc: d.health is not None)
    docs = window.docs

    def show(doc, pane: QWidget) -> None:
        window.file_list.setCurrentRow(docs.index(doc))
        window.tabs.setCurrentWidget(pane)

    # The Integrity pane's result: a manifest check, then a compare that keeps it beside.
    show(model, window.integrity)
    window.integrity.write_manifest(work / "model.sha256")
    qtbot.waitUntil(lambda: (work / "model.sha256").exists(), timeout=LOAD_TIMEOUT_MS)
    window.integrity.verify_with(work / "model.sha256")
    qtbot.waitUntil(lambda: model.verify is not None, timeout=LOAD_TIMEOUT_MS)
    window.integrity.compare_with(tmp_path / "model-flipped.pt")
    qtbot.waitUntil(lambda: model.diff is not None, timeout=LOAD_TIMEOUT_MS)

    window.act_convert.trigger()
    convert = window.findChild(ConvertDialog)
    qtbot.waitUntil(lambda: convert.result is not None, timeout=LOAD_TIMEOUT_MS)
    assert convert.result.verified is True
    export = ScopeDialog(model, [model], docs, window)
    export.show()

    def pickle() -> None:
        show(malicious, window.pickle)
        qtbot.waitUntil(lambda: window.pickle.op_model.rowCount() > 0, timeout=30_000)
        window.pickle.globals_view.selectRow(0)

    def pickle_call() -> None:
        """The payload's call as the evidence link opens it, then the row after it selected:
        the GLOBAL and the REDUCE that calls it both tinted."""
        show(malicious, window.pickle)
        (site,) = next(g for g in malicious.scan.globals if g.call_sites).call_sites
        qtbot.waitUntil(lambda: window.pickle.show_opcode(site["member"], site["offset"]) >= 0,
                        timeout=30_000)
        model = window.pickle.op_model
        call = model.at_offset(site["offset"])
        assert model.rows[call].opcode == "REDUCE" and model.rows[call].severity == "dangerous"
        window.pickle.op_view.selectRow(call + 1)

    def tensors(button: str) -> Callable[[], None]:
        def scene() -> None:
            show(layered, window.tensors)
            getattr(window.tensors, button).click()
            assert window.tensors.select_key(FLIPPED)
        return scene

    def gpu(replay: bool) -> Callable[[], None]:
        """The GPU pane sampling the fake GPUs live, or replaying a log where GPU 1's
        uncorrected ECC count turns from [N/A] to 1 before GPU 0's later temperature
        warning: the banner must show the critical ECC alert."""
        def scene() -> None:
            tab("GPU")()
            pane = window.gpu
            if replay and pane.source_label != str(replay_log):
                pane.open_log(str(replay_log))
                qtbot.waitUntil(lambda: pane.source_label == str(replay_log), timeout=30_000)
            elif not replay and pane.sampler is None:
                pane.start_live()
                qtbot.waitUntil(lambda: pane.store.count(1) >= 3, timeout=30_000)
            if replay:
                assert "uncorrected ECC" in pane.banner_text.text()
        return scene

    def tab(title: str) -> Callable[[], None]:
        def scene() -> None:
            show(benign, next(window.tabs.widget(i) for i in range(window.tabs.count())
                              if window.tabs.tabText(i) == title))
        return scene

    scenes: dict[str, Callable[[], QWidget | None]] = {
        "overview-safe": lambda: show(benign, window.overview),
        "overview-dangerous": lambda: show(malicious, window.overview),
        "pickle-dangerous": pickle,
        "pickle-call": pickle_call,
        "tensors-table": tensors("table_button"),
        "tensors-tree": tensors("tree_button"),
        "tensors-radar": tensors("radar_button"),
        "integrity-compare": lambda: show(model, window.integrity),
        "damaged-nan": lambda: show(nan, window.overview),
        "damaged-flipped": lambda: show(layered, window.overview),
        "damaged-crc": lambda: show(crc, window.overview),
        "damaged-truncated": lambda: show(truncated, window.overview),
        "safetensors": lambda: show(safetensors, window.overview),
        "two-models": lambda: show(alpha, window.overview),
        "gpu-live": gpu(replay=False),
        "gpu-replay-ecc": gpu(replay=True),
        "consistency": tab("Consistency"),
        "convert-dialog": lambda: (show(model, window.overview), convert)[1],
        "export-dialog": lambda: (show(model, window.overview), export)[1],
    }
    tab("GPU")()
    qtbot.waitUntil(lambda: window.gpu is not None and window.gpu.store.count(1) >= 3,
                    timeout=30_000)
    try:
        shoot(scenes)
    finally:
        window.gpu.shutdown()
    written = {p.name for p in shots.glob("*.png") if p.stat().st_mtime >= started}
    assert {f"{name}-{w}x{h}-{theme}.png" for name in ["empty", *scenes] for w, h in SIZES
            for theme in THEMES} <= written
    assert "Differs from" in window.integrity.summary.toPlainText()
