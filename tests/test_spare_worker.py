"""The worker a `scan` command starts before it reads its arguments (`launch.spare_worker`):
its one jailed job runs on it, and one nobody takes is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import factories

from inspector.cli import main
from inspector.sandbox.host import launch
from inspector.sandbox.host.jobs import run_job

OWN_WORKERS = True  # no warm fork server: these tests count cold starts


def _counted(monkeypatch) -> list:
    started: list = []
    real = launch._cold

    def cold(pass_fds):
        proc = real(pass_fds)
        started.append(proc)
        return proc

    monkeypatch.setattr(launch, "_cold", cold)
    return started


def test_a_folder_scan_reads_every_file_on_the_worker_it_started_first(tmp_path, monkeypatch,
                                                                       capsys):
    started = _counted(monkeypatch)
    factories.save_state_dict(tmp_path / "a.pt")
    factories.mal_os_system(tmp_path / "b.pkl", tmp_path / "canary")
    assert main(["scan", "--json", str(tmp_path)]) == 2
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["path"].rsplit("/", 1)[1]: r["verdict"] for r in rows} == {
        "a.pt": "safe", "b.pkl": "dangerous"}
    # the readings ran: no file rests on the walker alone
    assert not [f for r in rows for f in r["findings"] if f["code"] == "readings-unavailable"]
    assert len(started) == 1  # the spare, and no other worker
    assert started[0].returncode is not None
    assert launch._spare is None
    assert not (tmp_path / "canary").exists()


def test_walker_only_starts_no_worker(tmp_path, monkeypatch, capsys):
    started = _counted(monkeypatch)
    factories.save_state_dict(tmp_path / "a.pt")
    assert main(["scan", "--walker-only", str(tmp_path / "a.pt")]) == 0
    capsys.readouterr()
    assert started == []


def test_a_spare_nobody_takes_is_killed(tmp_path):
    with launch.spare_worker():
        spare = launch._spare
        assert spare is not None and spare.poll() is None
    assert launch._spare is None
    assert spare.returncode is not None


def test_a_job_that_passes_descriptors_starts_its_own_worker(tmp_path):
    path = factories.save_state_dict(tmp_path / "a.pt")
    read, write = os.pipe()
    try:
        with launch.spare_worker():
            spare = launch._spare
            own = launch.launch((write,))
            assert own is not spare and launch._spare is spare
            own.kill()
            own.wait()
            for stream in (own.stdin, own.stdout, own.stderr):
                stream.close()
            # the next job without descriptors takes the spare, and it answers as any worker
            answer = run_job({"op": "dry-run", "path": str(path), "paths": [], "readings": []})
            assert launch._spare is None and spare.returncode is not None
        assert answer["readings"] == [] and answer["sandbox"]["level"]
    finally:
        os.close(read)
        os.close(write)



def test_a_spare_that_cannot_start_leaves_the_job_to_start_its_own(tmp_path, monkeypatch,
                                                                 capsys):
    real = launch._cold
    calls: list = []

    def first_fails(pass_fds):
        calls.append(pass_fds)
        if len(calls) == 1:
            raise OSError(24, "Too many open files")
        return real(pass_fds)

    monkeypatch.setattr(launch, "_cold", first_fails)
    path = factories.mal_os_system(tmp_path / "b.pkl", tmp_path / "canary")
    assert main(["scan", "--json", str(path)]) == 2
    row = json.loads(capsys.readouterr().out)
    assert row["verdict"] == "dangerous"
    assert "readings-unavailable" not in [f["code"] for f in row["findings"]]
    assert len(calls) == 2  # the spare's start failed; the job started its own


# Modules the `scan` command needs only after its worker started: each is a share of the
# start-up the worker's interpreter should spend starting beside this one, not after it.
_AFTER_THE_SPARE = ("argparse", "json", "dataclasses", "inspector.cli.reference",
                    "inspector.core.termtext", "inspector.sandbox.protocol",
                    "inspector.scan.readings")

_FIRST_START = """
import sys
from inspector.sandbox.host import launch
real, seen = launch._cold, []
def cold(pass_fds):
    seen.append(sorted(m for m in sys.argv[2:] if m in sys.modules))
    return real(pass_fds)
launch._cold = cold
from inspector.cli import main
code = main(["scan", "--json", sys.argv[1]])
import json
print(json.dumps({"code": code, "seen": seen}), file=sys.stderr)
"""


def test_scan_starts_its_worker_before_its_heavy_imports(tmp_path):
    path = factories.save_state_dict(tmp_path / "a.pt")
    proc = subprocess.run([sys.executable, "-c", _FIRST_START, str(path), *_AFTER_THE_SPARE],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["seen"][0] == []  # the spare: none of them imported yet
    assert len(report["seen"]) == 1  # and the file's readings ran on it
