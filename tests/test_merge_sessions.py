"""`merge` judges each run (session) of a results file, not each kind of result: a run killed
part-way is unfinished even when another run, appended to the same results file, finished;
a failed check never heads the merge as SAFE; every part of a results record is checked for
the shape its writer gives it (a bad record fails the merge, never a traceback, never SAFE on
a word outside the vocabulary); and shards of one command text run in different working
folders (so checking other files) are refused.

The shards are real CLI runs; a kill is a real SIGKILL of the shard's own process right after
its k-th result line is durable (as `test_merge_complete.py` does).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from shard_runs import cli as _cli
from shard_runs import killed_after as _killed_after

from inspector.cli import main
from inspector.fleet.jobs import Job, JobSlice, ResultsLog
from inspector.run import journal


def _merge(tmp_path: Path, *results: Path) -> subprocess.CompletedProcess:
    return _cli("merge", *results, "-o", tmp_path / "m.json", "--force")


def _store(folder: Path, n: int, shard_owns: int = 0) -> Path:
    """`n` files and their SHA256SUMS (beside the folder); more where shard 1/2 would own fewer
    than `shard_owns` (which shard owns a file is a hash of its path, the temporary folder's
    too)."""
    folder.mkdir(parents=True)
    i = 0
    while i < n or sum(JobSlice(1, 2).owns(str(p)) for p in folder.glob("*.bin")) < shard_owns:
        (folder / f"f{i}.bin").write_bytes(os.urandom(512))
        i += 1
    sums = folder.parent / f"{folder.name}.sha256"
    assert _cli("manifest", "create", folder, "-o", sums).returncode == 0
    return sums


def _kinds(results: Path) -> list[str]:
    return [e.kind for e in journal.read(results).entries]


def _keys(results: Path) -> set[str]:
    return {str(e.record["key"]) for e in journal.read(results).entries if "key" in e.record}


def _corrupt_one_unchecked(folder: Path, results: Path, slice_: JobSlice) -> Path:
    """Corrupt a file of `slice_`'s share that `results` holds no result for."""
    kept = _keys(results)
    target = next(p for p in sorted(folder.glob("*.bin"))
                  if str(p) not in kept and slice_.owns(str(p)))
    with open(target, "ab") as fh:
        fh.write(b"corrupt")
    return target


def test_a_killed_run_followed_by_another_jobs_finished_run_in_its_file_is_unfinished(
        tmp_path):
    """f6: verify --shard 0/1 over d/ is killed after 2 of 6 files; then a shard of another
    job (over e/) appends to the same results file and finishes, writing a completion line
    that counts every result the file holds. The killed run is still unfinished."""
    d_sums, e_sums = _store(tmp_path / "d", 6), _store(tmp_path / "e", 6)
    r0, r1 = tmp_path / "r0.jsonl", tmp_path / "r1.jsonl"
    killed = ["verify", "-m", d_sums, tmp_path / "d", "-j", "1", "--shard", "0/1",
              "--results", r0]
    _killed_after(2, *killed)
    bad = _corrupt_one_unchecked(tmp_path / "d", r0, JobSlice(0, 1))
    for i, results in enumerate((r0, r1)):
        assert _cli("verify", "-m", e_sums, tmp_path / "e", "--shard", f"{i}/2",
                    "--results", results).returncode == 0
    assert _kinds(r0)[-1] == "batch.end"  # the other job's run finished, in this file
    merged = _merge(tmp_path, r0, r1)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert merged.stdout.startswith("PROBLEM:"), merged.stdout
    assert (f"{r0}: verify --shard 0/1 did not finish (another run's session line came "
            "before its completion line), so files it owns may never have been checked; run "
            "that shard again with the same results file") in merged.stdout
    assert f"its command: ckpt-inspector verify {tmp_path / 'd'} -m {d_sums}" in merged.stdout
    # run again with the same results file, it resumes and finishes: the tampered file shows
    assert _cli(*killed).returncode == 1
    merged = _merge(tmp_path, r0, r1)
    assert merged.returncode == 1 and "did not finish" not in merged.stdout, merged.stdout
    assert f"{bad.name}: manifest verification failed (1 mismatch)" in merged.stdout


def test_a_killed_shard_in_a_results_file_shared_with_a_finished_shard_is_unfinished(
        tmp_path):
    """f6b: every shard given one results file: shard 1/2 is killed after its first result,
    then shard 0/2 finishes and writes the completion line."""
    sums = _store(tmp_path / "d", 10, shard_owns=2)  # one result kept, one left to corrupt
    shared = tmp_path / "r.jsonl"
    shard = ["verify", "-m", sums, tmp_path / "d", "-j", "1", "--results", shared]
    _killed_after(1, *shard, "--shard", "1/2")
    _corrupt_one_unchecked(tmp_path / "d", shared, JobSlice(1, 2))
    assert _cli(*shard, "--shard", "0/2").returncode == 0
    merged = _merge(tmp_path, shared)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert not merged.stdout.startswith("SAFE"), merged.stdout
    assert (f"{shared}: verify --shard 1/2 did not finish (another run's session line came "
            "before its completion line)") in merged.stdout
    assert _cli(*shard, "--shard", "1/2").returncode == 1  # its rerun finds the tampered file
    merged = _merge(tmp_path, shared)
    assert "did not finish" not in merged.stdout and "1 mismatch" in merged.stdout


def test_a_verify_mismatch_never_heads_the_merge_as_safe(tmp_path):
    """f8: the scans are safe, a verification failed: the first line says PROBLEM."""
    sums = _store(tmp_path / "d", 4)
    with open(tmp_path / "d" / "f2.bin", "ab") as fh:
        fh.write(b"X")
    results = [tmp_path / f"r{i}.jsonl" for i in range(2)]
    for i, r in enumerate(results):
        _cli("verify", "-m", sums, tmp_path / "d", "--shard", f"{i}/2", "--results", r)
    merged = _merge(tmp_path, *results)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert merged.stdout.startswith("PROBLEM: 4 files from 2 results files, 1 problem"), \
        merged.stdout
    assert "f2.bin: manifest verification failed (1 mismatch)" in merged.stdout
    report = json.loads((tmp_path / "m.json").read_text())
    assert report["status"] == "failed"


_SCAN = {"path": "/k/a.bin", "format": "pytorch-zip", "verdict": "safe",
         "weights_only_ok": True, "globals": [], "findings": [], "error": None}


@pytest.mark.parametrize(("kind", "result", "why"), [
    ("report.file", {"inspect": "x"}, "inspect: not an object"),
    ("report.file", {"inspect": {"path": "a", "error": 5}}, "inspect.error: not an object"),
    ("report.file", {"inspect": {"path": "a", "scan": {"verdict": 7}}}, "inspect.scan: no path"),
    ("report.file", {"conversion": "x"}, "conversion: not an object"),
    ("report.file", {"diff": "x"}, "diff: not an object"),
    ("report.file", {"diff": {"a": 1}}, "diff.a: not an object"),
    ("report.file", {"consistency": "x"}, "consistency: not an object"),
    ("report.file", {"consistency": {"tensors": 5}}, "consistency.tensors: not a list"),
    ("report.file", {"manifest": {"a": 1}}, "its manifest is not a name"),
    ("report.file", {"folder": {"a": 1}}, "its folder is not a name"),
    ("report.file", {"scan": {**_SCAN, "verdict": "bogus"}}, "'bogus' is no verdict word"),
    ("verify.result", {"ok": True, "files": [{"path": 5, "status": "ok"}]},
     "verify.files[0].path: not a str"),
    ("verify.result", {"manifest": 5, "ok": True, "files": []}, "verify.manifest"),
    ("verify.result", {"ok": "no", "files": []}, "verify.ok"),
    ("scan.result", {**_SCAN, "verdict": "bogus"}, "'bogus' is no verdict word"),
    ("scan.result", {**_SCAN, "verdict": "SAFE"}, "'SAFE' is no verdict word"),
    ("scan.result", {**_SCAN, "size": "big"}, "scan.size: not an integer"),
])
def test_a_record_of_the_wrong_shape_fails_the_merge_never_a_traceback(
        tmp_path, capsys, kind, result, why):
    """fuzz_merge.py: sealed, chained records with a completion line, each part of the wrong
    shape: a bad record (exit 2, nothing written), never a traceback or SAFE."""
    results = tmp_path / "r0.jsonl"
    log = ResultsLog(results, Job(kind, "ckpt-inspector scan models"))
    log.begin({"command": "ckpt-inspector scan models", "shard": "0/1", "environment": None})
    log.record("/k/a.bin", tmp_path / "absent", result)
    log.end()
    code = main(["merge", str(results), "-o", str(tmp_path / "m.json")])
    out = capsys.readouterr()
    assert code == 2, out.out + out.err
    assert "a results record of the wrong shape" in out.err and why in out.err, out.err
    assert not out.out.startswith("SAFE") and not (tmp_path / "m.json").exists()


def test_shards_of_one_command_run_in_different_folders_are_refused(tmp_path):
    """f4: the same command text (relative paths) run in x/ and y/ checks two trees: shard
    1/2 verified a clean copy while x/ holds a tampered file in its share."""
    (tmp_path / "x" / "d").mkdir(parents=True)
    lines = []
    i = 0  # six files, more until shard 1/2 owns one (ownership hashes the temporary path)
    while i < 6 or not any(JobSlice(1, 2).owns(str(p)) for p in (tmp_path / "x" / "d").iterdir()):
        data = os.urandom(512)
        (tmp_path / "x" / "d" / f"f{i}.bin").write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  f{i}.bin\n")
        i += 1
    (tmp_path / "x" / "d" / "SHA256SUMS").write_text("".join(lines))  # as sha256sum in d/
    subprocess.run(["cp", "-r", tmp_path / "x", tmp_path / "y"], check=True)
    for p in sorted((tmp_path / "x" / "d").glob("*.bin")):
        if JobSlice(1, 2).owns(str(p)):
            with open(p, "ab") as fh:
                fh.write(b"TAMPERED")
    r0, r1 = tmp_path / "r0.jsonl", tmp_path / "r1.jsonl"
    for i, (where, results) in enumerate(((tmp_path / "x", r0), (tmp_path / "y", r1))):
        _cli("verify", "d", "-m", "d/SHA256SUMS", "--shard", f"{i}/2", "--results", results,
             cwd=where)
    merged = _merge(tmp_path, r0, r1)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert (f"{r0} and {r1} hold shards of N=2 of the command 'ckpt-inspector verify d -m "
            f"d/SHA256SUMS' run in different working folders ({tmp_path / 'x'} and "
            f"{tmp_path / 'y'})") in merged.stderr
    assert merged.stderr.rstrip().endswith("nothing written")
    assert not (tmp_path / "m.json").exists()
    # shard 1/2 run in x/ too: the tampered files are found
    _cli("verify", "d", "-m", "d/SHA256SUMS", "--shard", "1/2", "--results", r1.with_name("r1x"),
         cwd=tmp_path / "x")
    merged = _merge(tmp_path, r0, r1.with_name("r1x"))
    assert merged.returncode == 1 and "manifest verification failed" in merged.stdout


def test_session_lines_written_before_the_working_folder_was_noted_compare_by_command(
        tmp_path, capsys):
    """A results file written before session lines named their folder (no `cwd`) is compared
    by its command text alone, as then; with a folder on one side only, too."""
    scan = dict(_SCAN)
    files = []
    for i, cwd in enumerate((None, "/elsewhere")):
        results = tmp_path / f"r{i}.jsonl"
        session = {"for": "scan.result", "command": "ckpt-inspector scan models",
                   "shard": f"{i}/2", "environment": None}
        journal.append(results, "batch.session", session | ({"cwd": cwd} if cwd else {}))
        key = next(f"/m/{n}.pt" for n in range(99) if JobSlice(i, 2).owns(f"/m/{n}.pt"))
        journal.append(results, "scan.result", {"key": key, "identity": None,
                                                "result": {**scan, "path": key}})
        journal.append(results, "batch.end", {"for": "scan.result", "results": 1})
        files.append(results)
    code = main(["merge", *map(str, files), "-o", str(tmp_path / "m.json")])
    out = capsys.readouterr()
    assert code == 0 and out.out.startswith("SAFE: 2 files"), out.out + out.err
