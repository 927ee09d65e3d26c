"""A journal takes one chain id, never a wider set: two runs sealed with one key (a team's) or
signing with one key, and someone who can write run A's folder splices run B's sealed lines
into A's journal (B's seq-1 line, B's newest save) with B's checkpoint beside them. B's lines
are another run's (misplaced) and `run latest` keeps A's newest; where line 1 itself does not
hold and the lines name two chains, neither is believed. Each splice beside its clean twin
(the same splice without B's seq-1 line), which was always read right."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from signing_keys import write_key

from inspector.cli import main
from inspector.ledger import save
from inspector.run import journal
from inspector.run.checkpoints import latest_valid

KEY = "team-shared-seal-key"


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    """Run A saved steps 1..3, run B steps 1..6 (B's weights are 100 + step)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for step in (1, 2, 3):
        save({"w": torch.full((4,), float(step))}, a / f"ckpt/step-{step}.pt", step=step,
             run_dir=a)
    for step in range(1, 7):
        save({"w": torch.full((4,), 100.0 + step)}, b / f"ckpt/step-{step}.pt", step=step,
             run_dir=b)
    return a, b


def _lines(run: Path) -> list[bytes]:
    return journal.journal_path(run).read_bytes().rstrip(b"\n").split(b"\n")


def _splice(a: Path, b: Path, name: str, lines: list[bytes]) -> Path:
    """A copy of A whose journal is `lines`, with B's step-6 checkpoint (and signature) copied
    in: the loader reads B's weights there."""
    run = a.parent / name
    shutil.copytree(a, run)
    journal.journal_path(run).write_bytes(b"\n".join(lines) + b"\n")
    for sig in ("step-6.pt", "step-6.pt.sig"):
        if (b / "ckpt" / sig).exists():
            shutil.copy(b / "ckpt" / sig, run / "ckpt" / sig)
    assert torch.load(run / "ckpt/step-6.pt", weights_only=True)["w"].tolist() == [106.0] * 4
    return run


def _kinds(run: Path) -> dict[int, str]:
    return {p.line: p.kind for p in journal.read(journal.journal_path(run)).problems}


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, KEY)


def test_another_runs_seq1_line_does_not_widen_the_chain(tmp_path, keyed, capsys):
    a, b = _runs(tmp_path)
    la, lb = _lines(a), _lines(b)
    twin = _splice(a, b, "twin", [la[0], *la[2:], lb[5]])
    spliced = _splice(a, b, "spliced", [la[0], *la[2:], lb[1], lb[5]])
    for run in (twin, spliced):
        kinds = _kinds(run)
        assert all(kinds[n] == "misplaced" for n in range(len(la), len(_lines(run)) + 1)), kinds
        assert latest_valid(run).path == "ckpt/step-3.pt"
        assert main(["run", "latest", str(run)]) == 0
        assert capsys.readouterr().out.strip() == str(run / "ckpt/step-3.pt")
        assert main(["verify", str(run / "ckpt/step-6.pt")]) == 1
        capsys.readouterr()


def test_a_damaged_line_1_and_two_chains_leave_neither_believed(tmp_path, keyed, capsys):
    a, b = _runs(tmp_path)
    la, lb = _lines(a), _lines(b)
    damaged = la[0][:-3] + (b"0" if la[0][-3:-2] != b"0" else b"1") + la[0][-2:]
    # the same damage alone: line 1 is named, A's other lines still stand
    alone = _splice(a, b, "alone", [damaged, *la[1:]])
    assert _kinds(alone) == {1: "forged"}
    assert latest_valid(alone).path == "ckpt/step-3.pt"
    for name, lines in (("kept", [damaged, *la[1:], lb[1], lb[5]]),
                        ("dropped", [damaged, *la[2:], lb[1], lb[5]])):
        run = _splice(a, b, name, lines)
        assert latest_valid(run) is None, name
        assert main(["run", "latest", str(run)]) == 1
        assert main(["verify", str(run / "ckpt/step-6.pt")]) == 1
        capsys.readouterr()


def test_a_deleted_first_line_keeps_its_chain_and_another_run_at_the_top_does_not(
        tmp_path, keyed):
    a, b = _runs(tmp_path)
    la, lb = _lines(a), _lines(b)
    gone = _splice(a, b, "gone", la[1:])
    assert latest_valid(gone).path == "ckpt/step-3.pt"
    topped = _splice(a, b, "topped", [lb[1], *la[1:], lb[5]])
    assert latest_valid(topped) is None


def test_a_signed_save_of_another_run_is_not_taken_by_its_signature(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.delenv(journal.KEY_ENV, raising=False)
    pem, pub = write_key(tmp_path, "team")
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    a, b = _runs(tmp_path / "runs")
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    la, lb = _lines(a), _lines(b)
    for name, lines in (("twin", [la[0], *la[2:], lb[5]]),
                        ("spliced", [la[0], *la[2:], lb[1], lb[5]])):
        run = _splice(a, b, name, lines)
        assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
        assert capsys.readouterr().out.strip() == str(run / "ckpt/step-3.pt"), name
