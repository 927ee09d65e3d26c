"""inspector.ledger: saves written atomically, proven against memory, ledgered and rotated."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from inspector.core.vocabulary import CheckpointState, SaveOutcome
from inspector.integrity.manifest import read_manifest
from inspector.integrity.verify import verify
from inspector.layout.torch_save import describe_archive
from inspector.ledger import atomic_save, save
from inspector.run import journal
from inspector.run.checkpoints import (
    SAVE_KIND,
    LedgerError,
    check_saves,
    latest_valid,
    read_ledger,
    resume_choice,
)
from inspector.sandbox.host.client import tensor_digests


def _state(seed: int, n: int = 32) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(n, n, generator=g), "b": torch.zeros(n)},
            "optimizer": {"state": {0: {"exp_avg": torch.ones(n, n) * seed}}},
            "step": seed}


def _weights(seed: int) -> dict:
    """Tensors only, which `layout.torch_save` places in the file without loading it."""
    return {"model": _state(seed)["model"]}


def test_a_save_is_ledgered_with_every_field_and_verifies_unchanged(tmp_path):
    record = save(_state(1), tmp_path / "ckpt" / "step-1.pt", step=1, epoch=0.5,
                  run_dir=tmp_path)
    assert record.outcome == SaveOutcome.VERIFIED and record.verified
    assert record.path == "ckpt/step-1.pt" and record.format == "pytorch-zip"
    assert record.size == (tmp_path / "ckpt" / "step-1.pt").stat().st_size
    line = json.loads(journal.journal_path(tmp_path).read_text().splitlines()[0])
    assert line["kind"] == SAVE_KIND
    for key in ("step", "epoch", "time", "host", "rank", "path", "size", "sha256", "files",
                "verified", "outcome", "warnings"):
        assert key in line, key
    keys = {t["key"] for t in line["files"][0]["tensors"]}
    assert keys == {"model.w", "model.b", "optimizer.state.0.exp_avg"}
    # the record is a manifest: integrity.verify checks it with the jailed worker's digests, as-is
    ledger = read_ledger(tmp_path)
    result = verify(ledger.saves[0].manifest(tmp_path), tensor_digests=tensor_digests)
    assert result.ok and len(result.tensors) == 3
    # and the same files in a JSON manifest read back the same way
    manifest_text = json.dumps({"schema": "ckpt-inspector-manifest", "schema_version": 1,
                                "files": line["files"]})
    (tmp_path / "m.json").write_text(manifest_text)
    assert read_manifest(tmp_path / "m.json").files == list(ledger.saves[0].files)


def test_safetensors_save_is_proven_tensor_by_tensor(tmp_path):
    tensors = {"w": torch.randn(8, 8), "half": torch.randn(4).half()}
    record = save(tensors, tmp_path / "model.safetensors", metadata={"step": "3"})
    assert record.format == "safetensors" and record.outcome == SaveOutcome.VERIFIED
    assert {t.key for t in record.files[0].tensors} == {"w", "half"}
    assert latest_valid(tmp_path).path == "model.safetensors"


def _decaying_disk(monkeypatch):
    """The real writer, then one bit of the written tensor data flipped, as a bad disk would."""
    real_write = atomic_save._write

    def write_then_decay(obj, fd, tmp, as_safetensors, metadata, hashing, pool):
        written = real_write(obj, fd, tmp, as_safetensors, metadata, hashing, pool)
        data = tmp.read_bytes()
        where = {t.key: t for t in describe_archive(data)}["model.w"].data_offset + 5
        with open(tmp, "r+b") as fh:  # in place, as a disk would: the file is being read back
            fh.seek(where)
            fh.write(bytes([data[where] ^ 0x04]))
        return written

    monkeypatch.setattr(atomic_save, "_write", write_then_decay)


def test_bytes_that_land_wrong_are_a_mismatch_and_never_replace_the_old_file(tmp_path,
                                                                             monkeypatch):
    target = tmp_path / "last.pt"
    good = save(_weights(1), target, step=1)
    _decaying_disk(monkeypatch)
    with pytest.raises(LedgerError) as err:
        save(_weights(2), target, step=2)
    assert err.value.code == "save_mismatch" and "differs from memory" in err.value.message
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert latest_valid(tmp_path) == good
    assert torch.equal(torch.load(target, weights_only=True)["model"]["w"],
                       _weights(1)["model"]["w"])
    bad = read_ledger(tmp_path).saves[-1]
    assert bad.outcome == SaveOutcome.MISMATCH
    # the record holds the flipped bytes' digest, as on disk, not memory's taken during the write
    flipped = bytearray(_weights(2)["model"]["w"].numpy().tobytes())
    flipped[5] ^= 0x04
    digests = {t.key: t.digest for t in bad.files[0].tensors}
    assert digests["model.w"] == hashlib.sha256(flipped).hexdigest()
    assert digests["model.b"] == hashlib.sha256(_weights(2)["model"]["b"].numpy().tobytes()
                                                ).hexdigest()


def test_keep_rotates_only_after_the_new_one_verified(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    for step in range(4):
        save(_state(step), folder / f"step-{step}.pt", step=step, run_dir=tmp_path, keep=2)
    assert sorted(p.name for p in folder.iterdir()) == ["step-2.pt", "step-3.pt"]
    ledger = read_ledger(tmp_path)
    states = [c.state for c in check_saves(ledger)]
    assert states == [CheckpointState.REMOVED] * 2 + [CheckpointState.INTACT] * 2
    assert ledger.kinds["ledger.rotate"] == 2

    _decaying_disk(monkeypatch)
    with pytest.raises(LedgerError, match="differs from memory"):
        save(_weights(4), folder / "step-4.pt", step=4, run_dir=tmp_path, keep=1)
    # keep=1 asked for one, but the new save failed: both good ones are still there
    assert sorted(p.name for p in folder.iterdir()) == ["step-2.pt", "step-3.pt"]
    assert latest_valid(tmp_path).step == 3


def test_a_size_jump_is_a_warning_in_the_ledger(tmp_path):
    for step in range(3):
        assert save(_state(step), tmp_path / f"s{step}.pt", step=step).warnings == ()
    small = save({"model": {"w": torch.zeros(2)}}, tmp_path / "s3.pt", step=3)
    assert len(small.warnings) == 1 and "x the median of the last 3" in small.warnings[0]
    assert read_ledger(tmp_path).saves[-1].warnings == small.warnings


def test_no_room_is_refused_before_a_byte_is_written(tmp_path, monkeypatch):
    import os

    good = save(_state(1), tmp_path / "a.pt", step=1)
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_bavail, self.f_frsize = 3, st.f_frsize
            self.f_files, self.f_favail = st.f_files, st.f_favail

    monkeypatch.setattr("inspector.ledger.space.os.statvfs", lambda p: Full(real(p)))
    with pytest.raises(LedgerError) as err:
        save(_state(2), tmp_path / "b.pt", step=2)
    assert err.value.code == "no_space" and "previous checkpoint is kept" in err.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "journal.jsonl"]
    assert latest_valid(tmp_path) == good


def test_a_trainer_cannot_delete_the_last_valid_checkpoint(tmp_path):
    from inspector.ledger.rotate import remove_checkpoint

    save(_state(1), tmp_path / "a.pt", step=1)
    save(_state(2), tmp_path / "b.pt", step=2)
    (tmp_path / "b.pt").write_bytes(b"truncated")  # the newer one went bad
    with pytest.warns(UserWarning, match="last valid checkpoint"):
        assert remove_checkpoint(tmp_path / "a.pt", tmp_path) is False
    assert (tmp_path / "a.pt").exists() and latest_valid(tmp_path).step == 1
    assert remove_checkpoint(tmp_path / "b.pt", tmp_path) is True
    assert not (tmp_path / "b.pt").exists()
    assert read_ledger(tmp_path).kinds["ledger.rotate"] == 1


def test_a_save_over_the_same_path_replaces_the_older_record_not_changes_it(tmp_path):
    for step in (1, 2):
        save(_state(step), tmp_path / "last.pt", step=step)
    ledger = read_ledger(tmp_path)
    assert [c.state for c in check_saves(ledger)] == [CheckpointState.REPLACED,
                                                      CheckpointState.INTACT]
    assert latest_valid(tmp_path).step == 2


@pytest.fixture
def odd_chunks(monkeypatch):
    """The file read back and memory cut into pieces of different, unaligned sizes, so the
    byte-by-byte comparison must line up pieces that do not start together."""
    monkeypatch.setattr("inspector.rawtensors.readers.CHUNK_BYTES", 1000)
    monkeypatch.setattr("inspector.tensors.stats.CHUNK_BYTES", 1532)


def test_the_read_back_digests_the_disk_and_matches_memory_piece_by_piece(tmp_path, odd_chunks):
    from inspector.ledger.digests import proven_digests

    state = {"w": torch.randn(70, 73), "t": torch.randn(64, 30).t(), "i": torch.arange(999)}
    torch.save(state, tmp_path / "f.pt")
    fmt, entries, bad = proven_digests(tmp_path / "f.pt", state)
    assert fmt == "pytorch-zip" and bad == []
    for e in entries:  # the record's digests are the bytes' own, row-major as verify reads them
        row_major = state[e.key].contiguous().numpy().tobytes()
        assert e.digest == hashlib.sha256(row_major).hexdigest()


def test_digests_taken_as_torch_save_writes_are_the_disks_and_only_of_what_it_wrote(tmp_path,
                                                                                 odd_chunks):
    """The tee hashes the storages torch.save hands over from memory (a view into one, tied
    names, a transposed view); an empty tensor, which torch writes no bytes of, is hashed from
    disk. The file's SHA-256, read back as it is written, is the whole file's."""
    from concurrent.futures import ThreadPoolExecutor

    from inspector.ledger.digests import disk_digests, memory_tensors, proven_digests
    from inspector.ledger.tee import DigestingWriter, FileFollower

    base = torch.randn(40, 50)
    state = {"w": base, "tail": base[7:], "tied": base, "t": torch.randn(64, 30).t(),
             "i": torch.arange(999), "empty": torch.empty(0)}
    path = tmp_path / "f.pt"
    with ThreadPoolExecutor(1) as pool, ThreadPoolExecutor(1) as reader:
        with open(path, "wb") as fh:
            follower = FileFollower(path)
            file_hash = reader.submit(follower.run)
            tee = DigestingWriter(fh, memory_tensors(state), pool, follower.reached)
            torch.save(state, tee)
        follower.finish(path.stat().st_size)
        _, entries, bad = proven_digests(path, state, known=tee.digests)
    assert file_hash.result() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert set(tee.digests) == {"w", "tail", "tied", "t", "i"} and bad == []
    for key in tee.digests:
        row_major = state[key].contiguous().numpy().tobytes()
        assert tee.digests[key].result() == hashlib.sha256(row_major).hexdigest()
    assert entries == disk_digests(path)[1]


@pytest.mark.parametrize("byte", [0, 4999, 20439])
def test_one_bit_that_differs_anywhere_between_disk_and_memory_is_named(tmp_path, odd_chunks,
                                                                        byte):
    from inspector.ledger.digests import proven_digests

    state = {"w": torch.randn(70, 73), "b": torch.randn(5)}
    torch.save(state, tmp_path / "f.pt")
    state["w"].view(-1).view(torch.uint8)[byte] ^= 0x01  # memory moved after the write
    assert proven_digests(tmp_path / "f.pt", state)[2] == ["w"]


def test_a_key_dtype_or_shape_that_differs_from_memory_is_named(tmp_path):
    from inspector.ledger.digests import proven_digests

    state = {"a": torch.ones(4), "b": torch.ones(2, 3), "c": torch.ones(3)}
    torch.save(state, tmp_path / "f.pt")
    memory = {"a": torch.ones(4).view(torch.int32), "b": torch.ones(3, 2), "d": torch.ones(3)}
    assert sorted(proven_digests(tmp_path / "f.pt", memory)[2]) == ["a", "b", "c", "d"]


def test_memory_that_changed_while_the_file_was_written_is_a_mismatch(tmp_path, monkeypatch):
    real_write = atomic_save._write
    state = _weights(1)

    def write_then_touch(obj, fd, tmp, as_safetensors, metadata, hashing, pool):
        written = real_write(obj, fd, tmp, as_safetensors, metadata, hashing, pool)
        state["model"]["w"][-1, -1] += 1.0
        return written

    monkeypatch.setattr(atomic_save, "_write", write_then_touch)
    with pytest.raises(LedgerError, match=r"model\.w differs from memory"):
        save(state, tmp_path / "a.pt", step=1)
    assert not (tmp_path / "a.pt").exists()


def test_a_folder_is_proven_file_by_file_tied_names_and_extra_files_allowed(tmp_path):
    """A writer that shards the state, drops a tied name and adds a file of its own verifies;
    one bit that differs in either shard is named; a folder holding none of the state's
    tensors is unverified, not verified."""
    import hashlib

    from safetensors.torch import save_file

    from inspector.ledger import save_folder
    from inspector.run.checkpoints import LedgerError

    embed = torch.randn(50, 8)
    state = {"embed": embed, "head": embed, "w1": torch.randn(40, 9), "w2": torch.randn(7)}

    def write(folder, flip=None):
        shards = {"a.safetensors": {"embed": state["embed"].clone(), "w1": state["w1"].clone()},
                  "b.safetensors": {"w2": state["w2"].clone(), "extra": torch.ones(2)}}
        if flip is not None:
            name, key = flip
            shards[name][key].view(-1).view(torch.uint8)[3] ^= 0x10
        for name, tensors in shards.items():
            save_file(tensors, folder / name)
        (folder / "config.json").write_text("{}")

    good = save_folder(write, tmp_path / "good", expected=state, step=1)
    assert good.outcome == SaveOutcome.VERIFIED
    names = {f.path: f for f in good.files}
    assert names["good/config.json"].sha256 == hashlib.sha256(b"{}").hexdigest()
    assert {t.key for t in names["good/b.safetensors"].tensors} == {"w2", "extra"}
    for name, key in (("a.safetensors", "w1"), ("b.safetensors", "w2")):
        with pytest.raises(LedgerError, match=f"on disk, tensor {key} differs from memory"):
            save_folder(lambda d, f=(name, key): write(d, f), tmp_path / f"bad-{key}",
                        expected=state, step=2)
        assert not (tmp_path / f"bad-{key}").exists()
    other = save_folder(write, tmp_path / "other", expected={"z": torch.ones(3)}, step=3)
    assert other.outcome == SaveOutcome.UNVERIFIED


def test_a_file_put_into_a_saved_folder_since_is_a_change_and_never_resumed(tmp_path, capsys):
    """A resume loads what the folder holds (a trainer's optional rng_state.pth): a file the
    save never wrote makes the folder changed, even with every recorded file intact."""
    from safetensors.torch import save_file

    from inspector.cli import main
    from inspector.ledger import save_folder

    state = {"w": torch.ones(4)}
    for step in (1, 2):
        save_folder(lambda d: save_file(state, d / "model.safetensors"),
                    tmp_path / f"checkpoint-{step}", expected=state, step=step)
    (tmp_path / "checkpoint-2" / "rng_state.pth").write_bytes(b"not the save's")
    checks = {c.record.step: c for c in check_saves(read_ledger(tmp_path))}
    assert checks[1].state == CheckpointState.INTACT
    assert checks[2].state == CheckpointState.CHANGED
    assert checks[2].changed_files == ("checkpoint-2/rng_state.pth",)
    assert resume_choice(tmp_path).record.step == 1
    assert main(["run", "latest", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("checkpoint-1")
    assert "skipped step 2 (checkpoint-2): changed: added since the save: " in err
    # `verify` and `report` through the save record hold the folder to the same listing
    assert main(["verify", str(tmp_path / "checkpoint-1")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "checkpoint-2"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["strict"] and [f["path"] for f in doc["files"] if f["status"] == "extra"] == [
        str(tmp_path / "checkpoint-2" / "rng_state.pth")]
    report = tmp_path / "report.json"
    assert main(["report", str(tmp_path / "checkpoint-2"), "-o", str(report), "--quiet"]) == 1
    by_name = {f["file"]["name"]: f for f in json.loads(report.read_text())["files"]}
    assert by_name["model.safetensors"]["verification"]["status"] == "fail"


@pytest.mark.filterwarnings("ignore:.*quantize.*:UserWarning")
def test_quantized_and_sparse_tensors_save_verified_and_verify_unchanged(tmp_path):
    """Encoded tensors are read back as their parts plus a `KEY::spec` part (their rebuild
    spec): memory lists the same parts, so a clean save is verified, not a mismatch."""
    dense = torch.randn(4, 6)
    state = {
        "per_tensor": torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8),
        "per_channel": torch.quantize_per_channel(dense, torch.rand(4) + 0.1,
                                                  torch.zeros(4, dtype=torch.long), 0,
                                                  torch.qint8),
        "coo": dense.relu().to_sparse(),
        "csr": dense.relu().to_sparse_csr(),
        "plain": dense,
    }
    record = save(state, tmp_path / "ckpt" / "step-1.pt", step=1, run_dir=tmp_path)
    assert record.outcome == SaveOutcome.VERIFIED and record.verified
    keys = {t.key for t in read_ledger(tmp_path).saves[0].files[0].tensors}
    assert {"per_tensor::spec", "per_channel::spec", "coo::spec", "csr::spec", "plain"} <= keys
    result = verify(read_ledger(tmp_path).saves[0].manifest(tmp_path),
                    tensor_digests=tensor_digests)
    assert result.ok
