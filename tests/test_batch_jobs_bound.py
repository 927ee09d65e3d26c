"""A kept batch result is reused only by a run of the job it was made for (`fleet.jobs.Job`:
the command, the SHA-256 of the manifest's content, the options that change a result, the
version that judged it), and `merge` refuses a split whose runs checked against different
manifests, options or versions. A results
file of an earlier version, whose lines name no job, is done again and said so, never reused
as if it were checked against the manifest given now."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from inspector.cli import main
from inspector.fleet.jobs import Job, ResultsLog
from inspector.run import journal


def _store(tmp_path: Path) -> tuple[Path, Path]:
    """Two files and their SHA256SUMS."""
    data = tmp_path / "data"
    data.mkdir()
    lines = []
    for name in ("a.bin", "b.bin"):
        (data / name).write_bytes(os.urandom(1000))
        lines.append(f"{hashlib.sha256((data / name).read_bytes()).hexdigest()}  {name}\n")
    sums = data / "SHA256SUMS"
    sums.write_text("".join(lines))
    return data, sums


def _verify(data: Path, sums: Path, results: Path, *more: str) -> int:
    return main(["verify", "-m", str(sums), str(data / "a.bin"), str(data / "b.bin"),
                 "--no-tensors", "--shard", "0/1", "--results", str(results), *more])


def test_a_manifest_rewritten_in_place_is_not_checked_by_the_results_kept_for_the_old(
        tmp_path, capsys):
    """The same command and results file after the manifest changed (a new release): the
    kept `ok` results were checked against the old content, so each file is done again,
    and the results file, holding both jobs, is refused by merge."""
    data, sums = _store(tmp_path)
    results = tmp_path / "r.jsonl"
    assert _verify(data, sums, results) == 0
    assert _verify(data, sums, results) == 0  # the same job: its results are reused
    assert "2 results kept from earlier runs" in capsys.readouterr().err
    first = sums.read_text().splitlines()
    sums.write_text("\n".join(["f" * 64 + first[0][64:], *first[1:]]) + "\n")
    assert _verify(data, sums, results) == 1
    out = capsys.readouterr()
    assert "MISMATCH       a.bin" in out.out
    assert "the results of 2 files were made for another manifest or other options" in out.err
    assert main(["merge", str(results), "-o", str(tmp_path / "m.json")]) == 1
    err = capsys.readouterr().err
    assert "holds runs of" in err and "against different manifests, options or versions" in err
    assert not (tmp_path / "m.json").exists()


def test_other_options_are_another_job(tmp_path, capsys):
    """`--strict` changes what a verify result says: a run with it reuses nothing kept
    without it."""
    data, sums = _store(tmp_path)
    results = tmp_path / "r.jsonl"
    assert _verify(data, sums, results) == 0
    capsys.readouterr()
    assert _verify(data, sums, results, "--strict") == 0
    assert "made for another manifest or other options" in capsys.readouterr().err
    lines = [e.record for e in journal.read(results).entries if e.kind == "verify.result"]
    assert len({line["job"] for line in lines}) == 2


def test_results_another_version_judged_are_done_again_and_not_merged(tmp_path, capsys,
                                                                      monkeypatch):
    """An upgrade may judge the same bytes otherwise (a scanner rule added): the results the
    version before kept are done again, and shards run by two versions are not merged."""
    import inspector

    made_by = inspector.__version__
    data, sums = _store(tmp_path)
    results = tmp_path / "r.jsonl"
    assert _verify(data, sums, results) == 0
    capsys.readouterr()
    monkeypatch.setattr(inspector, "__version__", "99.0")
    assert _verify(data, sums, results) == 0
    err = capsys.readouterr().err
    assert "the results of 2 files were made for another manifest or other options, by " \
        "another version of ckpt-inspector" in err
    assert "kept from earlier runs" not in err
    assert main(["merge", str(results), "-o", str(tmp_path / "m.json")]) == 1
    err = capsys.readouterr().err
    assert "against different manifests, options or versions" in err
    assert "version 99.0" in err and f"version {made_by}" in err
    assert not (tmp_path / "m.json").exists()


def test_results_of_an_earlier_version_are_done_again_and_said(tmp_path, capsys):
    """A results file whose lines name no job (as the version before jobs wrote it): its
    results are not reused (they may be of another manifest), and merge says its shards are
    compared by command text alone."""
    data, sums = _store(tmp_path)
    results = tmp_path / "r.jsonl"
    assert _verify(data, sums, results) == 0
    capsys.readouterr()
    old = tmp_path / "old.jsonl"
    for entry in journal.read(results).entries:
        fields = {k: v for k, v in entry.record.items()
                  if k not in ("seq", "prev", "chain", "kind", "seal", "job",
                               "manifest_sha256", "options")}
        journal.append(old, entry.kind, fields)
    assert main(["merge", str(old), "-o", str(tmp_path / "m.json")]) == 0
    err = capsys.readouterr().err
    assert "runs of an earlier version, which recorded no manifest digest or options" in err
    assert _verify(data, sums, old) == 0
    err = capsys.readouterr().err
    assert "the results of 2 files were made for another manifest" in err
    assert "kept from earlier runs" not in err
    redone = [e.record for e in journal.read(old).entries if e.kind == "verify.result"]
    assert len(redone) == 4 and sum("job" in r for r in redone) == 2


def test_a_result_of_a_job_no_run_of_its_file_ran_is_a_problem_of_the_merge(tmp_path, capsys):
    """A result line of another job (as a run against another manifest writes it) among a
    finished run's own, in a results file whose runs were all of one job: not their record."""
    data, sums = _store(tmp_path)
    assert _verify(data, sums, tmp_path / "r.jsonl") == 0
    entries = journal.read(tmp_path / "r.jsonl").entries
    session = next(e.record for e in entries if e.kind == "batch.session")
    kept = next(e.record for e in entries if e.kind == "verify.result")
    results = tmp_path / "forged.jsonl"
    log = ResultsLog(results, Job("verify.result", session["command"], "1" * 64))
    log.begin({"command": session["command"], "shard": "0/1", "environment": None})
    log.record(kept["key"], Path(kept["key"]), kept["result"])
    journal.append(results, "verify.result", {"key": kept["key"], "identity": None,
                                              "job": "0" * 64, "result": kept["result"]})
    log.end()
    capsys.readouterr()
    assert main(["merge", str(results), "-o", str(tmp_path / "m.json")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("PROBLEM: 1 file from 1 results file, 1 problem")
    assert "made for a job (manifest, options, version) that none of that file's runs ran" in out
