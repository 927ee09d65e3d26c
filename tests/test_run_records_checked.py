"""A journal line or save record is believed only as far as its own checks go: a line after a
gap is still judged by its seal, a line copied from earlier is named, a record's path must be
the file its checked files name, and a field of the wrong type is a bad record, not a
traceback. Each case is what someone who can write the run folder, without the seal or signing
key, can append."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch
from signing_keys import write_key

from inspector.cli import main
from inspector.ledger import save
from inspector.run import journal
from inspector.run.checkpoints import latest_valid, read_ledger
from inspector.signing.saves import signed_by


def _run(run, steps=(1, 2)):
    for step in steps:
        save({"w": torch.full((4, 4), float(step))}, run / "ckpt" / f"step-{step}.pt",
             step=step, run_dir=run)
    return run


def _planted(run, name="evil.pt"):
    """A checkpoint nobody's ledger wrote, and a save record for it as the ledger writes one."""
    evil = run / "ckpt" / name
    torch.save({"w": torch.full((4, 4), 666.0)}, evil)
    data = evil.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    return {"step": 999, "epoch": None, "time": "2026-12-07T10:00:00+00:00", "host": "x",
            "rank": 0, "path": f"ckpt/{name}", "layout": "file", "format": "pytorch-zip",
            "writer": "torch.save", "size": len(data), "sha256": sha, "verified": True,
            "outcome": "verified", "warnings": [], "detail": None,
            "files": [{"path": f"ckpt/{name}", "size": len(data), "sha256": sha}]}


def _lines(run):
    return journal.journal_path(run).read_bytes().rstrip(b"\n").split(b"\n")


def _append_raw(run, line: bytes):
    with open(journal.journal_path(run), "ab") as f:
        f.write(line + b"\n")


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, "the trainer's seal key")


def test_a_line_after_a_gap_is_still_judged_by_its_seal(tmp_path, keyed, capsys):
    run = _run(tmp_path)
    last = json.loads(_lines(run)[-1])
    record = {"seq": last["seq"] + 2, "prev": "f" * 64, "kind": "ledger.save",
              **_planted(run), "mac": "0" * 64}
    _append_raw(run, json.dumps(record, separators=(",", ":")).encode())
    got = journal.read(journal.journal_path(run))
    assert {(p.line, p.kind) for p in got.problems} == {(3, "deleted"), (3, "forged")}
    assert [e.line for e in got.sound] == [1, 2]
    assert latest_valid(run).path == "ckpt/step-2.pt"
    assert main(["run", "latest", str(run)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "ckpt" / "step-2.pt")
    # the key was set and used: no "no seal key" line
    assert "no seal key" not in out.err
    assert main(["run", "verify", str(run)]) == 1
    assert "forged" in capsys.readouterr().out


def test_a_real_gap_blames_no_line_and_the_line_after_it_stays_sound(tmp_path, keyed):
    run = _run(tmp_path, (1, 2, 3))
    lines = _lines(run)
    journal.journal_path(run).write_bytes(b"\n".join([lines[0], lines[2]]) + b"\n")
    got = journal.read(journal.journal_path(run))
    assert [(p.line, p.kind) for p in got.problems] == [(2, "deleted")]
    assert latest_valid(run).path == "ckpt/step-3.pt"


def test_a_line_copied_from_earlier_is_named_and_blames_no_other(tmp_path, keyed, capsys):
    run = _run(tmp_path)
    _append_raw(run, _lines(run)[0])  # its MAC holds: it is the key holder's own line
    got = journal.read(journal.journal_path(run))
    assert [(p.line, p.kind) for p in got.problems] == [(3, "replayed")]
    assert [e.line for e in got.sound] == [1, 2]
    assert latest_valid(run).path == "ckpt/step-2.pt"
    assert main(["run", "verify", str(run)]) == 1
    assert "replayed" in capsys.readouterr().out


def test_a_record_whose_path_is_not_its_signed_file_is_refused(tmp_path, monkeypatch, capsys):
    pem, pub = write_key(tmp_path, "alice")
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    _run(run, (1,))
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    genuine = json.loads(_lines(run)[0])
    # without the key: an unsigned file, step 1's signature beside it, and step 1's files
    _planted(run)
    shutil.copy(run / "ckpt" / "step-1.pt.sig", run / "ckpt" / "evil.pt.sig")
    fields = {k: v for k, v in genuine.items() if k not in ("seq", "prev", "kind", "seal")}
    journal.append(journal.journal_path(run), "ledger.save", {**fields, "step": 2,
                                                              "path": "ckpt/evil.pt"})
    assert latest_valid(run, refuse=signed_by(pub)).path == "ckpt/step-1.pt"
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "ckpt" / "step-1.pt")
    assert "ckpt/evil.pt is not what its files name (ckpt/step-1.pt)" in out.err
    # a record whose files are its own but whose summary hash is another file's
    _planted(run, "other.pt")
    other = {**_planted(run, "other.pt"), "sha256": genuine["sha256"]}
    journal.append(journal.journal_path(run), "ledger.save", other)
    assert any("ckpt/other.pt's size or SHA-256 is not what its files give" in b
               for b in read_ledger(run).bad_records)


@pytest.mark.parametrize("change", [{"step": "abc"}, {"step": [1]}, {"step": True},
                                    {"path": "ckpt/a\u0000.pt"}, {"size": "12"},
                                    {"epoch": {}}, {"rank": "0"}])
def test_a_field_of_the_wrong_type_is_a_bad_record_not_a_traceback(tmp_path, change, capsys):
    run = _run(tmp_path, (1,))
    journal.append(journal.journal_path(run), "ledger.save", {**_planted(run), **change})
    assert main(["run", "latest", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "ckpt" / "step-1.pt")
    assert main(["run", "verify", str(run)]) == 1
    assert "not a save record" in capsys.readouterr().out
    assert main(["verify", str(run / "ckpt" / "step-1.pt")]) == 0


def test_a_line_sealed_for_another_journal_is_misplaced_and_blames_no_other(tmp_path, keyed,
                                                                            capsys):
    run_a, run_b = _run(tmp_path / "a", (1, 2, 3)), _run(tmp_path / "b", (1, 2, 3, 4))
    foreign = _lines(run_b)[2]  # run B's step-3 save, sealed with the same key
    (run_a / "ckpt" / "step-3.pt").write_bytes((run_b / "ckpt" / "step-3.pt").read_bytes())
    _append_raw(run_a, foreign)
    got = journal.read(journal.journal_path(run_a))
    assert [(p.line, p.kind) for p in got.problems] == [(4, "misplaced")]
    assert [e.line for e in got.sound] == [1, 2, 3]
    # after a gap too: the chain id says whose journal it was written to
    lines, later = _lines(run_a), _lines(run_b)[3]  # B's seq 3: no seq 2 before it in A
    journal.journal_path(run_a).write_bytes(b"\n".join([*lines[:2], later]) + b"\n")
    got = journal.read(journal.journal_path(run_a))
    assert [(p.line, p.kind) for p in got.problems] == [(3, "misplaced")]
    assert latest_valid(run_a).path == "ckpt/step-2.pt"


def test_a_moved_line_is_read_in_its_place_and_the_newest_save_stays_newest(tmp_path, keyed,
                                                                            capsys):
    run = _run(tmp_path, (1, 2, 3))
    journal.append(journal.journal_path(run), "guard.alarm", {"step": 3})
    lines = _lines(run)
    moved = [lines[0], lines[3], *lines[1:3]]  # the alarm (seq 3) moved up to line 2
    journal.journal_path(run).write_bytes(b"\n".join(moved) + b"\n")
    got = journal.read(journal.journal_path(run))
    assert {p.kind for p in got.problems} == {"moved"}
    assert [e.seq for e in got.entries] == [0, 1, 2, 3]
    assert latest_valid(run).path == "ckpt/step-3.pt"
    assert main(["run", "latest", str(run)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "ckpt" / "step-3.pt")
    assert "the journal was changed" in out.err and "moved" in out.err


def test_run_latest_says_when_lines_were_deleted(tmp_path, keyed, capsys):
    run = _run(tmp_path, (1, 2, 3))
    journal.append(journal.journal_path(run), "guard.alarm", {"step": 3})
    lines = _lines(run)
    journal.journal_path(run).write_bytes(b"\n".join([*lines[:2], lines[3]]) + b"\n")
    assert main(["run", "latest", str(run)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "ckpt" / "step-2.pt")
    assert ("the journal was changed: line 3: deleted: 1 line(s) (seq 2..2) are missing "
            "before it (a newer save's record may be gone)") in out.err
