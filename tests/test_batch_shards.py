"""Sharded, resumable batch jobs: `--shard I/N`, `--results FILE.jsonl` and `merge`.

The merged report of N shards (one killed mid-run and run again) must equal what one process
writes for the same files; a real engine (a local Dask cluster of two worker processes) runs
the shards as tasks, as the documented example does.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from inspector.core.termtext import counted
from inspector.fleet.jobs import JobSlice, parse_job_slice
from inspector.run import journal

CLI = [sys.executable, "-m", "inspector"]


def _cli(*args: object, check: int | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=240)
    if check is not None:
        assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    gen = torch.Generator().manual_seed(0)
    for i in range(6):
        torch.save({"w": torch.randn(8, 8, generator=gen) * (i + 1), "b": torch.zeros(8)},
                   folder / f"m{i}.pt")
    bad = {"w": torch.randn(4, 4, generator=gen)}
    bad["w"][1, 2] = float("nan")
    torch.save(bad, folder / "nan.pt")
    return folder


def _files(report: Path) -> list[dict]:
    files = json.loads(report.read_text())["files"]
    return sorted(files, key=lambda f: f["file"]["path"])


def test_parse_shard_and_its_refusals():
    assert parse_job_slice("2/4") == JobSlice(2, 4)
    for bad in ("4/4", "-1/4", "1", "a/b", "0/0"):
        with pytest.raises(ValueError, match="0 <= I < N"):
            parse_job_slice(bad)


def test_every_file_has_exactly_one_shard_and_keeps_it_when_others_come():
    keys = [f"/data/run/checkpoint-{i}/model.safetensors" for i in range(400)]
    shards = [JobSlice(i, 5) for i in range(5)]
    owners = [[s.index for s in shards if s.owns(k)] for k in keys]
    assert all(len(o) == 1 for o in owners)
    counts = [sum(o == [i] for o in owners) for i in range(5)]
    assert min(counts) > 40  # spread, not all in one shard
    again = [[s.index for s in shards if s.owns(k)] for k in keys]
    assert again == owners


def test_scan_shards_cover_the_folder_once_and_merge(models, tmp_path):
    whole = _cli("scan", models, "--json")
    single = {json.loads(line)["path"] for line in whole.stdout.splitlines()}
    seen: list[str] = []
    for i in range(3):
        out = _cli("scan", models, "--json", "--shard", f"{i}/3", "--results",
                   tmp_path / f"r{i}.jsonl")
        assert out.returncode in (0, 1), out.stderr
        seen += [json.loads(line)["path"] for line in out.stdout.splitlines()]
    assert sorted(seen) == sorted(single)
    merged = _cli("merge", *(tmp_path / f"r{i}.jsonl" for i in range(3)), "-o",
                  tmp_path / "m.json", check=0)
    assert "7 files from 3 results files" in merged.stdout
    assert {f["file"]["path"] for f in _files(tmp_path / "m.json")} == single


def test_a_killed_report_shard_resumes_and_the_merge_equals_one_process(models, tmp_path):
    _cli("report", models, "-o", tmp_path / "single.json", "-q", "--jobs", "1", check=1)
    results = [tmp_path / f"r{i}.jsonl" for i in range(2)]
    # the shard killed is the one owning more files: which owns what follows the folder's path
    # (tmp_path), and one shard may own none of the seven
    owned = [sum(JobSlice(i, 2).owns(str(p)) for p in models.iterdir()) for i in range(2)]
    k = 0 if owned[0] >= owned[1] else 1
    victim = subprocess.Popen([*CLI, "report", str(models), "-o", str(tmp_path / f"s{k}.json"),
                               "-q", "--jobs", "1", "--cold-workers", "--shard", f"{k}/2",
                               "--results", str(results[k])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and victim.poll() is None:
        if results[k].exists() and journal.read(results[k]).of_kind("report.file"):
            break
        time.sleep(0.05)
    killed_early = victim.poll() is None
    victim.kill()  # SIGKILL; nothing when it already ended (os.kill raised on its reaped pid)
    victim.wait()
    done_before = len(journal.read(results[k]).of_kind("report.file"))
    assert done_before >= 1
    again = _cli("report", models, "-o", tmp_path / f"s{k}.json", "-q", "--jobs", "1",
                 "--shard", f"{k}/2", "--results", results[k], "--force")
    assert again.returncode in (0, 1), again.stderr
    if killed_early and done_before < owned[k]:
        assert f"{counted(done_before, 'result')} kept from earlier runs" in again.stderr
    _cli("report", models, "-o", tmp_path / f"s{1 - k}.json", "-q", "--shard", f"{1 - k}/2",
         "--results", results[1 - k])
    _cli("merge", *results, "-o", tmp_path / "merged.json", check=1)
    assert _files(tmp_path / "merged.json") == _files(tmp_path / "single.json")
    merged, single = (json.loads((tmp_path / n).read_text()) for n in ("merged.json",
                                                                      "single.json"))
    for key in ("verdict", "status", "problems", "environment"):
        assert merged[key] == single[key], key


def test_a_result_cut_short_or_a_changed_file_is_done_again(models, tmp_path):
    results = tmp_path / "r.jsonl"
    _cli("scan", models, "--results", results)
    records = journal.read(results).of_kind("scan.result")
    assert len(records) == 7
    assert journal.read(results).entries[-1].kind == "batch.end"  # the shard finished
    # a kill while the last record was written leaves it cut short, and no completion line
    data = results.read_bytes()[:results.read_bytes().rstrip(b"\n").rfind(b"\n") + 1]
    results.write_bytes(data[:-9])
    (models / "m0.pt").write_bytes((models / "m0.pt").read_bytes())  # same bytes, new mtime
    os.utime(models / "m0.pt", ns=(1, 1))
    again = _cli("scan", models, "--results", results)
    assert "line 8 truncated" in again.stderr or "line 8 unreadable" in again.stderr
    assert "6 results kept from earlier runs" in again.stderr
    scanned = journal.read(results).of_kind("scan.result")
    assert len(scanned) == 7 + 1  # 6 readable + the redone cut one + m0.pt


def test_a_file_rewritten_in_place_with_its_old_mtime_is_done_again(tmp_path):
    """Size and modification time alone kept an 'ok' for a file rewritten in place with its
    mtime put back; its change time and inode cannot be put back."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a.bin").write_bytes(os.urandom(4096))
    (folder / "b.bin").write_bytes(os.urandom(4096))
    sums = tmp_path / "sums.sha256"
    sums.write_text("".join(f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  m/{n}\n"
                            for n in ("a.bin", "b.bin")))
    results = tmp_path / "r.jsonl"
    _cli("verify", folder, "-m", sums, "--results", results)
    st = os.stat(folder / "a.bin")
    with open(folder / "a.bin", "r+b") as fh:  # one bit, in place
        fh.seek(100)
        byte = fh.read(1)[0]
        fh.seek(100)
        fh.write(bytes([byte ^ 1]))
    os.utime(folder / "a.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    again = _cli("verify", folder, "-m", sums, "--results", results, check=1)
    assert "2 results kept from earlier runs" in again.stderr
    lines = again.stdout.splitlines()
    assert any(line.startswith("MISMATCH") and "m/a.bin" in line for line in lines), lines
    assert any(line.startswith("OK") and "m/b.bin" in line for line in lines), lines
    assert len(journal.read(results).of_kind("verify.result")) == 3  # only a.bin done again


def test_a_dask_cluster_runs_the_shards_as_tasks(models, tmp_path):
    distributed = pytest.importorskip("distributed")
    shards = 3
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as cluster, \
            distributed.Client(cluster) as client:
        futures = [client.submit(_shard_task, str(models), i, shards, str(tmp_path), pure=False)
                   for i in range(shards)]
        codes = client.gather(futures)
    assert all(code in (0, 1) for code in codes), codes
    _cli("merge", *(tmp_path / f"r{i}.jsonl" for i in range(shards)), "-o",
         tmp_path / "merged.json", check=0)
    whole = _cli("scan", models, "--json")
    assert {f["file"]["path"] for f in _files(tmp_path / "merged.json")} == {
        json.loads(line)["path"] for line in whole.stdout.splitlines()}


def _shard_task(folder: str, index: int, count: int, out: str) -> int:
    """One Dask task: the documented `scan --shard I/N --results` of one shard."""
    return subprocess.run([*CLI, "scan", folder, "--shard", f"{index}/{count}", "--results",
                           f"{out}/r{index}.jsonl"], capture_output=True, timeout=240).returncode


def test_verify_shards_cover_the_folder_once_resume_and_merge_with_the_scan(models, tmp_path):
    manifest = tmp_path / "MANIFEST.tsv"  # beside the folder: the folder is only checkpoints
    _cli("manifest", "create", models, "-o", manifest, check=0)
    (models / "m3.pt").write_bytes(b"truncated")  # one file that fails, in some shard
    whole = json.loads(_cli("verify", "-m", manifest, models, "--json", check=1).stdout)
    seen, results = [], [tmp_path / f"v{i}.jsonl" for i in range(3)]
    for i in range(3):
        out = _cli("verify", "-m", manifest, models, "--json", "--shard", f"{i}/3",
                   "--results", results[i])
        # the partition follows the paths, so a shard may own none of these seven files
        # (about one run in six): it then says nothing was checked, and fails
        owns = any(JobSlice(i, 3).owns(str(p)) for p in models.iterdir())
        assert out.returncode in ((0, 1) if owns else (3,)), out.stdout + out.stderr
        seen += json.loads(out.stdout).get("files", [])
    assert sorted(seen, key=lambda f: f["path"]) == sorted(whole["files"],
                                                            key=lambda f: f["path"])
    kept = [r for r in results if journal.read(r).of_kind("verify.result")]
    again = _cli("verify", "-m", manifest, models, "--json", "--shard", "0/3", "--results",
                 results[0])
    if results[0] in kept:
        assert " kept from earlier runs" in again.stderr
    assert len(journal.read(results[0]).of_kind("verify.result")) == sum(
        JobSlice(0, 3).owns(str(p)) for p in models.iterdir())  # nothing verified twice
    _cli("scan", models, "--results", tmp_path / "scan.jsonl")
    _cli("merge", *results, tmp_path / "scan.jsonl", "-o", tmp_path / "m.json", check=1)
    files = _files(tmp_path / "m.json")
    assert [Path(f["file"]["path"]).name for f in files] == sorted(p.name for p in
                                                                    models.iterdir())
    for f in files:  # each file's scan and verification joined by its path
        cut = f["file"]["path"].endswith("m3.pt")
        verified = {row["path"]: row["status"] for row in f["verification"]["files"]}
        assert verified == {f"models/{Path(f['file']['path']).name}":
                            "size_mismatch" if cut else "ok"}
        assert f["scan"]["verdict"] == ("skipped" if cut else "safe")


def test_a_verify_shard_that_owns_no_file_says_nothing_was_checked_and_fails(tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.bin", "b.bin"):
        (folder / name).write_bytes(name.encode() * 100)
    manifest = tmp_path / "SHA256SUMS"
    _cli("manifest", "create", folder, "-o", manifest, check=0)  # dialect from the name
    keys = [str(folder / n) for n in ("a.bin", "b.bin")]
    empty = next(i for i in range(16) if not any(JobSlice(i, 16).owns(k) for k in keys))
    busy = next(i for i in range(16) if any(JobSlice(i, 16).owns(k) for k in keys))
    out = _cli("verify", "-m", manifest, folder, "--json", "--shard", f"{empty}/16",
               "--results", tmp_path / "r.jsonl", check=3)
    (error,) = json.loads(out.stdout)["errors"]
    assert error.startswith(f"nothing was checked by shard {empty}/16: it owns none of the 2")
    _cli("verify", "-m", manifest, folder, "--shard", f"{busy}/16", check=0)
    # a lone --results run that finds none of the files is the whole run: its own reason
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "c.bin").write_bytes(b"c")
    alone = _cli("verify", "-m", manifest, other, "--results", tmp_path / "r2.jsonl", "--json",
                 check=3)
    assert json.loads(alone.stdout)["errors"][0].startswith("nothing was checked: none of the 2")
