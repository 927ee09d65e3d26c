"""The ledger under faults: SIGKILL mid-save, a full disk, a flipped bit, a damaged ledger,
two ranks saving into one run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inspector.core.vocabulary import CheckpointState
from inspector.layout.torch_save import describe_archive
from inspector.ledger import save, save_folder
from inspector.run import journal
from inspector.run.checkpoints import LedgerError, check_saves, latest_valid, read_ledger

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_sigkill_at_random_moments_never_loses_the_previous_checkpoint(tmp_path, python_exe):
    """200 kills that land mid-save; after each, latest_valid names an intact checkpoint no
    older than the one before, and it loads with the tensors of its step (checked inside);
    a last save that finishes clears the temp files the killed ones left."""
    out = subprocess.run([python_exe, str(REPO / "tests" / "ledger_crash.py"), str(tmp_path),
                          "200", "25"], capture_output=True, text=True, cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["killed"] == 200
    assert summary["strays_after"] == 0  # the killed saves' temp files, cleared by the next
    ledger = read_ledger(tmp_path)
    # A kill inside the journal's one write() can leave that line short (the kernel stops a
    # write on a fatal signal); the next record chains on from the fragment. Nothing else.
    assert all(p.kind == "truncated" for p in ledger.journal.problems), \
        ledger.journal.problems
    live = [c for c in check_saves(ledger) if c.state != CheckpointState.REMOVED]
    assert all(c.state == CheckpointState.INTACT for c in live)
    assert latest_valid(tmp_path).step == summary["latest"]


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs, mounted for the test (the suite runs as root)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_checkpoint_larger_than_the_free_space_is_refused_up_front(small_disk):
    good = save({"w": torch.randn(128, 512)}, small_disk / "a.pt", step=1)  # 256 KiB
    with pytest.raises(LedgerError) as err:
        save({"w": torch.randn(1024, 1024)}, small_disk / "b.pt", step=2)  # 4 MiB
    assert err.value.code == "no_space"
    assert "free" in err.value.message and "previous checkpoint is kept" in err.value.message
    assert _names(small_disk) == ["a.pt", "journal.jsonl"]
    assert latest_valid(small_disk) == good


def test_a_disk_that_fills_mid_write_leaves_no_partial_file(small_disk):
    good = save({"w": torch.randn(128, 512)}, small_disk / "a.pt", step=1)
    # the tensors fit the estimate; 1.9 MB of other objects in the checkpoint do not
    state = {"w": torch.randn(128, 128), "notes": os.urandom(1_900_000)}
    with pytest.raises(LedgerError) as err:
        save(state, small_disk / "b.pt", step=2)
    assert err.value.code == "disk_full" and "partial file was removed" in err.value.message
    assert _names(small_disk) == ["a.pt", "journal.jsonl"]
    assert latest_valid(small_disk) == good
    with pytest.raises(LedgerError) as err:
        save_folder(lambda d: (d / "blob.bin").write_bytes(os.urandom(1_900_000)),
                    small_disk / "folder", step=3)
    assert err.value.code == "disk_full"
    assert _names(small_disk) == ["a.pt", "journal.jsonl"]


def _flip(path: Path, key: str) -> None:
    data = bytearray(path.read_bytes())
    offset = {t.key: t for t in describe_archive(bytes(data))}[key].data_offset
    data[offset + 3] ^= 0x40
    path.write_bytes(bytes(data))


def test_run_verify_names_the_tensor_whose_bit_flipped(tmp_path):
    weights = {"encoder.weight": torch.randn(16, 16), "head.weight": torch.randn(4, 16)}
    for step in (1, 2):
        save(weights, tmp_path / f"step-{step}.pt", step=step)
    _flip(tmp_path / "step-2.pt", "head.weight")
    cli = [sys.executable, "-m", "inspector", "run"]
    out = subprocess.run([*cli, "verify", str(tmp_path)], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("INTACT") and "step-1.pt" in lines[0]
    assert lines[1].startswith("CHANGED") and "tensor: head.weight" in lines[1]
    assert "encoder.weight" not in lines[1]
    latest = subprocess.run([*cli, "latest", str(tmp_path)], capture_output=True, text=True,
                            check=False)
    assert latest.returncode == 0 and latest.stdout.strip() == str(tmp_path / "step-1.pt")


def _ledger_of(tmp_path: Path, n: int) -> Path:
    for step in range(n):
        save({"w": torch.full((4,), float(step))}, tmp_path / f"s{step}.pt", step=step)
    return journal.journal_path(tmp_path)


def test_a_truncated_last_line_is_named_and_the_rest_read(tmp_path):
    path = _ledger_of(tmp_path, 3)
    path.write_bytes(path.read_bytes()[:-40])
    ledger = read_ledger(tmp_path)
    assert [(p.line, p.kind) for p in ledger.journal.problems] == [(3, "truncated")]
    assert [s.step for s in ledger.saves] == [0, 1]
    assert latest_valid(tmp_path).step == 1  # step 2's record is gone: never trusted


def test_an_edited_line_is_named_and_the_rest_read(tmp_path):
    path = _ledger_of(tmp_path, 4)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"step": 1', b'"step": 7')
    path.write_bytes(b"\n".join(lines))
    ledger = read_ledger(tmp_path)
    assert [(p.line, p.kind) for p in ledger.journal.problems] == [(2, "edited")]
    # the edited line is named, and its claim (step 7) is not believed
    assert [s.step for s in ledger.saves] == [0, 2, 3]
    assert any("line 2: edited, not trusted" in b for b in ledger.bad_records)
    out = subprocess.run([sys.executable, "-m", "inspector", "run", "verify", str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1 and "ledger: line 2: edited" in out.stdout


def test_a_deleted_line_is_named_and_the_rest_read(tmp_path):
    path = _ledger_of(tmp_path, 4)
    lines = path.read_bytes().split(b"\n")
    del lines[2]
    path.write_bytes(b"\n".join(lines))
    ledger = read_ledger(tmp_path)
    assert [(p.line, p.kind) for p in ledger.journal.problems] == [(3, "deleted")]
    assert [s.step for s in ledger.saves] == [0, 1, 3]
    assert latest_valid(tmp_path).step == 3


RANK_SAVER = """
import sys, torch
from pathlib import Path
from inspector.ledger import save
run, rank = Path(sys.argv[1]), int(sys.argv[2])
for step in range(12):
    save({"w": torch.full((64, 64), rank * 100.0 + step)},
         run / f"rank{rank}" / f"step-{step}.pt", step=step, run_dir=run, keep=3)
"""


def test_two_ranks_saving_into_one_run_folder_interleave_safely(tmp_path, python_exe):
    procs = [subprocess.Popen([python_exe, "-c", RANK_SAVER, str(tmp_path), str(rank)],
                              env={**os.environ, "RANK": str(rank)}, cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    ledger = read_ledger(tmp_path)
    assert ledger.journal.intact
    assert sorted((s.rank, s.step) for s in ledger.saves) == sorted(
        (r, s) for r in (0, 1) for s in range(12))
    for rank in (0, 1):
        # each rank rotated only its own series
        assert _names(tmp_path / f"rank{rank}") == ["step-10.pt", "step-11.pt", "step-9.pt"]
        latest = latest_valid(tmp_path, rank=rank)
        assert latest.step == 11 and latest.path == f"rank{rank}/step-11.pt"
