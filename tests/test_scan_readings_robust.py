"""The loaders' readings run whatever folder the user's command runs from, and a reading
worker that dies says what killed it (from its exit status), is retried once, and is never a
guess; in a batch, the file that killed it is retried on its own and the other files keep
their readings."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_worker import arm

from inspector.sandbox.host import admission, launch
from inspector.sandbox.host.admission import dry_run_reader
from inspector.sandbox.host.jobs import SandboxError
from inspector.sandbox.protocol import PAYLOAD_ENV
from inspector.scan import readings
from inspector.scan.discover import Found
from inspector.scan.engine import SMALL_FILE, scan_batch, scan_file
from inspector.scan.result import ScanResult


def test_scan_with_a_relative_path_from_the_files_folder(tmp_path: Path) -> None:
    """A file read in place by the jailed reader (larger than SMALL_FILE) named relative to
    the command's folder: the worker runs elsewhere, so the name must reach it absolute."""
    import torch

    torch.save({"w": torch.arange(SMALL_FILE // 4 + 4096, dtype=torch.float32)},
               tmp_path / "tiny.pth")
    assert (tmp_path / "tiny.pth").stat().st_size > SMALL_FILE
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", "tiny.pth"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    record = json.loads(out.stdout.splitlines()[0])
    codes = [f["code"] for f in record["findings"]]
    assert "readings-unavailable" not in codes, record["findings"]
    assert (record["verdict"], out.returncode) == ("safe", 0)


_KILL_SELF = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"


def _arm(tmp_path: Path, monkeypatch) -> None:
    """Every reading worker started from here on kills itself with SIGKILL once jailed."""
    arm(tmp_path, monkeypatch, _KILL_SELF)


def _scan_small(tmp_path: Path) -> ScanResult:
    path = tmp_path / "small.pkl"
    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    with readings.using(dry_run_reader):
        return scan_file(path)


@pytest.mark.parametrize("forked", [False, True], ids=["cold", "forked"])
def test_a_killed_reading_worker_is_retried_once_and_named_by_its_signal(
        tmp_path: Path, monkeypatch, request, forked: bool) -> None:
    """Cold, the client reaps the worker's relay (`process.reap`); forked, the module's warm
    fork server reaps the worker and reports its status and CPU time."""
    if not forked:
        request.getfixturevalue("cold_workers")
    elif launch._fork_server is None:
        pytest.skip("no fork server can start here")
    starts: list[int] = []
    real = admission.run_job

    def counted(*args, **kwargs):
        starts.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(admission, "run_job", counted)
    _arm(tmp_path, monkeypatch)
    res = _scan_small(tmp_path)
    unread = [f.message for f in res.findings if f.code == "readings-unavailable"]
    assert len(starts) == 2  # retried once, no more
    assert len(unread) == 1 and "SIGKILL (signal 9)" in unread[0], unread
    assert "s of CPU time" in unread[0] and "retried once" in unread[0]
    assert "?" not in unread[0]  # a fact from the exit status, not a guess


def test_a_reading_worker_killed_once_is_replaced_and_the_file_read(
        tmp_path: Path, monkeypatch) -> None:
    real = admission.run_job
    ends: list[str] = []

    def first_dies(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except SandboxError as exc:
            ends.append(exc.message)
            raise
        finally:
            monkeypatch.delenv(PAYLOAD_ENV, raising=False)  # the next worker starts clean

    monkeypatch.setattr(admission, "run_job", first_dies)
    _arm(tmp_path, monkeypatch)
    res = _scan_small(tmp_path)
    assert len(ends) == 1 and "SIGKILL (signal 9)" in ends[0]
    assert [f.message for f in res.findings] == [] and res.verdict == "safe"


@pytest.mark.parametrize("code", ["timeout", "idle_timeout"])
def test_a_reading_ended_by_a_wall_clock_limit_is_not_waited_for_twice(monkeypatch, code):
    """A payload that sleeps runs into the wall-clock or idle limit: the job is not started
    again, so the user waits once, and the limit is what they are told."""
    calls = []

    def ended(job, **kwargs):
        calls.append(job)
        raise SandboxError(code, f"the reading ran past its {code} limit")

    monkeypatch.setattr(admission, "run_job", ended)
    with pytest.raises(SandboxError) as raised:
        dry_run_reader({"op": "dry-run", "readings": []})
    assert raised.value.code == code and len(calls) == 1


# Hostile code inside each reading worker (the self-test prelude): the worker kills itself
# with SIGKILL when it reaches the bytes of one file, whichever worker reads them.
_KILL_ON_MARK = """
import os, signal, sys
module = sys.modules["inspector.sandbox.worker.dry_run"]
real = module._readings
def readings(index, item, data, framed):
    if b"KILL-THE-READER" in bytes(data):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(index, item, data, framed)
module._readings = readings
"""


@pytest.mark.parametrize("killer", [0, 2, 4])
def test_a_file_that_kills_the_batch_reader_loses_no_other_files_readings(
        tmp_path: Path, monkeypatch, killer: int) -> None:
    """Five files read by one worker; the one at `killer` kills every worker that reads it.
    It is retried once on its own and says what killed it; one new worker reads the four
    others, whose verdicts stand on their readings."""
    files = []
    for n in range(5):
        path = tmp_path / f"file{n}.pkl"
        note = "KILL-THE-READER" if n == killer else f"plain {n}"
        path.write_bytes(pickle.dumps({"note": note, "w": [1.0, float(n)]}))
        files.append(path)
    arm(tmp_path, monkeypatch, _KILL_ON_MARK)
    jobs: list[int] = []
    real = admission.run_job

    def counted(job, **kwargs):
        jobs.append(len(job.get("readings", [])))
        return real(job, **kwargs)

    monkeypatch.setattr(admission, "run_job", counted)
    with readings.using(dry_run_reader):
        results = scan_batch([Found(p, True) for p in files])
    for n, res in enumerate(results):
        unread = [f.message for f in res.findings if f.code == "readings-unavailable"]
        if n == killer:
            assert len(unread) == 1 and "SIGKILL (signal 9)" in unread[0], unread
            assert "retried once" in unread[0] and res.verdict == "suspicious"
        else:
            assert unread == [] and res.verdict == "safe", (n, res.findings)
    # the batch, the killer alone, the four others: three workers, never one per file
    assert len(jobs) == 3 and jobs[1] == 1 and jobs[2] == 4, jobs
