"""The desktop app's warm fork server: files load through forked workers once it is ready,
malicious files still never run, a killed server means cold workers, and nothing outlives
the window (issue 17)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import factories
import pytest
from gui_support import LOAD_TIMEOUT_MS, drop_files, wait_loaded
from sandbox_fixtures import sandbox_processes

from inspector.checkpoint.results import InspectResult
from inspector.core.samples import write_samples
from inspector.sandbox.host import client, launch

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytest_plugins = ("gui_fixtures",)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the fork server is Linux-only")


def _gone(pids: list[int], within: float = 30.0) -> bool:
    """Whether none of `pids` is alive (zombies count as gone) within a generous bound."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not set(pids) & set(sandbox_processes()):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def warm_window(qtbot, make_window):
    """A shown window whose warm fork server is ready; afterwards no server is left."""
    w = make_window(warm_worker=True)
    qtbot.waitUntil(lambda: _ready_server() is not None, timeout=LOAD_TIMEOUT_MS)
    yield w
    w.close()
    client.stop_fork_server()  # in case the test failed before it closed the window
    assert _gone(sandbox_processes()), "a sandbox process outlived the test"


def _ready_server():
    server = launch._fork_server
    return server if server is not None and server.pid is not None else None


def _worker_kind(doc) -> str:
    return doc.result.timing["worker"]


def test_a_small_checkpoint_loads_through_a_forked_worker(warm_window, qtbot, tmp_path):
    samples = write_samples(tmp_path)
    assert samples.benign.stat().st_size < 8192
    (doc,) = warm_window.open_paths([samples.benign])
    wait_loaded(qtbot, doc)
    assert _worker_kind(doc) == "forked"
    assert doc.tensors and doc.sandbox["level"] in ("full", "partial", "process-only")
    assert "forked" in warm_window.overview.fields["sandbox"].text()


def test_a_malicious_file_opened_with_the_server_warm_never_runs(
        warm_window, qtbot, tmp_path, canary, worker_requests):
    payload = factories.mal_os_system(tmp_path / "model.bin", canary)
    benign = write_samples(tmp_path).benign
    assert drop_files(warm_window.tabs, [payload, benign])
    docs = warm_window.docs
    qtbot.waitUntil(lambda: len(docs) == 2 and all(
        d.state in ("blocked", "loaded") and d.sha256 for d in docs), timeout=LOAD_TIMEOUT_MS)
    states = {d.path.name: d.state for d in docs}
    assert states == {"model.bin": "blocked", benign.name: "loaded"}
    # only the benign file is loaded; the jailed dry-run readings of the scan read bytes and
    # never load anything (the canary fixture proves nothing ran)
    loads = [r["path"] for r in worker_requests if r.get("op") != "dry-run"]
    assert loads == [str(benign.resolve())]
    loaded = next(d for d in docs if d.state == "loaded")
    assert _worker_kind(loaded) == "forked"


def test_closing_the_window_leaves_no_server_or_worker(warm_window, qtbot, tmp_path):
    server = _ready_server()
    (doc,) = warm_window.open_paths([write_samples(tmp_path).benign])
    wait_loaded(qtbot, doc)
    assert server.pid in sandbox_processes()
    warm_window.close()
    assert launch._fork_server is None
    assert _gone([server.pid]), "the fork server outlived the window"
    assert sandbox_processes() == []


def test_closing_the_window_while_the_server_starts_leaves_nothing(
        qtbot, make_window):
    w = make_window(warm_worker=True)
    qtbot.waitUntil(lambda: launch._fork_server is not None, timeout=LOAD_TIMEOUT_MS)
    w.close()
    assert launch._fork_server is None
    # The start job (its own thread) sees the server killed and gives up.
    qtbot.waitUntil(lambda: not w.warm._runner.active(), timeout=LOAD_TIMEOUT_MS)
    assert launch._fork_server is None
    assert _gone(sandbox_processes()) and sandbox_processes() == []


@pytest.fixture
def unwatched(monkeypatch):
    """No server is watched, so the first job after a kill is the one that finds it dead."""
    monkeypatch.setattr(launch, "_watch", lambda server: None)


def test_a_server_killed_while_idle_is_replaced_and_the_next_file_forks_from_the_new_one(
        warm_window, qtbot, tmp_path):
    server = _ready_server()
    os.kill(server.pid, signal.SIGKILL)
    assert _gone([server.pid])
    # no job ran: the replacement is started because the server ended
    qtbot.waitUntil(lambda: (new := _ready_server()) is not None and new is not server,
                    timeout=LOAD_TIMEOUT_MS)
    replacement = _ready_server()
    (doc,) = warm_window.open_paths([write_samples(tmp_path).benign])
    wait_loaded(qtbot, doc)
    assert _worker_kind(doc) == "forked" and doc.tensors
    assert launch._fork_server is replacement and replacement.pid in sandbox_processes()
    warm_window.close()
    assert _gone([replacement.pid]), "the replacement server outlived the window"


def test_a_killed_server_is_replaced_and_the_job_that_found_it_runs_cold(
        unwatched, warm_window, qtbot, tmp_path):
    server = _ready_server()
    os.kill(server.pid, signal.SIGKILL)
    assert _gone([server.pid])
    sample = write_samples(tmp_path).benign
    (doc,) = warm_window.open_paths([sample])
    wait_loaded(qtbot, doc)
    assert _worker_kind(doc) == "cold"
    assert doc.tensors
    assert "cold" in warm_window.overview.fields["sandbox"].text()
    # that job started a new server in the background; the next file forks from it
    qtbot.waitUntil(lambda: (new := _ready_server()) is not None and new is not server,
                    timeout=LOAD_TIMEOUT_MS)
    replacement = _ready_server()
    assert replacement.pid in sandbox_processes() and server.pid not in sandbox_processes()
    (again,) = warm_window.open_paths([write_samples(tmp_path / "again").benign])
    wait_loaded(qtbot, again)
    assert _worker_kind(again) == "forked"
    warm_window.close()
    assert _gone([replacement.pid]), "the replacement server outlived the window"


def test_a_server_that_cannot_start_is_reported_once_and_jobs_run_cold(
        qtbot, tmp_path, monkeypatch, make_window):
    from inspector.sandbox.host import forkclient

    monkeypatch.setattr(forkclient, "SERVER_MODULE", "inspector.sandbox.no_such_module")
    w = make_window(warm_worker=True)
    messages: list[str] = []
    w.statusBar().messageChanged.connect(lambda text: text and messages.append(text))
    qtbot.waitUntil(lambda: any("No warm sandbox worker" in m for m in messages),
                    timeout=LOAD_TIMEOUT_MS)
    assert launch._fork_server is None
    (doc,) = w.open_paths([write_samples(tmp_path).benign])
    wait_loaded(qtbot, doc)
    assert _worker_kind(doc) == "cold"
    assert sum("No warm sandbox worker" in m for m in messages) == 1
    w.close()


def test_concurrent_jobs_each_get_their_own_forked_worker(small):
    """Pool threads fork at once: each job's request and reply stay its own."""
    folder, expected = small
    names = ["benign.pt", "with_nan.pt", "wide.pt", "benign.pt", "with_nan.pt", "wide.pt"]
    results: dict[int, InspectResult] = {}
    client.start_fork_server()
    try:
        barrier = threading.Barrier(len(names))

        def job(i: int) -> None:
            barrier.wait()
            results[i] = client.inspect_file(folder / names[i])

        threads = [threading.Thread(target=job, args=(i,)) for i in range(len(names))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=LOAD_TIMEOUT_MS / 1000)
    finally:
        client.stop_fork_server()
    assert sorted(results) == list(range(len(names)))
    for i, name in enumerate(names):
        report = results[i]
        assert report.error is None, report.error
        assert report.timing["worker"] == "forked"
        assert {t.key for t in report.tensors} == set(expected[name])
    assert _gone(sandbox_processes())
