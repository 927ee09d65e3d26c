"""A FIFO or a device named where a file is expected (a results file, a journal, a checkpoint
to inspect) is refused at once, saying what it is: never waited on for a writer, never read
without end (a link to /dev/zero), by every command that reads it."""

from __future__ import annotations

import os
import threading

import pytest

from inspector.cli import main
from inspector.integrity.hashing import sha256_file
from inspector.integrity.regular_file import UnfitFile
from inspector.run import journal


def _within(seconds: float, call) -> list:
    """`call()`'s value, run on a thread that must end within `seconds` (a read that waits on
    a FIFO, or reads /dev/zero, never does)."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"still running after {seconds} s"
    return out


@pytest.fixture(params=["fifo", "/dev/zero"])
def special(request, tmp_path):
    """A path that names a FIFO, or a link to /dev/zero."""
    named = tmp_path / "special.bin"
    if request.param == "fifo":
        os.mkfifo(named)
    else:
        named.symlink_to(request.param)
    return named


def test_a_results_file_that_is_no_regular_file_is_refused_at_once(tmp_path, capsys, special):
    named = special
    out = tmp_path / "merged.json"
    assert _within(20, lambda: main(["merge", str(named), "-o", str(out)])) == [5]
    err = capsys.readouterr().err
    assert "must be a regular file, not a" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    # and a shard's own --results: a usage error before any file is scanned

    def shard() -> int | str | None:
        try:
            return main(["scan", "--shard", "0/1", "--results", str(named), str(tmp_path)])
        except SystemExit as exc:  # argparse's exit for a bad argument
            return exc.code

    assert _within(20, shard) == [2]
    assert "argument --results: " in capsys.readouterr().err


def test_a_journal_that_is_a_fifo_is_refused_by_the_guard_at_once(tmp_path):
    from inspector.core.errors import CodedError
    from inspector.guard.guard import Guard, GuardConfig

    os.mkfifo(tmp_path / journal.JOURNAL_NAME)

    def start():
        with pytest.raises(CodedError, match="must be a regular file, not a FIFO"):
            Guard(tmp_path, GuardConfig())
        return True

    assert _within(20, start) == [True]


def test_inspect_refuses_it_at_once(special, capsys):
    assert _within(60, lambda: main(["inspect", str(special)])) == [3]
    assert "not a regular file" in capsys.readouterr().out


def test_no_file_hash_waits_on_it_or_reads_it_without_end(special):
    def hashed():
        with pytest.raises(UnfitFile, match="only a regular file is hashed, not a"):
            sha256_file(special)
        return True

    assert _within(20, hashed) == [True]


def test_verify_names_a_fifo_in_a_files_place_and_beside_them(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "a.bin").write_bytes(b"a")
    (model / "b.bin").write_bytes(b"b")
    sums = tmp_path / "SHA256SUMS"
    assert main(["manifest", "create", str(model), "-o", str(sums)]) == 0
    (model / "b.bin").unlink()
    os.mkfifo(model / "b.bin")
    os.mkfifo(model / "extra.pipe")
    capsys.readouterr()
    assert _within(20, lambda: main(["verify", str(model), "-m", str(sums)])) == [1]
    out = capsys.readouterr().out
    assert "b.bin  (a FIFO, not a regular file: not read)" in out, out
    assert "extra.pipe  (a FIFO, not a regular file: not read)" in out, out


def test_a_seal_key_file_that_is_no_regular_file_is_refused_at_once(special, monkeypatch):
    monkeypatch.setenv(journal.KEY_FILE_ENV, str(special))

    def read_key():
        with pytest.raises(journal.SealKeyError, match=r"cannot read the seal key .* must be "
                                                       r"a regular file, not a"):
            journal.seal_key()
        return True

    assert _within(20, read_key) == [True]


def test_a_scene_record_that_is_no_regular_file_is_refused_at_once(tmp_path, special):
    from inspector.core.errors import CodedError
    from inspector.guard.scene import SCENE_JSON, read_scene

    scene = tmp_path / "step-00000040"
    scene.mkdir()
    (scene / SCENE_JSON).symlink_to(special)

    def read():
        with pytest.raises(CodedError, match="must be a regular file, not a"):
            read_scene(scene)
        return True

    assert _within(20, read) == [True]
