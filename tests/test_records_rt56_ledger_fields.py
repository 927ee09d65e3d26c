"""A `ledger.save` line of any shape is a bad record or an untrusted line, never a traceback
and never a field read as something a save does not write: on a line whose seal fails (named
as not trusted, its fields never used), on a sound line (named as a bad record), and in what
the disk holds where a line points (a link loop). Each case beside its clean twin: the same
line with the field as a save writes it."""

from __future__ import annotations

import hashlib
import json
import types

import pytest
import torch

from inspector.cli import main
from inspector.ledger import save
from inspector.run import journal, status
from inspector.run.checkpoints import read_ledger, resume_choice
from inspector.run.record_lookup import find_record

KEY = "the trainer's seal key"


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, KEY)


@pytest.fixture
def raw_numbers(monkeypatch):
    """Lines written as Python's json writes them (`NaN`, `Infinity`): what a hand-written
    line can hold, and what every JSON reader of the journal takes as a float."""
    monkeypatch.setattr(journal, "strict_json", types.SimpleNamespace(
        dumps=lambda obj, sort_keys=False: json.dumps(obj)))


def _run(run, steps=(1, 2, 3)):
    for step in steps:
        save({"w": torch.full((4,), float(step))}, run / "ckpt" / f"step-{step}.pt",
             step=step, run_dir=run)
    return run


def _folder_line(run, **file_fields):
    """A folder save record as the ledger writes one, of a folder planted in the run."""
    folder = run / "ckpt" / "x"
    folder.mkdir(parents=True)
    (folder / "a.bin").write_bytes(b"A")
    sha = hashlib.sha256(b"A").hexdigest()
    entry = {"path": "ckpt/x/a.bin", "size": 1, "sha256": sha, "format": None,
             "tensors": [{"key": "w", "digest": "ab"}], **file_fields}
    listing = f"{entry['sha256']}  ckpt/x/a.bin\n" if entry["sha256"] else ""
    return {"step": 9, "path": "ckpt/x", "layout": "folder", "size": 1,
            "sha256": hashlib.sha256(listing.encode()).hexdigest(), "verified": True,
            "outcome": "verified", "files": [entry]}


def _file_line(run, name="evil.pt", **changes):
    """A file save record as the ledger writes one, of a checkpoint planted in the run."""
    evil = run / "ckpt" / name
    torch.save({"w": torch.zeros(4)}, evil)
    data = evil.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    record = {"step": 9, "epoch": 1.0, "time": "2026-12-07T10:00:00+00:00", "host": "x",
              "rank": 0, "path": f"ckpt/{name}", "layout": "file", "format": "pytorch-zip",
              "writer": "torch.save", "size": len(data), "sha256": sha, "verified": True,
              "outcome": "verified", "warnings": [], "detail": None,
              "files": [{"path": f"ckpt/{name}", "size": len(data), "sha256": sha,
                         "tensors": [{"key": "w", "digest": "ab"}]}]}
    return {**record, **changes}


def _append(run, record, sealed: bool, monkeypatch):
    """Append `record` sealed with the run's key, or as someone without it would."""
    if not sealed:
        monkeypatch.setenv(journal.KEY_ENV, "not the trainer's key")
    journal.append(journal.journal_path(run), "ledger.save", record)
    monkeypatch.setenv(journal.KEY_ENV, KEY)


@pytest.mark.parametrize("sha", [None, "1" * 64], ids=["null-sha", "twin"])
def test_an_untrusted_line_of_any_shape_is_ignored_and_named(tmp_path, keyed, monkeypatch,
                                                             capsys, sha):
    run = _run(tmp_path / "run")
    _append(run, _folder_line(run, sha256=sha), sealed=False, monkeypatch=monkeypatch)
    ledger = read_ledger(run)
    assert [s.step for s in ledger.saves] == [1, 2, 3]
    assert [b.split(",")[0] for b in ledger.bad_records] == ["line 4: forged"]
    assert main(["run", "latest", str(run)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "ckpt" / "step-3.pt")
    assert "ignored line 4: forged, not trusted" in out.err
    assert main(["run", "verify", str(run)]) == 1
    assert "not trusted" in capsys.readouterr().out
    assert main(["verify", str(run / "ckpt" / "step-3.pt")]) == 0


def test_a_sound_line_whose_file_has_no_sha256_is_a_bad_record(tmp_path, keyed, monkeypatch,
                                                               capsys):
    run = _run(tmp_path / "run")
    _append(run, _folder_line(run, sha256=None), sealed=True, monkeypatch=monkeypatch)
    ledger = read_ledger(run)
    assert [s.step for s in ledger.saves] == [1, 2, 3]
    assert any("line 4: not a save record" in b and "no SHA-256" in b
               for b in ledger.bad_records)
    assert main(["run", "latest", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "ckpt" / "step-3.pt")
    assert find_record(run / "ckpt" / "step-3.pt") is not None


def test_the_clean_folder_line_is_a_save(tmp_path, keyed, monkeypatch):
    """The twin of the cases above: the same line as a save writes it is read as one."""
    run = _run(tmp_path / "run")
    _append(run, _folder_line(run), sealed=True, monkeypatch=monkeypatch)
    assert [s.step for s in read_ledger(run).saves] == [1, 2, 3, 9]
    assert read_ledger(run).bad_records == ()


# Each is a field a save never writes that the reader took before: read as a value (a text
# `verified` as true, a string's letters as warnings, a NaN epoch printed into --json) or
# crashing later (a surrogate no file name holds)
MALFORMED = {
    "file without sha256": "sha256",
    "file without size": "size",
    "epoch NaN": {"epoch": float("nan")},
    "epoch Infinity": {"epoch": float("inf")},
    "time not text": {"time": {"at": 1}},
    "host not text": {"host": ["x"]},
    "writer not text": {"writer": 5},
    "format not text": {"format": 5},
    "detail not text": {"detail": ["x"]},
    "verified not a bool": {"verified": "no"},
    "outcome not text": {"outcome": ["verified"]},
    "warnings a string": {"warnings": "abc"},
    "tensor digest not text": "digest",
    "path a lone surrogate": "surrogate",
}


def _malformed(run, case):
    change = MALFORMED[case]
    if change == "surrogate":  # JSON's "\ud800": no file name holds it, no system call takes it
        record = _file_line(run)
        return {**record, "path": "ckpt/\ud800.pt",
                "files": [{**record["files"][0], "path": "ckpt/\ud800.pt"}]}
    if change in ("sha256", "size", "digest"):
        # the record's own size and SHA-256 made to agree with what its files then give
        record = _file_line(run)
        entry = dict(record["files"][0])
        if change == "digest":
            entry["tensors"] = [{"key": "w", "digest": 12345}]
            return {**record, "files": [entry]}
        del entry[change]
        return {**record, "files": [entry], change: 0 if change == "size" else None}
    return _file_line(run, **change)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_sound_line_with_a_field_no_save_writes_is_a_bad_record(tmp_path, keyed,
                                                                  raw_numbers, monkeypatch,
                                                                  capsys, case):
    run = _run(tmp_path / "run")
    _append(run, _malformed(run, case), sealed=True, monkeypatch=monkeypatch)
    ledger = read_ledger(run)
    assert [s.step for s in ledger.saves] == [1, 2, 3]
    assert any(b.startswith("line 4: not a save record") for b in ledger.bad_records)
    assert resume_choice(run).record.step == 3
    assert main(["run", "latest", "--json", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 3
    assert main(["run", "verify", str(run)]) == 1
    assert "line 4: not a save record" in capsys.readouterr().out


@pytest.mark.parametrize("case", list(MALFORMED))
def test_an_untrusted_line_with_a_field_no_save_writes_is_named_only(tmp_path, keyed,
                                                                     raw_numbers, monkeypatch,
                                                                     case):
    run = _run(tmp_path / "run")
    _append(run, _malformed(run, case), sealed=False, monkeypatch=monkeypatch)
    ledger = read_ledger(run)
    assert [s.step for s in ledger.saves] == [1, 2, 3] and ledger.untrusted == ()
    assert [b.split(":")[0] for b in ledger.bad_records] == ["line 4"]
    assert find_record(run / "ckpt" / "step-3.pt") is not None


def test_the_clean_file_line_is_a_save(tmp_path, keyed, raw_numbers, monkeypatch):
    """The twin of the malformed lines: the same line as a save writes it."""
    run = _run(tmp_path / "run")
    _append(run, _file_line(run), sealed=True, monkeypatch=monkeypatch)
    assert [s.step for s in read_ledger(run).saves] == [1, 2, 3, 9]
    assert resume_choice(run).record.step == 9


@pytest.mark.parametrize("sealed", [True, False], ids=["sound", "untrusted"])
def test_a_line_naming_a_link_loop_is_a_bad_record_not_a_traceback(tmp_path, keyed,
                                                                   monkeypatch, capsys,
                                                                   sealed):
    run = _run(tmp_path / "run")
    _append(run, _file_line(run), sealed=sealed, monkeypatch=monkeypatch)
    evil = run / "ckpt" / "evil.pt"
    evil.unlink()
    evil.symlink_to("evil.pt")  # the path the line names now loops
    ledger = read_ledger(run)
    assert [s.step for s in ledger.saves] == [1, 2, 3]
    assert any(b.startswith("line 4:") for b in ledger.bad_records)
    assert main(["run", "latest", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "ckpt" / "step-3.pt")
    assert find_record(run / "ckpt" / "step-3.pt") is not None


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 10 ** 400])
def test_run_status_takes_no_number_a_float_cannot_be(tmp_path, keyed, raw_numbers,
                                                      monkeypatch, value):
    """`run.status` (the exporter's reader) reads a line's step, size and time as numbers:
    one that is no finite float is no number, beside the clean twin's."""
    run = _run(tmp_path / "run", (1,))
    _append(run, _file_line(run, step=value, size=value, time=value), sealed=True,
            monkeypatch=monkeypatch)
    got = status.read_run(run)
    assert [(s.step, s.size) for s in got.saves][-1] == (None, None)
    twin = _run(tmp_path / "twin", (1,))
    _append(twin, _file_line(twin, step=9, time=5.0), sealed=True, monkeypatch=monkeypatch)
    assert status.read_run(twin).saves[-1].step == 9
