"""A data-order ledger step line's place (epoch, step, rank, worker) is covered by its session's
rolling hash, as its ids are: the place is what orders a run's steps, so a line whose numbers
were rewritten (its `h` and every other line left as the guard wrote them) breaks its session,
and `run order-diff` never calls such a ledger the same as the run it was made to look like.
Each edited ledger is checked beside its clean twin, written by the real `OrderLedger`."""

from __future__ import annotations

import json
import shutil

import pytest
from order_ledgers import rewrite, write

from inspector.cli import main
from inspector.run.order_log import GENESIS, ledger_path, read_ledger, rolling_hash

FIRST, SECOND = [0, 1, 2, 3], [4, 5, 6, 7]


def order_diff(capsys, a, b):
    code = main(["run", "order-diff", str(a), str(b)])
    return code, capsys.readouterr().out


@pytest.fixture
def runs(tmp_path):
    """runA (FIRST, then SECOND), its copy, and swapped: a run that trained SECOND first, its
    two lines' step numbers exchanged so that it reads as runA's order."""
    write(tmp_path / "runA", [FIRST, SECOND])
    shutil.copytree(tmp_path / "runA", tmp_path / "twin")
    write(tmp_path / "swapped", [SECOND, FIRST])
    shutil.copytree(tmp_path / "swapped", tmp_path / "truth")

    def swap(steps):
        steps[0]["s"], steps[1]["s"] = steps[1]["s"], steps[0]["s"]

    rewrite(ledger_path(tmp_path / "swapped", 0), swap, steps_only=True)
    return tmp_path


def test_renumbered_steps_are_not_the_same_order(runs, capsys):
    assert order_diff(capsys, runs / "runA", runs / "twin") == (0, "same order: 2 steps "
                                                                    "compared\n")
    code, _ = order_diff(capsys, runs / "runA", runs / "truth")
    assert code == 1
    code, out = order_diff(capsys, runs / "runA", runs / "swapped")
    assert code == 2 and "same order" not in out and "is not the rolling hash" in out


@pytest.mark.parametrize(("field", "value"), [("e", 3), ("r", 1), ("w", 2), ("s", 9)])
def test_each_number_of_a_line_is_covered(tmp_path, field, value):
    path = write(tmp_path / "run", [FIRST, SECOND])
    assert read_ledger(path).breaks == [] and len(read_ledger(path).steps) == 2

    def edit(steps):
        steps[0][field] = value

    rewrite(path, edit, steps_only=True)
    read = read_ledger(path)
    assert read.steps == [] and len(read.breaks) == 1


@pytest.mark.parametrize("value", [0.0, 0.9, "0", True])
def test_a_number_of_another_type_is_no_step(tmp_path, value):
    path = write(tmp_path / "run", [FIRST, SECOND])

    def edit(steps):
        steps[0]["s"] = value

    rewrite(path, edit, steps_only=True)
    read = read_ledger(path)
    assert all(s.ids != tuple(FIRST) for s in read.steps)
    assert any("lacks a field" in p for p in read.problems)


def test_a_line_stripped_of_its_version_breaks(tmp_path):
    """Without `v` a line is read as version 1 (ids only): its written hash, over its place
    too and in another domain, is no version-1 hash, even with the place stuffed into its ids."""
    path = write(tmp_path / "run", [FIRST, SECOND])

    def downgrade(steps):
        for rec in steps:
            rec["ids"] = [rec["e"], rec["s"], rec["r"], rec["w"], *rec["ids"]]
            del rec["v"]
            rec["s"] += 5

    rewrite(path, downgrade, steps_only=True)
    read = read_ledger(path)
    assert read.steps == [] and len(read.breaks) == 2


def test_a_version_1_ledger_is_still_read(tmp_path):
    """A ledger written before the place was hashed (no `v`: its hash covers the ids alone)."""
    path = ledger_path(tmp_path / "run", 0)
    path.parent.mkdir(parents=True)
    h1 = rolling_hash(GENESIS, FIRST)
    h2 = rolling_hash(h1, SECOND)
    lines = [{"kind": "session", "session": "old", "rank": 0, "time": 1.0},
             {"e": 0, "s": 0, "r": 0, "w": -1, "ids": FIRST, "h": h1, "t": "old"},
             {"e": 0, "s": 1, "r": 0, "w": -1, "ids": SECOND, "h": h2, "t": "old"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    read = read_ledger(path)
    assert read.breaks == [] and [s.ids for s in read.steps] == [tuple(FIRST), tuple(SECOND)]
