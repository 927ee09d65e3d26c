"""The data-order ledger's rolling hash is checked by its one reader (`order_log.read_ledger`):
a step line whose ids were rewritten (its `h` left as the guard wrote it), a line dropped from
the middle of a session, or an id no writer could hash breaks its session's chain; that session
is left out and named, and `run order-diff` never calls such a ledger the same (exit 2). Each
hostile ledger is checked beside its clean twin, written by the real `OrderLedger`."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from order_ledgers import rewrite, write

from inspector.cli import main
from inspector.guard.order import drawn_in, expected_from_ledger
from inspector.run.order_log import ledger_path, read_ledger

GOOD = [list(range(4 * i, 4 * i + 4)) for i in range(8)]
SKIPPING = GOOD[:2] + [list(range(16 + 4 * i, 20 + 4 * i)) for i in range(6)]


def order_diff(capsys, a, b, *extra):
    code = main(["run", "order-diff", str(a), str(b), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def runs(tmp_path):
    """runA (every sample in order), twin (its copy) and edited: a run that skipped samples
    8..15, its ids rewritten to runA's with each line's `h` left as the guard wrote it."""
    write(tmp_path / "runA", GOOD)
    shutil.copytree(tmp_path / "runA", tmp_path / "twin")
    edited = write(tmp_path / "edited", SKIPPING)

    def to_good(lines):
        for rec in lines:
            if "s" in rec:
                rec["ids"] = GOOD[rec["s"]]

    rewrite(edited, to_good)
    return tmp_path


def test_rewritten_ids_are_no_same_order(runs, capsys):
    code, out, _ = order_diff(capsys, runs / "runA", runs / "twin")
    assert code == 0 and out.startswith("same order: 8 steps compared")
    code, out, err = order_diff(capsys, runs / "runA", runs / "edited")
    assert code == 2 and "same order" not in out
    assert "epoch 0 step 2 rank 0 is not the rolling hash" in out and "rolling hash" in err


def test_rewritten_ids_in_json_are_not_same(runs, capsys):
    code, out, _ = order_diff(capsys, runs / "runA", runs / "twin", "--json")
    assert code == 0 and json.loads(out)["same"] is True and json.loads(out)["broken_lines"] == 0
    code, out, _ = order_diff(capsys, runs / "runA", runs / "edited", "--json")
    result = json.loads(out)
    assert code == 2 and result["same"] is False and result["broken_lines"] == 6


def test_a_broken_session_gives_no_steps_and_is_named(runs):
    clean = read_ledger(ledger_path(runs / "twin", 0))
    assert not clean.breaks and not clean.problems and len(clean.steps) == 8
    read = read_ledger(ledger_path(runs / "edited", 0))
    assert read.steps == [] and read.lines == []
    assert [(b.epoch, b.step) for b in read.breaks] == [(0, s) for s in range(2, 8)]
    assert len(read.problems) == 6


def test_a_line_dropped_from_a_session_breaks_it(tmp_path, capsys):
    write(tmp_path / "a", GOOD)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    rewrite(ledger_path(tmp_path / "b", 0), lambda lines: lines.pop(4))  # the step-3 line
    code, out, _ = order_diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 2 and "epoch 0 step 4 rank 0 is not the rolling hash" in out


def test_only_the_broken_session_is_left_out(tmp_path):
    """A resumed run: the first session's line edited, the second session's lines stand."""
    path = write(tmp_path, GOOD[:5])
    write(tmp_path, GOOD[3:], start_step=3)

    def edit_first_session(lines):
        lines[2]["ids"] = [99, 98, 97, 96]  # session 1's step-1 line

    rewrite(path, edit_first_session)
    read = read_ledger(path)
    assert [(b.session, b.step) for b in read.breaks] == [(lines_session(path, 0), 1)]
    assert [s.step for s in read.steps] == [3, 4, 5, 6, 7]
    assert {s.session for s in read.lines} == {lines_session(path, 1)}


def lines_session(path, n):
    """The id of the n-th session a ledger file opens."""
    sessions = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["session"] for r in sessions if r.get("kind") == "session"][n]


def test_a_resumed_run_with_every_id_kind_reads_sound(tmp_path):
    """No false break: ints, strings, composite keys, numpy and tensor ids, two sessions, the
    last line cut short by a crash, re-read exactly as the writer hashed them."""
    batches = [[1, 2], ["a", "b\u202f"], [(1, 2), (3, "x")], [np.int64(5), np.int64(6)],
               torch.tensor([7, 8]), [1.5, None], []]
    path = write(tmp_path, batches)
    write(tmp_path, batches[2:], start_step=2)
    path.write_bytes(path.read_bytes()[:-5])
    read = read_ledger(path)
    assert read.breaks == [] and len(read.steps) == len(batches)
    assert len(read.problems) == 1 and "cut short" in read.problems[0]


def test_an_id_no_writer_could_hash_is_a_break_not_a_traceback(tmp_path, capsys):
    path = write(tmp_path / "a", GOOD[:2])

    def huge(lines):
        lines[1]["ids"] = [2 ** 70]

    rewrite(path, huge)
    code, out, err = order_diff(capsys, tmp_path / "a", tmp_path / "a")
    assert code == 2 and "Traceback" not in err and "step 0 rank 0 is not the rolling" in out


def test_the_guards_resume_reads_the_checked_ledger(runs):
    """`expected_from_ledger` (the resume check's reference) and `drawn_in` (the epoch's
    never-drawn check) take nothing from a broken session."""
    clean, edited = ledger_path(runs / "twin", 0), ledger_path(runs / "edited", 0)
    assert expected_from_ledger(clean, 0, 2, 2) == [tuple(GOOD[2]), tuple(GOOD[3])]
    assert expected_from_ledger(edited, 0, 2, 2) == []
    assert drawn_in(clean, 0, 0) == set(range(32))
    assert drawn_in(edited, 0, 0) == set()
