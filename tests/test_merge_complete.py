"""`merge` calls a batch whole only when every shard finished: each shard's results file ends
with the completion line the shard writes once its share is done (a shard killed part-way has
its session line and some results, chained and sealed, and no completion line), and every
shard of one split ran the same command.

The shards are real CLI runs; a kill is a real SIGKILL of the shard's own process, sent right
after its k-th result line is durable (what a kill between two files leaves), so which files
have results is known.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from shard_runs import cli as _cli
from shard_runs import killed_after as _killed_after

from inspector.fleet.jobs import Job, JobSlice, ResultsLog
from inspector.run import journal

SESSION_KIND, END_KIND = "batch.session", "batch.end"  # a results file's first and last lines

@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    """Three files and their SHA256SUMS; then z.bin, the last one verified, is corrupted."""
    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("a.bin", "b.bin", "z.bin"):
        (folder / name).write_bytes(os.urandom(4096))
    sums = tmp_path / "SHA256SUMS"
    assert _cli("manifest", "create", folder, "-o", sums).returncode == 0
    with open(folder / "z.bin", "ab") as fh:
        fh.write(b"corrupt")
    return folder, sums


def _kinds(results: Path) -> list[str]:
    return [e.kind for e in journal.read(results).entries]


def _merge(tmp_path: Path, *results: Path) -> subprocess.CompletedProcess:
    return _cli("merge", *results, "-o", tmp_path / "m.json", "--force")


def test_a_shard_killed_part_way_is_unfinished_and_its_rerun_completes(store, tmp_path):
    folder, sums = store
    results = tmp_path / "r0.jsonl"
    shard = ["verify", "-m", sums, folder, "-j", "1", "--shard", "0/1", "--results", results]
    _killed_after(2, *shard)  # a.bin and b.bin have results; z.bin (corrupt) never got one
    assert _kinds(results) == [SESSION_KIND, "verify.result", "verify.result"]
    assert journal.read(results).intact  # chain and seals hold: only the end is missing
    merged = _merge(tmp_path, results)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert not merged.stdout.startswith("SAFE"), merged.stdout
    assert (f"{results}: verify --shard 0/1 did not finish (no completion line), so files it "
            "owns may never have been checked; run that shard again with the same results "
            "file (it resumes") in merged.stdout
    assert json.loads((tmp_path / "m.json").read_text())["status"] == "failed"
    # run again, it resumes: the two kept results stay, z.bin is done, then the completion line
    again = _cli(*shard)
    assert again.returncode == 1 and "2 results kept from earlier runs" in again.stderr
    assert _kinds(results)[-3:] == [SESSION_KIND, "verify.result", END_KIND]
    assert journal.read(results).entries[-1].record["results"] == 3
    merged = _merge(tmp_path, results)
    assert merged.returncode == 1 and "3 files from 1 results file" in merged.stdout
    assert "did not finish" not in merged.stdout
    assert "z.bin: manifest verification failed (1 mismatch)" in merged.stdout


def test_a_shard_killed_while_writing_its_last_result_is_unfinished(store, tmp_path):
    folder, sums = store
    results = tmp_path / "r0.jsonl"
    _killed_after(3, "verify", "-m", sums, folder, "-j", "1", "--results", results)
    data = results.read_bytes()
    results.write_bytes(data[:-40])  # z.bin's line cut short, as a kill during the write
    merged = _merge(tmp_path, results)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "line 4 truncated" in merged.stderr
    assert f"{results}: verify --shard 0/1 did not finish (no completion line)" in merged.stdout


def test_a_scan_shard_finished_before_this_release_has_no_completion_line(tmp_path):
    """A results file written before shards wrote completion lines is whole lines and a
    session line, as a killed shard's is: it cannot be told apart, so it is unfinished too
    (running the shard again with it only adds the completion line)."""
    import torch

    folder = tmp_path / "models"
    folder.mkdir()
    for i in range(3):
        torch.save({"w": torch.full((4, 4), float(i))}, folder / f"m{i}.pt")
    results = tmp_path / "s.jsonl"
    assert _cli("scan", folder, "--results", results).returncode == 0
    assert _kinds(results) == [SESSION_KIND, *["scan.result"] * 3, END_KIND]
    old = results.read_bytes().rstrip(b"\n").split(b"\n")[:-1]
    results.write_bytes(b"\n".join(old) + b"\n")  # as the earlier release left it
    merged = _merge(tmp_path, results)
    assert merged.returncode == 1 and "scan --shard 0/1 did not finish" in merged.stdout
    again = _cli("scan", folder, "--results", results)
    assert "3 results kept from earlier runs" in again.stderr
    assert _kinds(results)[-2:] == [SESSION_KIND, END_KIND]
    merged = _merge(tmp_path, results)
    assert merged.returncode == 0 and merged.stdout.startswith("SAFE: 3 files"), merged.stdout


def test_results_after_the_completion_line_are_a_rerun_that_did_not_finish(store, tmp_path):
    folder, sums = store
    (folder / "z.bin").write_bytes((folder / "z.bin").read_bytes()[:-7])  # whole again
    results = tmp_path / "r0.jsonl"
    shard = ["verify", "-m", sums, folder, "-j", "1", "--results", results]
    assert _cli(*shard).returncode == 0
    assert _merge(tmp_path, results).returncode == 0
    for name in ("a.bin", "b.bin"):  # rewritten (the same bytes): both are done again
        (folder / name).write_bytes((folder / name).read_bytes())
    _killed_after(1, *shard)  # a.bin done again, b.bin's earlier result never redone
    assert _kinds(results)[-3:] == [END_KIND, SESSION_KIND, "verify.result"]
    merged = _merge(tmp_path, results)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert (f"{results}: verify --shard 0/1 did not finish (results after its completion "
            "line (a later run of it was cut short))") in merged.stdout


def test_a_completion_line_whose_count_differs_is_unfinished(tmp_path):
    """The count a completion line names is what the file holds; a file holding fewer (or
    more) is not what that shard finished."""
    results = tmp_path / "r0.jsonl"
    log = ResultsLog(results, Job("scan.result", "ckpt-inspector scan m"))
    log.begin({"command": "ckpt-inspector scan m", "shard": "0/1", "environment": None})
    scan = {"path": "a.pt", "format": "pytorch-zip", "verdict": "safe", "weights_only_ok": True,
            "globals": [], "findings": [], "error": None}
    log.record("a.pt", tmp_path / "absent", scan)
    journal.append(results, END_KIND, {"for": "scan.result", "results": 2})
    merged = _merge(tmp_path, results)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "scan --shard 0/1: its completion line counts 2 results but the file holds 1" \
        in merged.stdout


def test_shards_of_one_split_that_ran_different_commands_are_refused(store, tmp_path):
    folder, sums = store
    (folder / "z.bin").write_bytes((folder / "z.bin").read_bytes()[:-7])
    # which shard owns a file is a hash of its path (the temporary folder's too): enough files
    # that shard 1/2 owns at least two, whatever the folder is called
    names: list[str] = []
    while sum(JobSlice(1, 2).owns(str(folder / n)) for n in names) < 2 or len(names) < 10:
        names.append(f"f{len(names)}.bin")
    for name in names:
        (folder / name).write_bytes(os.urandom(100))
    assert _cli("manifest", "create", folder, "-o", sums, "--force").returncode == 0
    mine = [n for n in names if JobSlice(1, 2).owns(str(folder / n))]
    with open(folder / mine[1], "ab") as fh:  # a file of shard 1/2 that shard 1/2 never sees
        fh.write(b"corrupt")
    results = [tmp_path / "r0.jsonl", tmp_path / "r1.jsonl"]
    assert _cli("verify", "-m", sums, folder, "--shard", "0/2", "--results",
                results[0]).returncode == 0
    assert _cli("verify", "-m", sums, folder / mine[0], "--shard", "1/2", "--results",
                results[1]).returncode == 0
    merged = _merge(tmp_path, *results)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    (line,) = [x for x in merged.stderr.splitlines() if x.startswith("ckpt-inspector merge:")]
    assert f"{results[0]} and {results[1]} hold shards of N=2 of different commands" in line
    assert f"'ckpt-inspector verify {folder} -m {sums}'" in line
    assert f"'ckpt-inspector verify {folder / mine[0]} -m {sums}'" in line
    assert line.endswith("nothing written") and not (tmp_path / "m.json").exists()
    # the same command as shard 1/2 finds the corrupt file, and the merge takes both
    assert _cli("verify", "-m", sums, folder, "--shard", "1/2", "--results",
                tmp_path / "r1b.jsonl").returncode == 1
    merged = _merge(tmp_path, results[0], tmp_path / "r1b.jsonl")
    assert merged.returncode == 1 and "0 problems" not in merged.stdout
    assert f"{mine[1]}: manifest verification failed" in merged.stdout
