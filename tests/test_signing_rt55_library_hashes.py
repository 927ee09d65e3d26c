"""Statements the reference library hashes for us (file shards, BLAKE2, BLAKE3), each beside a
clean twin: a valid one verifies (a shard size read back as a float, BLAKE2 recorded as
`blake2b`, once a traceback), bytes appended to a shard-signed file or an unsigned checkpoint
beside the signed ones fail as they do for a plain SHA-256 statement, and so does one hidden
under the statement's ignore list; a hash the library cannot redo is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from signing_keys import write_key

from inspector.cli import main
from inspector.core.vocabulary import SignatureState
from inspector.signing.folder import check_folder


def _sign(folder: Path, pem: Path, *, hash_type: str = "sha256", shards: int | None = None,
          ignore: tuple[str, ...] = ()) -> Path:
    """Sign `folder` with the reference library's own API (its CLI signs whole SHA-256 files
    only), the signature inside it as `model.sig`."""
    from model_signing import hashing, signing

    signature = folder / "model.sig"
    config = hashing.Config().set_ignored_paths(
        paths=[*ignore, "model.sig"], ignore_git_paths=True)
    if shards:
        config.use_shard_serialization(hashing_algorithm=hash_type, shard_size=shards)
    else:
        config.use_file_serialization(hashing_algorithm=hash_type)
    signing.Config().use_elliptic_key_signer(private_key=pem).set_hashing_config(
        config).sign(folder, signature)
    return signature


def _model(folder: Path) -> Path:
    folder.mkdir()
    save_file({"w": np.arange(300, dtype=np.float32)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"hidden": 8}')
    return folder


def _checkpoint(path: Path) -> None:
    """An unsigned checkpoint a loader would read (safetensors bytes)."""
    save_file({"w": np.ones(8, dtype=np.float32)}, str(path))


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, Path]:
    return write_key(tmp_path, "key")


def _verify_json(folder: Path, pub: Path, capsys) -> tuple[int, dict]:
    code = main(["verify", str(folder), "--public-key", str(pub), "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("hash_type", ["sha256", "blake2", "blake3"])
def test_a_valid_shard_or_blake_signature_verifies_and_a_grown_file_fails(
        tmp_path, key, capsys, hash_type) -> None:
    pem, pub = key
    shards = 512 if hash_type == "sha256" else None
    clean, grown = _model(tmp_path / "clean"), _model(tmp_path / "grown")
    for folder in (clean, grown):
        _sign(folder, pem, hash_type=hash_type, shards=shards)
    signed_size = (grown / "model.safetensors").stat().st_size
    with (grown / "model.safetensors").open("ab") as handle:
        handle.write(b"\0" * 700)  # the signed bytes all still there, more after them
    assert (grown / "model.safetensors").stat().st_size != signed_size

    code, doc = _verify_json(clean, pub, capsys)
    assert code == 0 and doc["signature"]["state"] == SignatureState.INTACT
    code, doc = _verify_json(grown, pub, capsys)
    assert code == 1 and doc["signature"]["state"] == SignatureState.CHANGED
    if shards:
        parts = [f for f in doc["files"] if f["status"] == "size_mismatch"]
        assert parts and all(p["path"].startswith("model.safetensors:") for p in parts)
        assert {(p["expected_size"], p["actual_size"]) for p in parts} == {
            (signed_size, signed_size + 700)}


@pytest.mark.parametrize("hash_type,shards", [("sha256", None), ("sha256", 512),
                                              ("blake2", None), ("blake3", None)])
def test_an_unsigned_checkpoint_beside_or_ignore_listed_fails_as_for_plain_sha256(
        tmp_path, key, capsys, hash_type, shards) -> None:
    pem, pub = key
    clean, beside, ignored = (_model(tmp_path / n) for n in ("clean", "beside", "ignored"))
    for folder in (clean, beside, ignored):
        _sign(folder, pem, hash_type=hash_type, shards=shards,
              ignore=(str(folder / "pytorch_model.safetensors"),))
    _checkpoint(beside / "extra.safetensors")
    _checkpoint(ignored / "pytorch_model.safetensors")  # the name the signer left out
    (clean / "notes.txt").write_text("an extra no loader reads")

    code, doc = _verify_json(clean, pub, capsys)
    assert code == 0 and doc["signature"]["state"] == SignatureState.INTACT
    for folder, name in ((beside, "extra.safetensors"), (ignored, "pytorch_model.safetensors")):
        checked = check_folder(folder, folder / "model.sig", pub)
        assert checked.verdict.state == SignatureState.CHANGED, name
        [unchecked] = [f for f in checked.result.files if f.status == "unchecked"]
        assert Path(unchecked.path) == folder / name


def test_a_hash_the_library_cannot_redo_is_one_line(tmp_path, key, capsys) -> None:
    from model_signing import manifest
    from model_signing._hashing import hashing
    from model_signing._signing import sign_ec_key, signing

    pem, pub = key
    folder = _model(tmp_path / "model")
    kind = manifest.SerializationType.from_args(
        {"method": "files", "hash_type": "md5", "allow_symlinks": False})
    items = [kind.new_item(name, hashing.Digest("md5", bytes(16)))
             for name in ("config.json", "model.safetensors")]
    payload = signing.Payload(manifest.Manifest("model", items, kind))
    sign_ec_key.Signer(pem).sign(payload).write(folder / "model.sig")
    assert main(["verify", str(folder), "--public-key", str(pub)]) == 2
    err = capsys.readouterr().err
    assert "'md5'" in err and "cannot hash" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("hash_type,shards", [("blake2", None), ("sha256", 512)])
def test_one_file_signed_with_blake2_or_shards_verifies_and_a_change_fails(
        tmp_path, key, capsys, hash_type, shards) -> None:
    from model_signing import hashing, signing

    pem, pub = key
    target = tmp_path / "step-1.bin"
    target.write_bytes(bytes(range(256)) * 8)
    config = hashing.Config()
    if shards:
        config.use_shard_serialization(hashing_algorithm=hash_type, shard_size=shards)
    else:
        config.use_file_serialization(hashing_algorithm=hash_type)
    signing.Config().use_elliptic_key_signer(private_key=pem).set_hashing_config(
        config).sign(target, Path(f"{target}.sig"))
    assert main(["verify", str(target), "--public-key", str(pub)]) == 0
    assert "intact" in capsys.readouterr().out
    with target.open("ab") as handle:
        handle.write(b"\0")
    assert main(["verify", str(target), "--public-key", str(pub)]) == 1
    assert "changed" in capsys.readouterr().out
