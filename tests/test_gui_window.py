"""The real main window, driven offscreen: drops, verdicts, the jailed load, cancel, timing."""

from __future__ import annotations

import gc
import hashlib
import shutil
import sys
import time
from pathlib import Path

import factories
import numpy as np
import pytest
import torch
from gui_support import LOAD_TIMEOUT_MS, build, drop_files, wait_loaded, worker_pids
from PySide6.QtCore import QElapsedTimer, QTimer

from inspector.core.vocabulary import Severity
from inspector.gui import roles
from inspector.gui.main_window import MainWindow
from inspector.gui.panes.tensor_models import COLUMNS
from inspector.scan.engine import scan_paths

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small, worker_requests


def cell(window: MainWindow, row: int, field: str) -> str:
    column = next(i for i, c in enumerate(COLUMNS) if c.field == field)
    return window.tensors.model.index(row, column).data()


def test_empty_state_invites_a_drop(window):
    assert window.stack.currentWidget() is window.empty
    assert "Drop a .pt / .pth / .bin / .ckpt / .safetensors file or a folder of shards" in (
        window.empty.findChildren(type(window.stage_label))[1].text())
    assert window.empty.open_button.isVisible() and window.empty.sample_button.isVisible()
    assert not window.act_convert.isEnabled()


def test_drop_benign_fills_the_tensor_table(window, qtbot, small, worker_requests):
    folder, expected = small
    had_torch = "torch" in sys.modules
    path = folder / "benign.pt"
    assert drop_files(window.empty, [path])
    doc = window.current
    assert doc is not None and doc.path == path.resolve()
    wait_loaded(qtbot, doc)
    want = expected["benign.pt"]
    qtbot.waitUntil(lambda: window.tensors.model.rowCount() == len(want), timeout=5000)
    rows = {window.tensors.model.index(r, 0).data(roles.ROW)["key"]: r for r in range(len(want))}
    for key, stats in want.items():
        row = window.tensors.model.row_at(rows[key])
        assert row["dtype"] == stats["dtype"] and row["shape"] == stats["shape"]
        assert row["numel"] == stats["numel"]
        assert row["min"] == pytest.approx(stats["min"], abs=1e-6)
        assert row["max"] == pytest.approx(stats["max"], abs=1e-6)
        assert cell(window, rows[key], "numel") == f"{stats['numel']:,}"
    assert doc.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert window.overview.fields["sha256"].text() == doc.sha256
    assert window.overview.banner.title.text().startswith("Safe")
    assert doc.sandbox and doc.sandbox["level"] in ("full", "partial", "process-only")
    assert [r["path"] for r in worker_requests] == [str(path.resolve())]
    assert "7 tensors" not in window.tensors.summary_label.text()
    assert f"{len(want)} tensors" in window.tensors.summary_label.text()
    # The GUI never imports torch (a clean process checks it in test_gui_samples.py too).
    assert had_torch or "torch" not in sys.modules


def test_drop_malicious_is_dangerous_and_never_reaches_a_worker(
        window, qtbot, tmp_path, canary, worker_requests):
    payload = factories.mal_os_system(tmp_path / "model.bin", canary)
    sample = window.open_samples()
    assert drop_files(window.tabs, [payload])
    docs = [d for d in window.docs if d.verdict != "safe" or d.path == payload]
    qtbot.waitUntil(lambda: all(d.state in ("blocked", "loaded") and d.sha256 for d in
                                window.docs), timeout=LOAD_TIMEOUT_MS)
    dangerous = [d for d in window.docs if d.verdict == "dangerous"]
    assert {d.path for d in dangerous} == {payload.resolve(), sample[1].path}
    for doc in dangerous:
        window.file_list.setCurrentRow(window.docs.index(doc))
        assert window.overview.banner.title.text().startswith("Dangerous")
        assert "not started" in window.overview.fields["sandbox"].text()
        assert window.tensors.model.rowCount() == 0
        assert not doc.worker_started and doc.sandbox is None
        assert doc.state == "blocked"
        assert doc.sha256 == hashlib.sha256(doc.path.read_bytes()).hexdigest()
    assert "os.system" in window.docs[-1].scan.globals[0].import_name or docs
    # Only the benign sample ever reached a worker; the demo's marker was never written.
    assert [r["path"] for r in worker_requests] == [str(sample[0].path)]
    assert not (sample[0].path.parent / "MALICIOUS_DEMO_PAYLOAD_RAN").exists()
    assert not window.act_convert.isEnabled()


def test_suspicious_file_asks_and_allows_exactly_its_globals(
        window, qtbot, small, worker_requests):
    folder, _ = small
    (doc,) = window.open_paths([folder / "suspicious.pt"])
    wait_loaded(qtbot, doc, ("needs_decision",))
    assert window.overview.decision.isVisible()
    assert "argparse.Namespace" in window.overview.decision_text.text()
    assert worker_requests == []
    window.overview.allow_button.click()
    wait_loaded(qtbot, doc)
    assert [r["allow_globals"] for r in worker_requests] == [["argparse.Namespace"]]
    assert any(o["key"].startswith("args") for o in doc.objects)
    qtbot.waitUntil(lambda: window.tensors.model.rowCount() == 4, timeout=5000)


def test_nan_rows_are_highlighted_and_filter_sort_tree_work(window, qtbot, small):
    folder, _ = small
    (doc,) = window.open_paths([folder / "with_nan.pt"])
    wait_loaded(qtbot, doc)
    model = window.tensors.model
    qtbot.waitUntil(lambda: model.rowCount() == 2, timeout=5000)
    bad = model.view_row_of("bad.weight")
    ok = model.view_row_of("ok.weight")
    assert model.index(bad, 0).data(8) is not None  # BackgroundRole: highlighted
    assert model.index(ok, 0).data(8) is None
    assert cell(window, bad, "nan") == "1" and cell(window, bad, "inf") == "1"
    assert "1 with NaN/Inf" in window.tensors.summary_label.text()
    window.tensors.filter.setText("bad")
    qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=5_000)
    window.tensors.filter.setText("*.WEIGHT")
    qtbot.waitUntil(lambda: model.rowCount() == 2, timeout=5_000)
    window.tensors.filter.setText("")
    assert window.tensors.select_key("bad.weight")
    stats = {window.tensors.stats.item(i, 0).text(): window.tensors.stats.item(i, 1).text()
             for i in range(window.tensors.stats.rowCount())}
    assert stats["NaN"] == "1" and stats["Inf"] == "1" and stats["Max"] == "1"
    csv_text = window.tensors.copy_csv()
    assert csv_text.splitlines()[0].startswith("key,dtype,shape")
    assert "bad.weight,float32,4," in csv_text


def test_tree_view_groups_by_dotted_prefix(window, qtbot, small):
    folder, expected = small
    (doc,) = window.open_paths([folder / "wide.pt"])
    wait_loaded(qtbot, doc)
    window.tensors.tree_button.click()
    tree = window.tensors.tree_model
    qtbot.waitUntil(lambda: tree.rowCount() == 1, timeout=5000)
    blocks = tree.index(0, 0)
    assert blocks.data() == "blocks" and tree.rowCount(blocks) == 40
    assert tree.index(0, 1).data() == "200"  # tensors under the prefix
    seven = tree.index(7, 0, blocks)
    assert seven.data() == "7" and tree.rowCount(seven) == 5
    layer2 = tree.index(2, 0, seven)
    assert layer2.data() == "layer2" and layer2.data(roles.ROW) is None
    leaf = tree.index(0, 0, layer2)
    assert leaf.data(roles.ROW)["key"] == "blocks.7.layer2.weight"
    assert leaf.data(roles.ROW)["max"] == expected["wide.pt"]["blocks.7.layer2.weight"]["max"]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A 256 MiB checkpoint of 64 four-MiB tensors."""
    folder = tmp_path_factory.mktemp("gui-big")
    build(folder, "big", "256")
    return folder / "big.pt"


def test_cancel_stops_the_worker(window, qtbot, big, cold_workers):
    (doc,) = window.open_paths([big])
    qtbot.waitUntil(lambda: doc.worker_started and bool(worker_pids()), timeout=LOAD_TIMEOUT_MS)
    assert window.cancel_button.isVisible()
    window.cancel_button.click()
    qtbot.waitUntil(lambda: doc.state == "cancelled", timeout=30_000)
    qtbot.waitUntil(lambda: not worker_pids(), timeout=10_000)
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=10_000)
    assert len(doc.tensors) < 64


def test_ui_thread_keeps_ticking_while_a_big_file_loads(window, qtbot, big):
    """A 10 ms UI timer keeps ticking while 256 MiB are scanned, hashed and loaded.

    Two measures per gap between ticks: wall time, and the CPU time the UI thread itself
    spent in it (what this app's code costs). The test asserts a regression bound on the UI
    thread's own work, which holds on a busy machine too; the 100 ms target for the wait a
    user sees is measured by benchmarks/bench_gui_responsiveness.py.
    """
    clock = QElapsedTimer()
    gaps: list[tuple[float, float]] = []  # (wall s, UI-thread CPU s)
    cpu = [time.thread_time()]

    def tick() -> None:
        now = time.thread_time()
        gaps.append((clock.restart() / 1000, now - cpu[0]))
        cpu[0] = now

    timer = QTimer()
    timer.setInterval(TICK_MS)
    timer.timeout.connect(tick)
    # Earlier tests leave torch and their objects in this process; a full collection over
    # them takes hundreds of ms on the UI thread. The GUI process never holds them, so they
    # are moved out of the collector's sight for the measurement.
    gc.collect()
    gc.freeze()
    try:
        cpu[0] = time.thread_time()
        clock.start()
        timer.start()
        (doc,) = window.open_paths([big])
        window.tabs.setCurrentWidget(window.tensors)
        wait_loaded(qtbot, doc)
        timer.stop()
    finally:
        gc.unfreeze()
    assert len(doc.tensors) == 64 and doc.sha256
    # The measure needs the load to span many ticks; 256 MiB took 490-1,900 ms (49-190
    # ticks) on 2 busy cores, so the floor leaves room for a quicker load.
    assert len(gaps) >= MIN_TICKS, f"the load ended after {len(gaps)} ticks: too short to measure"
    worst_wall = max(w for w, _ in gaps)
    worst_cpu = max(c for _, c in gaps)
    print(f"\n{len(gaps)} ticks; worst wait {worst_wall * 1000:.0f} ms, worst UI-thread work "
          f"{worst_cpu * 1000:.0f} ms")
    assert worst_cpu <= CPU_BOUND_S, (
        f"the UI thread worked {worst_cpu * 1000:.0f} ms without a break")


TICK_MS = 10
MIN_TICKS = 20
CPU_BOUND_S = 0.5  # a regression bound: measured 37-68 ms; the target is 100 ms of waiting


def test_dropping_a_folder_lists_its_checkpoints_with_verdict_icons(
        window, qtbot, small, tmp_path, canary):
    folder, _ = small
    shards = tmp_path / "download"
    (shards / "sub").mkdir(parents=True)
    shutil.copy(folder / "benign.pt", shards / "model-00001.bin")
    shutil.copy(folder / "with_nan.pt", shards / "sub" / "model-00002.pt")
    factories.mal_os_system(shards / "extra.pkl", canary)
    factories.mal_os_system(shards / ".hidden.pkl", canary)  # a dot hides nothing from the scan
    (shards / "config.json").write_text('{"hidden_size": 8}')
    (shards / "README.md").write_text("# model card\n")
    assert drop_files(window.empty, [shards])
    # The window lists what `scan DIR` lists: files that are no checkpoint leave once scanned.
    expected = [".hidden.pkl", "extra.pkl", "model-00001.bin", "model-00002.pt"]
    qtbot.waitUntil(lambda: [d.name for d in window.docs] == expected, timeout=LOAD_TIMEOUT_MS)
    names = [window.file_list.item(i).text() for i in range(window.file_list.count())]
    assert names == expected
    for doc in window.docs:
        wait_loaded(qtbot, doc, ("loaded", "blocked"))
    icons = {d.name: window.file_list.item(i).icon().cacheKey()
             for i, d in enumerate(window.docs)}
    # with_nan.pt is safe code but NaN weights: its list icon is the Damaged badge
    assert len({icons["extra.pkl"], icons["model-00001.bin"], icons["model-00002.pt"]}) == 3
    assert [d.verdict for d in window.docs] == ["dangerous", "dangerous", "safe", "safe"]
    assert [Path(r.path).name for r in scan_paths([shards]) if r.verdict != "skipped"] == expected


def test_declining_a_suspicious_file_hashes_it_and_never_loads_it(
        window, qtbot, small, worker_requests):
    folder, _ = small
    (doc,) = window.open_paths([folder / "suspicious.pt"])
    wait_loaded(qtbot, doc, ("needs_decision",))
    window.overview.decline_button.click()
    wait_loaded(qtbot, doc, ("declined",))
    assert doc.sha256 == hashlib.sha256(doc.path.read_bytes()).hexdigest()
    assert worker_requests == [] and not doc.tensors
    assert "not allowed" in window.tensors.summary_label.text()
    assert not window.overview.decision.isVisible()


def test_a_file_dropped_on_a_text_box_opens_instead_of_pasting_its_path(window, qtbot, small):
    folder, _ = small
    window.open_paths([folder / "benign.pt"])
    window.tabs.setCurrentWidget(window.tensors)
    assert drop_files(window.tensors.filter, [folder / "with_nan.pt"])
    assert [d.name for d in window.docs] == ["benign.pt", "with_nan.pt"]
    assert window.tensors.filter.text() == ""
    assert window.current.name == "with_nan.pt"


def test_a_dropped_file_becomes_the_only_selected_one(window, qtbot, small):
    folder, _ = small
    window.open_paths([folder / "benign.pt"])
    assert drop_files(window.file_list, [folder / "with_nan.pt"])
    # the list takes several rows (for reports), but a drop must not add to the old selection
    assert [i.row() for i in window.file_list.selectedIndexes()] == [1]
    assert window.current.name == "with_nan.pt"


def test_a_load_that_refuses_more_globals_asks_again_and_retries(
        window, qtbot, tmp_path, monkeypatch, worker_requests):
    """The scan's list of what weights_only refuses was short (here: the numpy dtype classes
    judged safe, though the file's imports still name them): the refused load turns into a
    second question naming what it refused, and a yes loads the file. (A refusal naming a
    global the file does not import is refuted instead: claims.errors.)"""
    import inspector.scan.engine as scan_mod

    build(tmp_path, "numpy")
    path = tmp_path / "with_numpy.pt"
    real = scan_mod.scan_found

    def short_scan(found):
        result = real(found)
        for g in result.globals:  # judged as if weights_only allowed them: not asked about
            if g.module == "numpy.dtypes":
                g.severity = Severity.SAFE
        return result

    monkeypatch.setattr(scan_mod, "scan_found", short_scan)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc, ("needs_decision",))
    assert "Float32DType" not in window.overview.decision_text.text()
    window.overview.allow_button.click()
    wait_loaded(qtbot, doc, ("needs_decision",))
    assert "numpy.dtypes.Float32DType" in window.overview.decision_text.text()
    window.overview.allow_button.click()
    wait_loaded(qtbot, doc)
    first, second = (set(r["allow_globals"]) for r in worker_requests)
    assert "numpy.dtypes.Float32DType" in second - first and first < second
    assert doc.state == "loaded" and doc.tensors


def test_tools_menu_sets_the_jail_a_load_requires(window, qtbot, small, monkeypatch,
                                                   cold_workers):
    """Tools → Required sandbox is the GUI's --require-jail: Full refuses a partial jail before
    anything is loaded, Partial (the default) loads in it; the choice is remembered."""
    from inspector.gui.pipeline import required_jail_setting
    from inspector.sandbox.host import client, jobs

    monkeypatch.setattr(jobs, "_required_jail", client.DEFAULT_REQUIRED_JAIL)
    monkeypatch.setenv(client.SELFTEST_ENV, "1")
    monkeypatch.setenv(client.DISABLE_ENV, "namespaces")  # this run's jail is partial
    choices = {a.data(): a for a in window.jail_menu.actions()}
    assert set(choices) == {"full", "partial", "any"} and choices["partial"].isChecked()
    choices["full"].trigger()
    assert required_jail_setting() == "full" and choices["full"].isChecked()
    folder, _ = small
    (doc,) = window.open_paths([folder / "benign.pt"])
    wait_loaded(qtbot, doc, ("load_failed",))
    assert "jail" in doc.message and not doc.tensors
    window.close_current()
    choices["partial"].trigger()
    (doc,) = window.open_paths([folder / "benign.pt"])
    wait_loaded(qtbot, doc)
    assert doc.sandbox["level"] == "partial" and doc.tensors


def test_numpy_values_load_after_one_allow(window, qtbot, tmp_path, worker_requests):
    """NumPy arrays and scalars need globals the scan must predict in full (their dtype
    classes too): one click on Allow loads the file, no second round of refusals."""
    path = tmp_path / "with_numpy.pt"
    torch.save({"w": torch.ones(2, 2), "mask": np.arange(4, dtype=np.float32),
                "best": np.float64(0.25), "seed": np.int64(7)}, path)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc, ("needs_decision",))
    asked = doc.globals_to_allow()
    assert any(g.startswith("numpy") for g in asked) and worker_requests == []
    window.overview.allow_button.click()
    wait_loaded(qtbot, doc)
    assert [r["allow_globals"] for r in worker_requests] == [asked]
    assert {o["key"] for o in doc.objects} >= {"mask", "best", "seed"}
