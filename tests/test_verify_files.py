"""File-level verification: ok / mismatch / missing / size_mismatch / extra."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

import inspector.integrity.verify as verify_mod
from inspector.core.progress import Cancelled, CancelToken
from inspector.integrity.manifest import (
    FileEntry,
    Manifest,
    TensorEntry,
    read_manifest,
    write_manifest,
)
from inspector.integrity.verify import compare_tensors, measure_file, verify


def _folder(root: Path) -> dict[str, bytes]:
    contents = {
        "model.safetensors": bytes(range(256)) * 40,
        "optimizer state.pt": b"optimizer" * 50,
        "sub/config.json": b"{}",
    }
    for name, data in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return contents


def _manifest(root: Path, contents: dict[str, bytes], name: str = "SHA256SUMS.tsv") -> Path:
    entries = [
        FileEntry(path=n, sha256=hashlib.sha256(d).hexdigest(), size=len(d))
        for n, d in contents.items()
    ]
    write_manifest(root / name, entries)
    return root / name


def _statuses(result) -> dict[str, str]:
    return {Path(f.path).name: f.status for f in result.files}


def test_untouched_folder_verifies_and_the_manifest_is_not_extra(tmp_path: Path) -> None:
    contents = _folder(tmp_path)
    result = verify(read_manifest(_manifest(tmp_path, contents)))
    assert result.ok
    assert _statuses(result) == dict.fromkeys(
        ["model.safetensors", "optimizer state.pt", "config.json"], "ok"
    )


def test_every_file_status(tmp_path: Path) -> None:
    contents = _folder(tmp_path)
    manifest = read_manifest(_manifest(tmp_path, contents))
    data = bytearray((tmp_path / "model.safetensors").read_bytes())
    data[1234] ^= 0x10
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    (tmp_path / "optimizer state.pt").write_bytes(b"optimizer" * 49)
    (tmp_path / "sub/config.json").unlink()
    (tmp_path / "sub/stray.bin").write_bytes(b"?")
    (tmp_path / ".hidden.tmp").write_bytes(b"temp files are not extras")
    result = verify(manifest)
    assert not result.ok
    assert _statuses(result) == {
        "model.safetensors": "mismatch",
        "optimizer state.pt": "size_mismatch",
        "config.json": "missing",
        "stray.bin": "extra",
    }
    record = result.to_json()["files"][0]
    assert record["expected"] == hashlib.sha256(contents["model.safetensors"]).hexdigest()
    assert record["actual"] == hashlib.sha256(data).hexdigest()


def test_truncated_download_is_reported_without_hashing(tmp_path: Path, monkeypatch) -> None:
    contents = _folder(tmp_path)
    manifest = read_manifest(_manifest(tmp_path, contents))
    (tmp_path / "model.safetensors").write_bytes(contents["model.safetensors"][:100])

    def no_hashing(*_a, **_k):
        raise AssertionError("a file whose size is wrong must not be hashed")

    monkeypatch.setattr(verify_mod, "sha256_file", no_hashing)
    result = verify(manifest, [tmp_path / "model.safetensors"])
    assert [(f.status, f.expected_size, f.actual_size) for f in result.files] == [
        ("size_mismatch", len(contents["model.safetensors"]), 100)
    ]


def test_download_folder_checked_against_a_manifest_kept_elsewhere(tmp_path: Path) -> None:
    repo, download = tmp_path / "repo", tmp_path / "download"
    repo.mkdir()
    download.mkdir()
    manifest_path = _manifest(repo, _folder(download), "checksums.sha256")
    assert verify(read_manifest(manifest_path), [download]).ok
    (download / "sub/config.json").write_bytes(b"{ }")
    assert _statuses(verify(read_manifest(manifest_path), [download]))["config.json"] == "mismatch"


def test_a_single_file_and_a_subfolder_limit_the_scope(tmp_path: Path) -> None:
    contents = _folder(tmp_path)
    manifest = read_manifest(_manifest(tmp_path, contents))
    (tmp_path / "model.safetensors").unlink()
    only = verify(manifest, [tmp_path / "optimizer state.pt"])
    assert _statuses(only) == {"optimizer state.pt": "ok"}
    gone = verify(manifest, [tmp_path / "model.safetensors", tmp_path / "typo.pt"])
    assert _statuses(gone) == {"model.safetensors": "missing"}
    assert gone.errors == [
        f"{tmp_path / 'typo.pt'}: no such file, and the manifest does not list it"
    ]
    sub = verify(manifest, [tmp_path / "sub"])
    assert _statuses(sub) == {"config.json": "ok"}


def test_git_lfs_pointer_checks_a_download_saved_under_another_name(tmp_path: Path) -> None:
    data = b"\x00safetensors payload" * 100
    download = tmp_path / "model (1).safetensors"
    download.write_bytes(data)
    pointer = tmp_path / "pointer" / "model.safetensors"
    pointer.parent.mkdir()
    pointer.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        f"oid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
    )
    assert verify(read_manifest(pointer), [download]).ok
    download.write_bytes(data[:-1] + b"!")
    assert [f.status for f in verify(read_manifest(pointer), [download]).files] == ["mismatch"]


def test_progress_counts_bytes_hashed(tmp_path: Path) -> None:
    contents = _folder(tmp_path)
    manifest = read_manifest(_manifest(tmp_path, contents))
    seen: list[tuple[int, int]] = []
    verify(manifest, progress=lambda done, total: seen.append((done, total)))
    total = sum(len(d) for d in contents.values())
    assert seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_cancel_during_a_verify_of_many_files_stops_it(tmp_path: Path) -> None:
    contents = {f"shard-{i}.bin": bytes([i]) * 300_000 for i in range(6)}
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    manifest = read_manifest(_manifest(tmp_path, contents))
    token = CancelToken()
    with pytest.raises(Cancelled):
        verify(manifest, progress=lambda done, total: token.cancel(), cancel=token)
    # with no cancel, every file is checked in the manifest's order
    result = verify(manifest)
    assert result.ok and [f.path for f in result.files] == list(contents)


def test_compare_tensors_every_status() -> None:
    expected = [
        TensorEntry("a", "float32", (2, 2), "d1", "sha256"),
        TensorEntry("b", "float32", (2,), "d2", "sha256"),
        TensorEntry("c", "float16", (3,), "d3", "sha256"),
        TensorEntry("gone", "int64", (), "d4", "sha256"),
    ]
    actual = [
        TensorEntry("a", "float32", (2, 2), "d1", "sha256"),
        TensorEntry("b", "float32", (2,), "XX", "sha256"),
        TensorEntry("c", "F32", (3,), "d3", "sha256"),
        TensorEntry("new", "int64", (), "d5", "sha256"),
    ]
    checks = compare_tensors(expected, actual, "f.pt")
    assert {c.key: c.status for c in checks} == {
        "a": "ok",
        "b": "mismatch",
        "c": "dtype_or_shape_changed",
        "gone": "missing",
        "new": "extra",
    }


@pytest.mark.parametrize("exists", [True, False])
def test_manifest_without_hashes_checks_presence(tmp_path: Path, exists: bool) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {"w": "model-00001-of-00001.safetensors"}}'
    )
    if exists:
        (tmp_path / "model-00001-of-00001.safetensors").write_bytes(b"x")
    result = verify(read_manifest(tmp_path / "model.safetensors.index.json"))
    assert [f.status for f in result.files] == ["ok" if exists else "missing"]
    if exists:  # an ok that compared no byte says so
        assert result.files[0].note == "no SHA-256 recorded: found, its bytes not compared"


def test_a_failed_hash_stops_the_tensor_job(tmp_path: Path) -> None:
    seen: list[str] = []

    def slow_digests(path: Path, *, cancel: CancelToken | None = None) -> list[TensorEntry]:
        for _ in range(1000):
            if cancel is not None and cancel.cancelled:
                seen.append("cancelled")
                raise Cancelled()
            time.sleep(0.005)
        return []

    started = time.monotonic()
    with pytest.raises(FileNotFoundError):
        measure_file(tmp_path / "absent.pt", tensor_digests=slow_digests)
    assert seen == ["cancelled"] and time.monotonic() - started < 3


def test_progress_on_a_large_file_is_throttled(tmp_path: Path) -> None:
    data = bytes(range(256)) * (20 * 4096)  # 20 MiB: over 300 reads of 64 KiB
    (tmp_path / "big.bin").write_bytes(data)
    manifest = read_manifest(_manifest(tmp_path, {"big.bin": data}))
    seen: list[tuple[int, int]] = []
    assert verify(manifest, progress=lambda done, total: seen.append((done, total))).ok
    assert seen[-1] == (len(data), len(data))
    assert 100 <= len(seen) <= 1001


def test_an_index_fails_on_orphan_shards_but_not_on_other_files(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        '{"weight_map": {"a": "model-00001-of-00002.safetensors",'
        ' "b": "model-00002-of-00002.safetensors"}}'
    )
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "config.json").write_text("{}")
    result = verify(read_manifest(index))
    assert result.ok and _statuses(result)["config.json"] == "extra"
    (tmp_path / "model-00003-of-00003.safetensors").write_bytes(b"left from another save")
    result = verify(read_manifest(index))
    assert not result.ok and result.differs
    assert _statuses(result)["model-00003-of-00003.safetensors"] == "orphan"
    assert _statuses(result)["config.json"] == "extra"


def test_verify_asks_tensor_digests_of_exactly_the_planned_tensor_targets(tmp_path):
    data = {"a.pt": b"a" * 10, "b.pt": b"b" * 10, "c.pt": b"c" * 10, "extra.pt": b"e"}
    for name, content in data.items():
        (tmp_path / name).write_bytes(content)
    tensors = [TensorEntry("w", "float32", (1,), "d", "sha256")]
    manifest = Manifest("json", [
        FileEntry("a.pt", hashlib.sha256(data["a.pt"]).hexdigest(), 10, tensors=tensors),
        # another size: size_mismatch, and its tensors are still compared (issue 24)
        FileEntry("b.pt", None, 11, tensors=tensors),
        FileEntry("c.pt", None, 10),  # no tensors on record
        FileEntry("gone.pt", None, 10, tensors=tensors),
    ], base_dir=tmp_path)
    pairs = verify_mod.plan(manifest, [tmp_path])
    assert verify_mod.tensor_targets(pairs) == [tmp_path / "a.pt", tmp_path / "b.pt"]
    asked = []

    def digests(path, *, cancel=None):
        asked.append(path)
        return list(tensors)

    result = verify(manifest, tensor_digests=digests, pairs=pairs)
    assert asked == [tmp_path / "a.pt", tmp_path / "b.pt"]
    assert _statuses(result) == {"a.pt": "ok", "b.pt": "size_mismatch", "c.pt": "ok",
                                 "gone.pt": "missing", "extra.pt": "extra"}
    assert [t.status for t in result.tensors] == ["ok", "ok"]


def test_a_shard_a_listed_index_names_but_the_manifest_leaves_out_is_unchecked(tmp_path, capsys):
    from inspector.cli import main

    shards = {"model-00001-of-00002.safetensors": b"one" * 10,
              "model-00002-of-00002.safetensors": b"two" * 10}
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}
    files = {**shards, "model.safetensors.index.json": json.dumps(index).encode(),
             "README.md": b"hello"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    listed = [n for n in files if n != "model-00002-of-00002.safetensors"]
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("".join(f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n" for n in listed))
    result = verify(read_manifest(sums), [tmp_path])
    assert _statuses(result) == {
        "model-00001-of-00002.safetensors": "ok", "model.safetensors.index.json": "ok",
        "README.md": "ok", "model-00002-of-00002.safetensors": "unchecked"}
    assert "not verified" in next(f.note for f in result.files if f.status == "unchecked")
    assert not result.ok and not result.differs
    assert main(["verify", "--manifest", str(sums), str(tmp_path)]) == 3
    capsys.readouterr()
    (tmp_path / "notes.txt").write_bytes(b"an unrelated extra file stays tolerated")
    second = "model-00002-of-00002.safetensors"
    sums.write_text(sums.read_text() + f"{hashlib.sha256(shards[second]).hexdigest()}  {second}\n")
    result = verify(read_manifest(sums), [tmp_path])
    assert result.ok and _statuses(result)["notes.txt"] == "extra"
