"""Jobs that outlive their window, document, pane or dialog never crash the app.

Hundreds of windows are opened and closed in one process while scans, hashes, jailed loads,
diffs, manifests and conversions run; documents and dialogs are closed under running jobs,
and the garbage collector runs from a non-UI thread the whole time (as it does whenever a
worker thread allocates). pytest's faulthandler reports a crash with every thread's stack.
"""

from __future__ import annotations

import gc
import random
import shutil
import threading
import time
from pathlib import Path

import pytest
from gui_support import LOAD_TIMEOUT_MS, wait_loaded, worker_pids
from PySide6.QtCore import QCoreApplication, QEventLoop

from inspector.gui.convert_dialog import ConvertDialog
from inspector.gui.jobs import JobRunner
from inspector.gui.main_window import MainWindow

pytest_plugins = ("gui_fixtures",)  # fixtures: small, gui_settings

ROUNDS = 100  # windows; with one to three documents each, about 200 documents
FULL_LOAD_EVERY = 40  # now and then a load runs to the end, so delivery paths run too


def _spin(ms: int) -> None:
    deadline = time.monotonic() + ms / 1000
    while True:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 5)
        if time.monotonic() >= deadline:
            return


def _snapshot(doc) -> tuple:
    return (doc.state, doc.message, doc.scan is None, doc.inspect is None, doc.sha256,
            len(doc.tensors), doc.verify is None, doc.diff is None, doc.conversion is None)


@pytest.fixture
def collector_on_another_thread():
    """Run the cyclic garbage collector from a non-UI thread until the test ends."""
    stop = threading.Event()

    def collect() -> None:
        while not stop.wait(0.02):
            gc.collect()

    thread = threading.Thread(target=collect, name="gc-elsewhere", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.fixture
def job_deaths(monkeypatch) -> list[bool]:
    """For every job the runners adopt: True when its Qt object died on the UI thread."""
    deaths: list[bool] = []
    real = JobRunner.adopt

    def adopt(self, job):
        job.destroyed.connect(
            lambda *_: deaths.append(threading.current_thread() is threading.main_thread()))
        real(self, job)

    monkeypatch.setattr(JobRunner, "adopt", adopt)
    return deaths


# Each round starts sandbox workers; on a 2-vCPU machine shared with other work the whole run
# took up to 6 minutes (about 90 s alone), so it gets more than the suite's default timeout.
@pytest.mark.timeout(1200)
def test_windows_and_documents_close_under_running_jobs(
        qtbot, small, gui_settings, tmp_path, monkeypatch, collector_on_another_thread,
        job_deaths):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder, _ = small
    files = [folder / n for n in ("benign.pt", "with_nan.pt", "wide.pt", "training.pt",
                                  "suspicious.pt")]
    rng = random.Random(20261130)
    closed: list[tuple[object, tuple]] = []
    for round_no in range(ROUNDS):
        work = tmp_path / f"r{round_no}"
        work.mkdir()
        mine = [Path(shutil.copy(f, work / f.name)) for f in rng.sample(files, rng.randint(1, 3))]
        window = MainWindow()
        window.resize(1000, 700)
        window.show()
        docs = window.open_paths(mine)
        if round_no % FULL_LOAD_EVERY == 0:
            wait_loaded(qtbot, docs[0], ("loaded", "needs_decision"))
        else:
            _spin(rng.choice([0, 2, 10, 40, 150, 400]))
        action = rng.choice(["diff", "manifest", "convert", "close-doc", "switch", "none"])
        if action == "diff" and window.integrity is not None:
            window.integrity.compare_with(files[0])
        elif action == "manifest" and window.integrity is not None:
            window.integrity.write_manifest(work / "m.sha256")
        elif action == "convert" and window.current is not None:
            window.convert_current()
            _spin(rng.choice([0, 20, 200]))
            for dialog in window.findChildren(ConvertDialog):
                dialog.close()  # deletes itself (WA_DeleteOnClose) under its running job
        elif action == "switch" and len(docs) > 1:
            window.file_list.setCurrentRow(len(docs) - 1)
        if rng.random() < 0.5 and window.current is not None:
            doc = window.current
            window.close_current()
            closed.append((doc, _snapshot(doc)))
        _spin(rng.choice([0, 5, 30]))
        window.close()
        window.deleteLater()
        del window, docs
    _spin(50)
    qtbot.waitUntil(lambda: not worker_pids(), timeout=LOAD_TIMEOUT_MS)
    late = [doc.name for doc, before in closed if _snapshot(doc) != before]
    assert not late, f"results delivered to closed documents: {late}"
    assert job_deaths and all(job_deaths), (
        f"{job_deaths.count(False)} of {len(job_deaths)} jobs died off the UI thread")
