"""What `telemetry --serve --run DIR` publishes rests only on journal lines whose own checks
hold: a save line forged without the seal key, or another run's sealed line spliced in, is no
fresh verified checkpoint; a save naming a file outside the run folder (an absolute path, `..`)
is not watched. So for the Run pane's guard records: a forged alarm is no alarm, and a metrics
file the journal names is read only from a sound line and inside the run folder. Each beside
its clean twin."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from inspector.run import journal
from inspector.run.metrics import METRICS_KIND, metrics_path, read_alarms, read_run_metrics
from inspector.run.status import read_run

NOW = 1_800_000_000.0


def _save(run: Path, step: int, when: float) -> None:
    data = f"step {step}".encode()
    (run / f"step{step}.pt").parent.mkdir(parents=True, exist_ok=True)
    (run / f"step{step}.pt").write_bytes(data)
    journal.append(journal.journal_path(run), "ledger.save", {
        "step": step, "time": when, "path": f"step{step}.pt", "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(), "verified": True})


def _lines(run: Path) -> list[bytes]:
    return journal.journal_path(run).read_bytes().rstrip(b"\n").split(b"\n")


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, "the team's seal key")


@pytest.mark.parametrize("how", ["twin", "forged", "spliced"])
def test_a_line_that_fails_its_checks_is_no_verified_save(tmp_path, keyed, how):
    run, other = tmp_path / "run", tmp_path / "other"
    _save(run, 1, NOW - 3000)
    _save(run, 2, NOW - 2000)
    for step in (1, 2, 3):
        _save(other, step, NOW - 10)
    if how == "forged":  # a line anyone can write: its MAC is not the key's
        record = {"seq": 2, "prev": journal.line_hash(_lines(run)[-1]),
                  "chain": journal.line_hash(_lines(run)[0]), "kind": "ledger.save",
                  "step": 9, "time": NOW - 10, "path": "step2.pt", "verified": True,
                  "mac": "0" * 64}
        with journal.journal_path(run).open("ab") as out:
            out.write(json.dumps(record).encode() + b"\n")
    elif how == "spliced":  # another run's sealed line, with its checkpoint
        with journal.journal_path(run).open("ab") as out:
            out.write(_lines(other)[2] + b"\n")
        shutil.copy(other / "step3.pt", run / "step3.pt")
    status = read_run(run)
    assert status.journal_problems == (0 if how == "twin" else 1)
    assert [s.step for s in status.saves] == [1, 2]
    assert status.last_verified().time == NOW - 2000


def test_a_save_outside_the_run_folder_is_not_watched(tmp_path, monkeypatch):
    monkeypatch.delenv(journal.KEY_ENV, raising=False)
    run = tmp_path / "run"
    _save(run, 1, NOW)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"not the run's")
    for path in (str(secret), "../secret.bin"):
        journal.append(journal.journal_path(run), "ledger.save",
                       {"step": 2, "time": NOW, "path": path, "sha256": "0" * 64,
                        "verified": True})
    assert [s.path for s in read_run(run).saves] == [run / "step1.pt"]



@pytest.mark.parametrize("how", ["twin", "forged"])
def test_a_forged_alarm_or_metrics_line_is_not_the_runs(tmp_path, keyed, how):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere.jsonl"
    own = metrics_path(run, 0)
    own.parent.mkdir(parents=True)
    own.write_text('{"s":0,"loss":1.5,"gn":0.5,"a":null}\n')
    elsewhere.write_text('{"s":0,"loss":99.0,"gn":9.0,"a":null}\n')
    log = journal.journal_path(run)
    journal.append(log, METRICS_KIND, {"path": "guard/rank-00000.jsonl", "rank": 0})
    journal.append(log, "guard.alarm", {"step": 1, "rule": "loss-spike", "action": "warn"})
    if how == "forged":  # lines anyone can write: their MAC is not the key's
        for seq, fields in ((2, {"kind": "guard.alarm", "step": 2, "rule": "loss-nonfinite",
                                 "action": "stop"}),
                            (3, {"kind": METRICS_KIND, "path": "../elsewhere.jsonl",
                                 "rank": 0})):
            record = {"seq": seq, "prev": journal.line_hash(_lines(run)[-1]),
                      "chain": journal.line_hash(_lines(run)[0]), **fields, "mac": "0" * 64}
            with log.open("ab") as out:
                out.write(json.dumps(record).encode() + b"\n")
    got = read_run_metrics(journal.read(log), run)
    assert [a.rule for a in got.alarms] == ["loss-spike"]
    assert [(s.path, s.loss) for s in got.series] == [(own, (1.5,))]
    assert [(s.step, s.rule) for s in read_alarms(journal.read(log))] == [(1, "loss-spike")]


def test_a_metrics_file_outside_the_run_folder_is_not_read(tmp_path, monkeypatch):
    monkeypatch.delenv(journal.KEY_ENV, raising=False)
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere.jsonl"
    elsewhere.write_text('{"s":0,"loss":99.0,"gn":9.0,"a":null}\n')
    for path in (str(elsewhere), "../elsewhere.jsonl"):
        journal.append(journal.journal_path(run), METRICS_KIND, {"path": path, "rank": 0})
        assert read_run_metrics(journal.read(journal.journal_path(run)), run).series == ()
