"""`verify` of a Hugging Face hub cache built by hand (blobs named by hash, snapshot links)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from inspector.cli import main
from inspector.integrity.hfcache import blob_algorithm, git_blob_sha1, is_cache_path, verify_cache

REV = "0123456789abcdef0123456789abcdef01234567"
WEIGHTS = bytes(range(256)) * 300
CONFIG = b'{"model_type": "gpt2", "n_layer": 2}\n'
TOKENIZER = b'{"version": "1.0"}\n'


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _cache(root: Path) -> Path:
    """hub/models--org--tiny with two LFS-style blobs and one Git blob, as the Hub client lays
    them out; returns the hub folder."""
    repo = root / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    snapshot = repo / "snapshots" / REV
    (snapshot / "tokenizer").mkdir(parents=True)
    files = {
        "model.safetensors": (WEIGHTS, hashlib.sha256(WEIGHTS).hexdigest()),
        "config.json": (CONFIG, _git_sha1(CONFIG)),
        "tokenizer/tokenizer.json": (TOKENIZER, hashlib.sha256(TOKENIZER).hexdigest()),
    }
    for rel, (data, name) in files.items():
        (repo / "blobs" / name).write_bytes(data)
        link = snapshot / rel
        os.symlink(os.path.relpath(repo / "blobs" / name, link.parent), link)
    return root / "hub"


def _snapshot(hub: Path) -> Path:
    return hub / "models--org--tiny" / "snapshots" / REV


def _statuses(result) -> dict[str, str]:
    return {Path(f.path).name: f.status for f in result.files}


def test_blob_names_are_told_apart() -> None:
    assert blob_algorithm("a" * 64) == "sha256"
    assert blob_algorithm("b" * 40) == "git-sha1"
    assert blob_algorithm("A" * 64) is None
    assert blob_algorithm("c" * 64 + ".incomplete") is None


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_blob_sha1_is_what_git_computes(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(CONFIG + bytes(range(256)) * 500)
    expected = subprocess.run(
        ["git", "hash-object", "--no-filters", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert git_blob_sha1(path) == expected


@pytest.mark.parametrize("level", ["hub", "repo", "snapshot", "file"])
def test_intact_cache_verifies_at_every_level_by_the_users_path(
    tmp_path: Path, capsys, level: str
) -> None:
    hub = _cache(tmp_path)
    snapshot = _snapshot(hub)
    path = {
        "hub": hub,
        "repo": hub / "models--org--tiny",
        "snapshot": snapshot,
        "file": snapshot / "model.safetensors",
    }[level]
    assert is_cache_path(path)
    assert main(["verify", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["dialect"] == "hf-cache"
    paths = [f["path"] for f in doc["files"]]
    expected = 1 if level == "file" else 3
    assert len(paths) == expected
    assert all(str(path) in p and "blobs" not in p for p in paths)
    algorithms = {Path(f["path"]).name: f["algorithm"] for f in doc["files"]}
    if level != "file":
        assert algorithms["config.json"] == "git-sha1"
        assert algorithms["model.safetensors"] == "sha256"


def test_corrupt_blobs_are_named_by_their_snapshot_links(tmp_path: Path, capsys) -> None:
    hub = _cache(tmp_path)
    snapshot = _snapshot(hub)
    for name in ("model.safetensors", "config.json"):
        blob = Path(os.path.realpath(snapshot / name))
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0x01
        blob.write_bytes(bytes(data))
    assert main(["verify", str(snapshot)]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCH       {snapshot / 'model.safetensors'}  sha256 " in out
    assert f"MISMATCH       {snapshot / 'config.json'}  git-sha1 " in out
    assert "/blobs/" not in out


def test_what_cannot_be_checked_offline_is_said(tmp_path: Path, capsys) -> None:
    hub = _cache(tmp_path)
    snapshot = _snapshot(hub)
    blobs = hub / "models--org--tiny" / "blobs"
    (blobs / "etag-from-elsewhere").write_bytes(b"odd")
    os.symlink("../../blobs/etag-from-elsewhere", snapshot / "odd.txt")
    (snapshot / "copied.bin").write_bytes(b"copied, not linked")
    assert main(["verify", str(snapshot), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    notes = {Path(f["path"]).name: (f["status"], f["note"]) for f in doc["files"]}
    assert notes["odd.txt"][0] == "unchecked" and "not named by a SHA-256" in notes["odd.txt"][1]
    assert notes["copied.bin"][0] == "unchecked" and "a copy" in notes["copied.bin"][1]
    assert notes["model.safetensors"] == ("ok", None)


@pytest.mark.parametrize("level", ["repo", "snapshot"])
def test_links_out_of_the_repositorys_blobs_are_named_never_read(tmp_path: Path, capsys,
                                                                 level) -> None:
    """A snapshot file linked to a blob that matches its own name but lies outside the
    repository's blobs (another folder, another repository), or a linked folder, was 'ok' or
    passed over in silence; transformers would have loaded it."""
    hub = _cache(tmp_path)
    snapshot = _snapshot(hub)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evil = b"weights nobody downloaded"
    (elsewhere / hashlib.sha256(evil).hexdigest()).write_bytes(evil)
    (snapshot / "model.safetensors").unlink()
    os.symlink(elsewhere / hashlib.sha256(evil).hexdigest(), snapshot / "model.safetensors")
    other = hub / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (other / hashlib.sha256(evil).hexdigest()).write_bytes(evil)
    os.symlink(other / hashlib.sha256(evil).hexdigest(), snapshot / "other.safetensors")
    os.symlink(elsewhere, snapshot / "extra")
    path = hub / "models--org--tiny" if level == "repo" else snapshot
    assert main(["verify", str(path), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    notes = {Path(f["path"]).name: (f["status"], f["note"]) for f in doc["files"]}
    for name in ("model.safetensors", "other.safetensors"):
        assert notes[name][0] == "unchecked" and "outside" in notes[name][1], notes[name]
    assert notes["extra"][0] == "unchecked" and "a link to a folder" in notes["extra"][1]
    assert notes["config.json"] == ("ok", None)


def test_dangling_links_unlinked_blobs_and_unfinished_downloads(tmp_path: Path) -> None:
    hub = _cache(tmp_path)
    snapshot = _snapshot(hub)
    repo = hub / "models--org--tiny"
    Path(os.path.realpath(snapshot / "tokenizer" / "tokenizer.json")).unlink()
    old = b"an old revision's weights"
    (repo / "blobs" / hashlib.sha256(old).hexdigest()).write_bytes(old)
    (repo / "blobs" / (hashlib.sha256(b"x").hexdigest() + ".incomplete")).write_bytes(b"half")
    result = verify_cache(repo)
    statuses = _statuses(result)
    assert statuses["tokenizer.json"] == "missing"
    assert statuses[hashlib.sha256(old).hexdigest()] == "ok"
    assert statuses[hashlib.sha256(b"x").hexdigest() + ".incomplete"] == "unchecked"
    assert not result.ok and result.differs


def test_sha256_pasted_from_the_hub(tmp_path: Path, capsys) -> None:
    hub = _cache(tmp_path)
    link = _snapshot(hub) / "model.safetensors"
    good = hashlib.sha256(WEIGHTS).hexdigest()
    assert main(["verify", "--sha256", good.upper(), str(link)]) == 0
    assert f"OK             {link}" in capsys.readouterr().out
    assert main(["verify", "--sha256", "0" * 64, str(link), "--json"]) == 1
    record = json.loads(capsys.readouterr().out)["files"][0]
    assert (record["path"], record["status"], record["actual"]) == (str(link), "mismatch", good)
    assert main(["verify", "--sha256", "abc", str(link)]) == 2
    assert main(["verify", "--sha256", good, str(link), str(link)]) == 2


def test_a_plain_folder_without_a_manifest_is_a_usage_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "model.bin").write_bytes(b"x")
    assert main(["verify", str(tmp_path)]) == 2
    assert "is not in a Hugging Face cache; pass --manifest" in capsys.readouterr().err


def test_the_huggingface_folder_and_blobs_named_directly(tmp_path: Path) -> None:
    hub = _cache(tmp_path)
    blobs = hub / "models--org--tiny" / "blobs"
    assert verify_cache(tmp_path).ok  # ~/.cache/huggingface, holding hub/
    assert all("/hub/models--org--tiny/snapshots/" in f.path for f in verify_cache(tmp_path).files)
    blob = blobs / _git_sha1(CONFIG)
    assert [(f.path, f.status, f.algorithm) for f in verify_cache(blob).files] == [
        (str(blob), "ok", "git-sha1")
    ]
    blob.write_bytes(CONFIG + b" ")
    assert _statuses(verify_cache(blobs)) == {
        hashlib.sha256(WEIGHTS).hexdigest(): "ok",
        hashlib.sha256(TOKENIZER).hexdigest(): "ok",
        _git_sha1(CONFIG): "mismatch",
    }


@pytest.mark.parametrize("level", ["repo", "snapshot", "blobs"])
def test_a_blob_that_is_a_link_to_another_blob_is_refused(tmp_path: Path, capsys,
                                                         level) -> None:
    """A blob whose name is the hash of the weights, made a link to another blob that holds
    other bytes under their own hash: both names hold, and the loader reads the other bytes
    through the snapshot link. The link was 'ok' (checked against the last blob's name)."""
    hub = _cache(tmp_path)
    blobs = hub / "models--org--tiny" / "blobs"
    good = hashlib.sha256(WEIGHTS).hexdigest()
    evil = b"weights nobody downloaded" * 10
    (blobs / hashlib.sha256(evil).hexdigest()).write_bytes(evil)
    (blobs / good).unlink()
    os.symlink(hashlib.sha256(evil).hexdigest(), blobs / good)
    hub_client = pytest.importorskip("huggingface_hub")
    # the real loader's path: the cached file it hands out holds the other blob's bytes
    handed = hub_client.hf_hub_download("org/tiny", "model.safetensors", cache_dir=str(hub),
                                        local_files_only=True)
    assert Path(handed).read_bytes() == evil
    path = {"repo": hub / "models--org--tiny", "snapshot": _snapshot(hub),
            "blobs": blobs}[level]
    assert main(["verify", str(path), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    notes = {f["path"]: (f["status"], f["note"]) for f in doc["files"]}
    named = str(blobs / good) if level == "blobs" else str(_snapshot(hub) / "model.safetensors")
    assert notes[named][0] == "unchecked" and "is a link" in notes[named][1], notes
    assert all(status != "ok" for p, (status, _) in notes.items()
               if p.endswith(("model.safetensors", good)))
