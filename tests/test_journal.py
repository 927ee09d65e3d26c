"""run.journal: a hash-chained JSON-lines run journal that names every break and loses no line."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from inspector.run import journal


def _write(path, n):
    for i in range(n):
        journal.append(path, "save", {"step": i})


def test_chain_reads_back_intact(tmp_path):
    path = journal.journal_path(tmp_path)
    _write(path, 4)
    got = journal.read(path)
    assert got.intact
    assert [e.record["step"] for e in got.entries] == [0, 1, 2, 3]
    assert [e.seq for e in got.entries] == [0, 1, 2, 3]
    assert got.entries[0].record["prev"] == journal.GENESIS
    lines = path.read_bytes().split(b"\n")
    assert got.entries[1].record["prev"] == journal.line_hash(lines[0])


def test_truncated_last_line_is_named_and_appending_goes_on(tmp_path):
    path = tmp_path / "j.jsonl"
    _write(path, 3)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    got = journal.read(path)
    assert [p.kind for p in got.problems] == ["truncated"]
    assert got.problems[0].line == 3
    assert len(got.entries) == 2
    journal.append(path, "save", {"step": 9})
    again = journal.read(path)
    assert [(p.line, p.kind) for p in again.problems] == [(3, "truncated")]
    assert "kept as evidence" in again.problems[0].detail and len(again.sound) == 3
    assert [e.record["step"] for e in again.entries] == [0, 1, 9]
    assert again.entries[-1].seq == 2


@pytest.mark.parametrize("victim", [0, 2, 4])
def test_an_edited_line_is_named(tmp_path, victim):
    path = tmp_path / "j.jsonl"
    _write(path, 5)
    lines = path.read_bytes().split(b"\n")
    lines[victim] = lines[victim].replace(b'"step": %d' % victim, b'"step": 77')
    path.write_bytes(b"\n".join(lines))
    got = journal.read(path)
    assert [(p.line, p.kind) for p in got.problems] == [(victim + 1, "edited")]
    assert len(got.entries) == 5


def test_an_edit_that_reseals_is_caught_by_the_next_line(tmp_path):
    path = tmp_path / "j.jsonl"
    _write(path, 3)
    lines = path.read_bytes().split(b"\n")
    record = json.loads(lines[1])
    del record["seal"]
    record["step"] = 55
    body = json.dumps(record).encode()
    lines[1] = journal._sealed(body, None)
    path.write_bytes(b"\n".join(lines))
    got = journal.read(path)
    assert [(p.line, p.kind) for p in got.problems] == [(2, "edited")]


def test_a_deleted_line_is_named(tmp_path):
    path = tmp_path / "j.jsonl"
    _write(path, 5)
    lines = path.read_bytes().split(b"\n")
    del lines[2]
    path.write_bytes(b"\n".join(lines))
    got = journal.read(path)
    assert [(p.line, p.kind) for p in got.problems] == [(3, "deleted")]
    assert "seq 2..2" in got.problems[0].detail
    assert [e.record["step"] for e in got.entries] == [0, 1, 3, 4]


def test_reserved_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match="seq"):
        journal.append(tmp_path / "j.jsonl", "save", {"seq": 3})


def _rank(path, rank, n):
    for i in range(n):
        journal.append(path, "save", {"rank": rank, "i": i})


def test_ranks_appending_at_once_keep_one_chain(tmp_path):
    path = tmp_path / "j.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(path, r, 40)) for r in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got = journal.read(path)
    assert got.intact
    assert [e.seq for e in got.entries] == list(range(120))
    for r in range(3):
        assert [e.record["i"] for e in got.entries if e.record["rank"] == r] == list(range(40))


def _forge_last(path, key, **change):
    """Rewrite the newest line with `change`, chained and sealed as a forger can (with `key`
    when the forger holds one, else the plain SHA-256 anyone can recompute)."""
    lines = path.read_bytes().rstrip(b"\n").split(b"\n")
    record = json.loads(lines[-1])
    record.pop("seal", None)
    record.pop("mac", None)
    record.update(change)
    lines[-1] = journal._sealed(json.dumps(record).encode(), key)
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_a_keyed_journal_is_authenticated_and_refuses_lines_anyone_could_reseal(
        tmp_path, monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, "the shard's secret")
    path = tmp_path / "j.jsonl"
    _write(path, 3)
    got = journal.read(path)
    assert got.intact and got.authenticated and len(got.sound) == 3
    assert b'"mac":"' in path.read_bytes() and b'"seal":"' not in path.read_bytes()
    _forge_last(path, None, step=999)
    got = journal.read(path)
    assert [(p.line, p.kind) for p in got.problems] == [(3, "unsigned")]
    assert [e.record["step"] for e in got.sound] == [0, 1]
    _forge_last(path, b"another key", step=999)
    got = journal.read(path)
    assert [(p.line, p.kind) for p in got.problems] == [(3, "forged")]
    # read with the key: what is sound carries it, and the forged line is not sound
    assert got.authenticated and [e.record["step"] for e in got.sound] == [0, 1]


def test_without_a_key_a_journal_is_unauthenticated_and_keyed_lines_are_chain_checked(
        tmp_path, monkeypatch):
    path = tmp_path / "j.jsonl"
    monkeypatch.setenv(journal.KEY_ENV, "k")
    _write(path, 2)
    monkeypatch.delenv(journal.KEY_ENV)
    got = journal.read(path)
    assert got.intact and not got.authenticated and len(got.sound) == 2
    # the same forger, without the key, is caught by nothing but the key: hence `authenticated`
    _forge_last(path, None, step=999)
    assert journal.read(path).intact and not journal.read(path).authenticated


def test_a_seal_key_file_that_cannot_be_read_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(journal.KEY_FILE_ENV, str(tmp_path / "missing.key"))
    with pytest.raises(journal.SealKeyError, match="cannot read the seal key"):
        journal.append(tmp_path / "j.jsonl", "save", {"step": 0})
