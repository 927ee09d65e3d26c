"""Every journal line's place is checked, not only its seal: a chain's first line (seq 0, which
carries no chain id) anywhere but line 1 is misplaced, two sealed lines that claim one seq or
do not chain are a fork that no verdict rests on, and what a line says is gone is keyed by the
line it names. Each case is what someone who can write two run folders sealed with one key
(as a team shares it) can do without the key: move sealed lines between them."""

from __future__ import annotations

import shutil

import pytest
import torch

from inspector.cli import main
from inspector.core.vocabulary import SaveOutcome
from inspector.ledger import save
from inspector.run import journal
from inspector.run.checkpoints import SaveRecord, _removed, _replaced, latest_valid, read_ledger


@pytest.fixture(autouse=True)
def keyed(monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, "the team's seal key")


def _save(run, step, value):
    save({"w": torch.full((4,), value)}, run / "ckpt" / f"step-{step}.pt", step=step, run_dir=run)


def _lines(run):
    return journal.journal_path(run).read_bytes().rstrip(b"\n").split(b"\n")


def _write(run, lines):
    journal.journal_path(run).write_bytes(b"\n".join(lines) + b"\n")


def _two_runs(tmp_path):
    """Run A saved steps 1 and 2; run B saved its own step 1, whose bytes now lie in A's
    place (the loader reads them there: -666)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _save(a, 1, 1.0)
    _save(a, 2, 2.0)
    _save(b, 1, -666.0)
    shutil.copy(b / "ckpt" / "step-1.pt", a / "ckpt" / "step-1.pt")
    assert torch.load(a / "ckpt" / "step-1.pt", weights_only=True)["w"].tolist() == [-666.0] * 4
    return a, b


def _problems(run):
    return [(p.line, p.kind) for p in journal.read(journal.journal_path(run)).problems]


def test_another_runs_first_line_inserted_is_misplaced(tmp_path, capsys):
    a, b = _two_runs(tmp_path)
    lines = _lines(a)
    _write(a, [lines[0], _lines(b)[0], *lines[1:]])
    assert _problems(a) == [(2, "misplaced")]
    assert [e.line for e in journal.read(journal.journal_path(a)).sound] == [1, 3]
    assert main(["run", "verify", str(a)]) == 1
    out = capsys.readouterr().out
    assert "CHANGED" in out and "line 2: misplaced" in out and "REPLACED" not in out
    assert main(["verify", str(a / "ckpt" / "step-1.pt")]) == 1
    assert latest_valid(a).path == "ckpt/step-2.pt"


def test_another_runs_first_line_in_place_of_line_1_is_believed_by_neither(tmp_path, capsys):
    a, b = _two_runs(tmp_path)
    _write(a, [_lines(b)[0], *_lines(a)[1:]])
    # both sealed with the key, and A's step 2 was not written after B's step 1: which of the
    # two is A's own no check can tell
    assert _problems(a) == [(1, "forked"), (2, "misplaced")]
    assert read_ledger(a).saves == ()
    assert main(["verify", str(a / "ckpt" / "step-1.pt")]) == 1
    assert "on a line not trusted (forked" in capsys.readouterr().err
    assert main(["run", "verify", str(a)]) == 1
    assert latest_valid(a) is None


def _forked(tmp_path, steps):
    """Run A (steps 1.. `steps`) and a copy of it taken after step 1 that saved its own step 2
    to the same path: two chains from one start, sealed with one key."""
    a, copy = tmp_path / "a", tmp_path / "copy"
    _save(a, 1, 1.0)
    shutil.copytree(a, copy)
    for step in range(2, steps + 1):
        _save(a, step, float(step))
    _save(copy, 2, -666.0)
    shutil.copy(copy / "ckpt" / "step-2.pt", a / "ckpt" / "step-2.pt")
    assert torch.load(a / "ckpt" / "step-2.pt", weights_only=True)["w"].tolist() == [-666.0] * 4
    return a, _lines(copy)[1]


def test_a_forked_line_claiming_a_taken_seq_leaves_neither_believed(tmp_path, capsys):
    a, other = _forked(tmp_path, 2)
    _write(a, [*_lines(a), other])  # chains to A's step 1, as A's own step 2 does
    assert _problems(a) == [(2, "forked"), (3, "forked")]
    assert latest_valid(a).path == "ckpt/step-1.pt"
    assert main(["verify", str(a / "ckpt" / "step-2.pt")]) == 1
    assert "forked" in capsys.readouterr().err
    assert main(["run", "verify", str(a)]) == 1


def test_a_forked_line_in_place_of_ones_own_leaves_neither_believed(tmp_path, capsys):
    a, other = _forked(tmp_path, 3)
    lines = _lines(a)
    _write(a, [lines[0], other, lines[2]])  # A's step 3 was not written after it
    assert _problems(a) == [(2, "forked"), (3, "misplaced")]
    assert main(["verify", str(a / "ckpt" / "step-2.pt")]) == 1
    assert "not trusted" in capsys.readouterr().err
    assert latest_valid(a).path == "ckpt/step-1.pt"


def test_what_is_gone_is_keyed_by_the_line_it_names():
    def record(line):
        return SaveRecord(path="ckpt/last.ckpt", size=0, sha256=None, files=(),
                          outcome=SaveOutcome.VERIFIED, seq=5, line=line)

    # two saves that claim one seq (the reader calls them a fork; this is the second lock):
    # the later one written over the earlier, by line, and a rotation of seq 5 names neither
    saves = [record(3), record(4)]
    assert _replaced(saves) == {3: 4}
    assert _removed(saves, {5: 9}) == {}
    assert _removed(saves[:1], {5: 9}) == {3: 9}
