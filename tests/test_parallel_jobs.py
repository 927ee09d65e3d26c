"""`--jobs N`: several jailed workers at once give what one at a time gives (report JSON,
converted bytes, manifest), the first failure stops the rest, and no worker or fork server
outlives its command (issue 17). The runner itself is `sandbox.host.parallel.run_parallel`."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
from pathlib import Path

import factories
import pytest
import torch
from sandbox_fixtures import sandbox_processes

from inspector.cli import main
from inspector.core import envinfo
from inspector.core.progress import Cancelled, CancelToken
from inspector.sandbox.host.parallel import default_jobs, run_parallel

OWN_WORKERS = True  # how workers start is under test here: no session fork server

WAIT_S = 120.0
"""A bound on waits that only a broken runner would reach (never a timing assertion)."""


# --- the runner ------------------------------------------------------------------------------


def test_results_keep_input_order_whatever_finishes_first():
    release = [threading.Event() for _ in range(4)]

    def job(i: int, cancel: CancelToken) -> int:
        # each job waits for the one after it, so they finish in reverse order
        if i < 3:
            assert release[i + 1].wait(WAIT_S)
        release[i].set()
        return i * 10

    assert run_parallel(job, range(4), jobs=4) == [0, 10, 20, 30]


def test_no_more_jobs_at_once_than_asked():
    lock = threading.Lock()
    running, peak = 0, 0
    both_in = threading.Barrier(2, timeout=WAIT_S)

    def job(i: int, cancel: CancelToken) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        if i < 2:
            both_in.wait()  # the first two meet: two really do run at once
        with lock:
            running -= 1
        return i

    assert run_parallel(job, range(7), jobs=2) == list(range(7))
    assert peak == 2


def test_the_first_failure_cancels_the_rest_and_is_raised():
    token = CancelToken()
    stopped: list[int] = []
    finished: list[int] = []
    lock = threading.Lock()

    others_running = threading.Barrier(3, timeout=WAIT_S)

    def job(i: int, cancel: CancelToken) -> int:
        if i < 3:
            others_running.wait()  # jobs 1 and 2 are running when job 0 fails
        if i == 0:
            raise ValueError("shard 0 is broken")
        # the others run until the token stops them, as a worker does until it is killed
        for _ in range(int(WAIT_S / 0.01)):
            if cancel.cancelled:
                with lock:
                    stopped.append(i)
                raise Cancelled()
            threading.Event().wait(0.01)
        with lock:
            finished.append(i)
        return i

    with pytest.raises(ValueError, match="shard 0 is broken"):
        run_parallel(job, range(6), jobs=3, cancel=token)
    assert token.cancelled
    assert finished == []  # every job that started was stopped; the rest never ran
    assert {1, 2} <= set(stopped)


def test_one_job_runs_on_the_calling_thread_and_reports_progress():
    seen: list[tuple[int, int]] = []
    threads = run_parallel(lambda i, cancel: threading.get_ident(), range(3), jobs=1,
                           progress=lambda done, total: seen.append((done, total)))
    assert set(threads) == {threading.get_ident()}
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_a_cancelled_token_starts_nothing():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        run_parallel(lambda i, cancel: i, range(3), jobs=1, cancel=token)


def test_the_default_is_one_job_per_core():
    assert 1 <= default_jobs() <= (os.cpu_count() or 1)


# --- the commands ----------------------------------------------------------------------------


@pytest.fixture
def nothing_outlives():
    """The command must have stopped every worker and its fork server when it returns."""
    assert sandbox_processes() == []
    yield
    assert sandbox_processes() == [], "a sandbox process outlived its command"


def _bytes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> Path:
    """A transformers-4 style `.bin` folder of several shards (seeded weights)."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("model") / "gpt2"
    factories.hf_bin_folder(folder, factories.tiny_gpt2(), "200KB")
    assert len(list(folder.glob("pytorch_model-*.bin"))) >= 3
    return folder


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_convert_folder_in_parallel_writes_the_same_bytes(gpt2_folder, tmp_path, capsys,
                                                          nothing_outlives):
    before = _bytes(gpt2_folder)
    outputs = {}
    for jobs in ("1", "3"):
        out = tmp_path / f"jobs-{jobs}"
        assert main(["convert", str(gpt2_folder), "-o", str(out), "--jobs", jobs, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert [Path(s["input"]).name for s in report["shards"]] == sorted(
            p.name for p in gpt2_folder.glob("pytorch_model-*.bin"))
        outputs[jobs] = _bytes(out)
    assert len(outputs["3"]) >= 4  # the shards and their index
    assert outputs["1"] == outputs["3"]
    assert _bytes(gpt2_folder) == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_a_failing_shard_stops_the_folder_and_keeps_nothing(gpt2_folder, tmp_path, capsys,
                                                            nothing_outlives):
    folder = tmp_path / "broken"
    folder.mkdir()
    for path in gpt2_folder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    second = sorted(folder.glob("pytorch_model-*.bin"))[1]
    state = torch.load(second, weights_only=True)
    # a global weights_only refuses: this shard's worker fails to load (exit 5)
    torch.save({**state, "hparams": argparse.Namespace(lr=0.5)}, second)
    before = _bytes(folder)
    out = tmp_path / "converted"
    assert main(["convert", str(folder), "-o", str(out), "--jobs", "3", "--json"]) == 5
    doc = json.loads(capsys.readouterr().out)
    assert "argparse.Namespace" in doc["error"]["message"]
    assert list(out.iterdir()) == []  # no shard, sidecar, index or temp file was kept
    assert _bytes(folder) == before


def _files(count: int, folder: Path) -> list[Path]:
    folder.mkdir()
    return [factories.save_state_dict(folder / f"step-{i}.pt", factories.small_state_dict(i))
            for i in range(count)]


def test_manifest_with_tensors_in_parallel_is_the_same_manifest(tmp_path, capsys,
                                                                nothing_outlives):
    folder = tmp_path / "run"
    _files(4, folder)
    texts = {}
    for jobs in ("1", "4"):
        manifest = tmp_path / f"jobs-{jobs}.json"
        assert main(["manifest", "create", str(folder), "-o", str(manifest), "--jobs", jobs]) == 0
        assert "4 files, 16 tensors" in capsys.readouterr().out
        texts[jobs] = json.loads(manifest.read_text())
    assert texts["1"] == texts["4"]


def test_manifest_stops_at_a_file_whose_tensors_cannot_be_read(tmp_path, capsys,
                                                               nothing_outlives):
    folder = tmp_path / "run"
    _files(3, folder)
    torch.save({"w": torch.arange(6.0), "hparams": argparse.Namespace(lr=0.5)},
               folder / "step-1.pt")
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(folder), "-o", str(manifest), "--jobs", "3"]) == 3
    assert "argparse.Namespace" in capsys.readouterr().err
    assert not manifest.exists()


def _without_timings(value):
    """A result without what differs from run to run (timings)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if k not in ("timing", "elapsed_ms", "timings")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _comparable(doc: dict) -> list[dict]:
    """A report's files without what differs from run to run (timings, worker ids)."""
    return _without_timings(doc["files"])


@pytest.mark.usefixtures("qapp")
def test_report_in_parallel_gives_the_same_report(tmp_path, capsys, monkeypatch,
                                                   nothing_outlives):
    real = envinfo.collect
    monkeypatch.setattr(envinfo, "collect", lambda probe_torch=True: real(probe_torch=False))
    folder = tmp_path / "run"
    _files(3, folder)
    docs = {}
    for jobs in ("1", "3"):
        out = tmp_path / f"jobs-{jobs}.json"
        assert main(["report", str(folder), "-o", str(out), "--jobs", jobs, "--quiet"]) == 0
        docs[jobs] = json.loads(out.read_text())
    capsys.readouterr()
    paths = [f["file"]["path"] for f in docs["3"]["files"]]
    assert paths == [str(p) for p in sorted(folder.iterdir())]  # input order
    assert _comparable(docs["1"]) == _comparable(docs["3"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_each_worker_runs_on_its_share_of_the_cores(tmp_path, nothing_outlives):
    from inspector.sandbox.host.client import fork_server, inspect_file

    files = _files(2, tmp_path / "run")

    def threads(path: Path, cancel: CancelToken) -> int:
        report = inspect_file(path, cancel=cancel)
        assert report.error is None
        return report.timing["compute_threads"]

    cores = default_jobs()
    alone = threads(files[0], CancelToken())  # a cold worker, the only job
    with fork_server():
        together = run_parallel(threads, files, jobs=2)
        after = threads(files[1], CancelToken())  # the pool's share ends with the pool
    assert alone == cores and after == cores
    assert together == [max(1, cores // 2)] * 2


def test_verify_with_tensors_in_parallel_gives_the_same_result(tmp_path, capsys,
                                                               nothing_outlives):
    folder = tmp_path / "run"
    files = _files(4, folder)
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(folder), "-o", str(manifest), "--jobs", "1"]) == 0
    # one tensor changed in place (same size): only its tensor and file hash differ
    torch.save({**factories.small_state_dict(2), "fc2.bias": torch.ones(2)}, files[2])
    capsys.readouterr()
    docs = {}
    for jobs in ("1", "2"):
        assert main(["verify", "-m", str(manifest), str(folder), "--jobs", jobs,
                     "--json"]) == 1
        docs[jobs] = json.loads(capsys.readouterr().out)
    assert docs["1"] == docs["2"]
    assert [t["status"] for t in docs["2"]["tensors"]].count("ok") == 15


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_inspect_of_shards_in_parallel_gives_the_same_result(gpt2_folder, capsys,
                                                             nothing_outlives):
    docs = {}
    for jobs in ("1", "3"):
        assert main(["inspect", str(gpt2_folder), "--json", "--jobs", jobs]) == 0
        docs[jobs] = json.loads(capsys.readouterr().out)
    assert docs["3"]["error"] is None and len(docs["3"]["shards"]) >= 3
    assert [s["file"] for s in docs["3"]["shards"]] == sorted(
        p.name for p in gpt2_folder.glob("pytorch_model-*.bin"))
    assert _without_timings(docs["1"]) == _without_timings(docs["3"])
