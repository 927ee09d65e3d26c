"""Jobs that outlive their window, document, pane or dialog never crash the app.

Hundreds of windows are opened and closed in one process while scans, hashes, jailed loads,
diffs, manifests and conversions run; documents and dialogs are closed under running jobs,
and other threads churn garbage the whole time, so that any collection off the UI thread
would show. pytest's faulthandler reports a crash with every thread's stack.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from gui_support import LOAD_TIMEOUT_MS, wait_loaded, worker_pids
from PySide6.QtCore import QCoreApplication, QEventLoop

from inspector.gui.app import create_application
from inspector.gui.dialogs.convert_dialog import ConvertDialog
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
    return (doc.state, doc.message, doc.scan is None, doc.result is None, doc.sha256,
            len(doc.tensors), doc.verify is None, doc.diff is None, doc.conversion is None)


@pytest.fixture
def collections_by_thread():
    """Names of the threads that ran a garbage collection, while other threads churn garbage.

    The churning threads make cycles fast enough that automatic collection would run there,
    in the middle of a job, and free Qt objects of the UI thread. The application's rule
    (inspector.gui.ui_gc) is that only the UI thread collects; this test holds it to that.
    """
    create_application([])  # as the app does: automatic collection off, a UI-thread timer on
    seen: list[str] = []

    def record(phase: str, _info: dict) -> None:
        if phase == "start":
            seen.append(threading.current_thread().name)

    def churn() -> None:
        while not stop.wait(0.005):
            for _ in range(2000):
                cycle: list = []
                cycle.append(cycle)

    stop = threading.Event()
    threads = [threading.Thread(target=churn, name=f"churn-{i}", daemon=True) for i in (1, 2)]
    gc.callbacks.append(record)
    for thread in threads:
        thread.start()
    yield seen
    stop.set()
    for thread in threads:
        thread.join()
    gc.callbacks.remove(record)


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
        qtbot, small, gui_settings, tmp_path, monkeypatch, collections_by_thread,
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
    main = threading.main_thread().name
    assert collections_by_thread, "the UI thread never collected garbage"
    assert set(collections_by_thread) == {main}, (
        f"collections ran off the UI thread: {sorted(set(collections_by_thread) - {main})}")
    assert job_deaths and all(job_deaths), (
        f"{job_deaths.count(False)} of {len(job_deaths)} jobs died off the UI thread")


_FREE_OWNER_WITH_A_RUNNING_JOB = """
import threading
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication
from inspector.gui.jobs import Job, JobRunner

app = QApplication([])
owner = QObject()  # Python-owned: freed, C++ side included, when its last reference goes
runner = JobRunner(owner)
started, release = threading.Event(), threading.Event()
ended = []

def work(emit, cancel):
    started.set()
    release.wait(20)  # then it needs the interpreter lock to return

job = Job("wait", work)
job.ended.connect(lambda: ended.append(True))
runner.start(job)
started.wait(20)
del owner  # freed here, on the UI thread, holding the interpreter lock
release.set()
while not ended:
    app.processEvents()
print("owner freed, job ended, discarded:", job.discarded)
"""


def test_freeing_an_owner_never_waits_on_its_running_jobs(python_exe):
    """A runner's owner freed while a job runs: no wait under the interpreter lock (deadlock)."""
    done = subprocess.run([python_exe, "-c", _FREE_OWNER_WITH_A_RUNNING_JOB],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    assert "owner freed, job ended, discarded: True" in done.stdout
