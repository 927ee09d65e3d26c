"""`merge` believes no results line it can check: a forged or edited line fails the merge,
the worst of several results for one file wins, and a keyed seal makes a forger's line
(resealed with the SHA-256 anyone can compute) stand out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspector.cli import main
from inspector.fleet.jobs import Job, ResultsLog
from inspector.run import journal


def _scan(path: str, verdict: str) -> dict:
    return {"path": path, "format": "pytorch-zip", "verdict": verdict, "weights_only_ok": True,
            "globals": [], "findings": [], "error": None}


def _results(tmp_path: Path, name: str, *records: tuple[str, str], job: str = "0/1",
             command: str = "ckpt-inspector scan models", finished: bool = True) -> Path:
    """A results file as `scan --shard JOB --results NAME` writes it: its session line, one
    line per file, then (once the shard is done) its completion line."""
    target = tmp_path / name
    log = ResultsLog(target, Job("scan.result", command))
    log.begin({"command": command, "shard": job, "environment": None})
    for path, verdict in records:
        log.record(path, tmp_path / "absent", _scan(path, verdict))
    if finished:
        log.end()
    return target


def _forge(path: Path, line: int, **change) -> None:
    """Rewrite one line as a forger who knows the format (not the key) would: new fields,
    the chain's `prev` kept, resealed with the plain SHA-256."""
    lines = path.read_bytes().rstrip(b"\n").split(b"\n")
    record = json.loads(lines[line - 1])
    record.pop("seal", None)
    record.pop("mac", None)
    record["result"].update(change)
    lines[line - 1] = journal._sealed(json.dumps(record).encode(), None)
    path.write_bytes(b"\n".join(lines) + b"\n")


def _merge(tmp_path: Path, *results: Path, capsys, force: bool = False) -> tuple[int, str, str]:
    code = main(["merge", *map(str, results), "-o", str(tmp_path / "m.json"),
                 *(["--force"] if force else [])])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_worst_result_for_one_file_wins_not_the_last(tmp_path, capsys):
    first = _results(tmp_path, "r0.jsonl", ("a.pt", "dangerous"), ("b.pt", "safe"))
    again = _results(tmp_path, "r1.jsonl", ("a.pt", "safe"))
    code, out, err = _merge(tmp_path, first, again, capsys=capsys)
    assert code == 2 and out.startswith("DANGEROUS"), out
    verdicts = {Path(f["file"]["path"]).name: f["verdict"]
                for f in json.loads((tmp_path / "m.json").read_text())["files"]}
    assert verdicts == {"a.pt": "dangerous", "b.pt": "safe"}
    assert "unauthenticated" in err


def test_an_edited_line_fails_the_merge_naming_file_and_line(tmp_path, capsys):
    results = _results(tmp_path, "r0.jsonl", ("a.pt", "dangerous"), ("b.pt", "safe"))
    lines = results.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"dangerous"', b'"safe"     ')
    results.write_bytes(b"\n".join(lines))
    code, _out, err = _merge(tmp_path, results, capsys=capsys)
    assert code == 2 and "r0.jsonl: line 2 is edited" in err
    assert not (tmp_path / "m.json").exists()


def test_with_a_key_a_line_resealed_by_a_forger_fails_the_merge(tmp_path, capsys, monkeypatch):
    key = tmp_path / "seal.key"
    key.write_text("a secret every shard is handed\n")
    monkeypatch.setenv(journal.KEY_FILE_ENV, str(key))
    results = _results(tmp_path, "r0.jsonl", ("b.pt", "safe"), ("a.pt", "dangerous"))
    _forge(results, 3, verdict="safe")
    code, _out, err = _merge(tmp_path, results, capsys=capsys)
    assert code == 2 and "line 3 is unsigned" in err
    assert not (tmp_path / "m.json").exists()


def test_with_a_key_an_untouched_batch_merges_authenticated(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, "a secret every shard is handed")
    results = _results(tmp_path, "r0.jsonl", ("a.pt", "safe"))
    code, out, err = _merge(tmp_path, results, capsys=capsys)
    assert code == 0 and out.startswith("SAFE") and "unauthenticated" not in err


@pytest.mark.parametrize("cut", [10, 40])
def test_a_last_line_cut_short_is_named_and_left_out(tmp_path, capsys, cut):
    # a shard killed while writing b.pt's line: no completion line, so it did not finish
    results = _results(tmp_path, "r0.jsonl", ("a.pt", "safe"), ("b.pt", "safe"),
                       finished=False)
    data = results.read_bytes()
    results.write_bytes(data[:-cut])
    code, out, err = _merge(tmp_path, results, capsys=capsys)
    assert code == 1 and "1 file" in out and "line 3 truncated" in err
    assert "scan --shard 0/1 did not finish (no completion line)" in out


WRONG = {
    "result-a-list": ("scan.result", [1, 2]),
    "result-a-string": ("scan.result", "safe"),
    "verdict-a-number": ("scan.result", {"path": "a.pt", "verdict": 0}),
    "globals-not-objects": ("scan.result", {"path": "a.pt", "verdict": "safe", "globals": [1]}),
    "findings-a-string": ("scan.result", {"path": "a.pt", "verdict": "safe", "findings": "x"}),
    "path-a-number": ("scan.result", {"path": 5, "verdict": "safe"}),
    "path-holds-nul": ("scan.result", {"path": "a\0b.pt", "verdict": "safe"}),
    "verify-files-a-dict": ("verify.result", {"files": {"a": 1}}),
    "verify-files-not-objects": ("verify.result", {"files": [3]}),
    "report-unknown-part": ("report.file", {"path": "a.pt", "bogus": {}}),
    "report-part-a-number": ("report.file", {"path": "a.pt", "scan": 5}),
    "report-bad-scan": ("report.file", {"path": "a.pt", "scan": {"verdict": ["x"]}}),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_record_of_the_wrong_shape_is_one_line_and_nothing_is_written(tmp_path, capsys, name):
    kind, result = WRONG[name]
    path = tmp_path / "r0.jsonl"
    journal.append(path, kind, {"key": "a.pt", "identity": None, "result": result})
    code, _out, err = _merge(tmp_path, path, capsys=capsys)
    assert code == 2 and "wrong shape" in err and "Traceback" not in err, err
    assert not (tmp_path / "m.json").exists()



def _owned(index: int, count: int) -> str:
    """A file name shard `index` of `count` owns (a shard records only its own files)."""
    from inspector.fleet.jobs import JobSlice

    return next(f"m{i}.pt" for i in range(999) if JobSlice(index, count).owns(f"m{i}.pt"))


def test_a_slice_no_results_file_holds_fails_the_merge_and_is_named(tmp_path, capsys):
    # two of three slices: every file they hold is safe, and a third of the job never ran
    parts = [_results(tmp_path, f"r{i}.jsonl", (_owned(i, 3), "safe"), job=f"{i}/3")
             for i in (0, 2)]
    code, out, _err = _merge(tmp_path, *parts, capsys=capsys)
    assert code == 1 and "2 files from 2 results files, 1 problem" in out
    said = "scan --shard 1/3: no results file holds it, so its files were never checked"
    assert said in out
    report = json.loads((tmp_path / "m.json").read_text())
    assert report["status"] == "failed" and report["problems"][0].startswith(said)
    parts.append(_results(tmp_path, "r1.jsonl", (_owned(1, 3), "safe"), job="1/3"))
    code, out, _err = _merge(tmp_path, *parts, capsys=capsys, force=True)
    assert code == 0 and "0 problems" in out


def test_every_split_of_each_kind_must_be_whole(tmp_path, capsys):
    halves = [_results(tmp_path, f"h{i}.jsonl", (_owned(i, 2), "safe"), job=f"{i}/2")
              for i in (0, 1)]
    whole = _results(tmp_path, "w.jsonl", ("b.pt", "safe"), command="ckpt-inspector scan more")
    code, out, _err = _merge(tmp_path, *halves, whole, capsys=capsys)
    assert code == 0 and "0 problems" in out
    quarter = _results(tmp_path, "q.jsonl", (_owned(3, 4), "safe"), job="3/4")
    code, out, _err = _merge(tmp_path, *halves, whole, quarter, capsys=capsys, force=True)
    assert code == 1 and "3 problems" in out
    assert all(f"scan --shard {i}/4: no results file holds it" in out for i in range(3))


def test_results_that_name_no_job_fail_the_merge(tmp_path, capsys):
    target = tmp_path / "bare.jsonl"
    log = ResultsLog(target, Job("scan.result", "ckpt-inspector scan m"))
    log.record("a.pt", tmp_path / "absent", _scan("a.pt", "safe"))
    code, out, _err = _merge(tmp_path, target, capsys=capsys)
    assert code == 1 and "results but no session line" in out


def test_a_result_outside_its_files_shard_fails_the_merge(tmp_path, capsys):
    mine, theirs = _owned(0, 2), _owned(1, 2)
    parts = [_results(tmp_path, "r0.jsonl", (mine, "safe"), job="0/2"),
             _results(tmp_path, "r1.jsonl", (theirs, "safe"), job="1/2")]
    code, out, _err = _merge(tmp_path, *parts, capsys=capsys)
    assert code == 0 and "0 problems" in out
    # shard 0's file holds a record of a file shard 0 never runs: not a record it made
    planted = _results(tmp_path, "r0b.jsonl", (mine, "safe"), (theirs, "safe"), job="0/2")
    code, out, _err = _merge(tmp_path, planted, parts[1], capsys=capsys, force=True)
    assert code == 1 and "1 problem" in out
    assert f"r0b.jsonl: a result for {theirs}, which none of that file's shards owns" in out
