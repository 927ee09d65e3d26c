"""`manifest create`, `verify` and `watch` at file level, through the real CLI entry point."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import inspector.cli.watch_cmd as watch_cmd
from inspector.cli import main


def _folder(root: Path) -> Path:
    root.mkdir()
    (root / "model weights.bin").write_bytes(bytes(range(256)) * 64)
    (root / "shards").mkdir()
    (root / "shards" / "part-1.bin").write_bytes(b"part one" * 10)
    return root


@pytest.mark.parametrize("name", ["SHA256SUMS.sha256", "checksum_manifest.tsv"])
def test_create_then_verify_then_corrupt(tmp_path: Path, capsys, name: str) -> None:
    folder = _folder(tmp_path / "ckpt")
    manifest = folder / name
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    assert "2 files" in capsys.readouterr().out
    assert main(["verify", "--manifest", str(manifest), "--no-tensors"]) == 0
    assert "2 files: 2 ok" in capsys.readouterr().out

    data = bytearray((folder / "model weights.bin").read_bytes())
    data[5000] ^= 0x04
    (folder / "model weights.bin").write_bytes(bytes(data))
    assert main(["verify", "--manifest", str(manifest), "--json", "--no-tensors"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    statuses = {f["path"]: f["status"] for f in doc["files"]}
    assert statuses == {"model weights.bin": "mismatch", "shards/part-1.bin": "ok"}
    assert doc["files"][0]["actual"] == hashlib.sha256(data).hexdigest()


def test_manifest_paths_are_relative_to_the_manifest(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "ckpt")
    (tmp_path / "meta").mkdir()
    manifest = tmp_path / "meta" / "sums.sha256"
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    names = sorted(line.split("  ", 1)[1] for line in manifest.read_text().splitlines())
    assert names == ["../ckpt/model weights.bin", "../ckpt/shards/part-1.bin"]
    assert main(["verify", "-m", str(manifest), str(folder), "--no-tensors"]) == 0


def test_cli_errors_are_one_line_with_distinct_codes(tmp_path: Path, capsys) -> None:
    folder = _folder(tmp_path / "ckpt")
    bad = tmp_path / "bad.sha256"
    bad.write_text("0123  not-a-hash\n")
    assert main(["verify", "-m", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ckpt-inspector verify: {bad}:1: not a SHA-256 checksum line (expected "
        "'<64 hex digits>  NAME', '<64 hex digits> *NAME' or 'SHA256 (NAME) = <64 hex digits>'): "
        "'0123  not-a-hash'"
    )
    assert main(["manifest", "create", str(folder), "-o", str(tmp_path / "m.yaml")]) == 2
    assert "cannot tell the manifest format" in capsys.readouterr().err
    assert main(["manifest", "create", str(tmp_path / "nope"), "-o", str(tmp_path / "m.tsv")]) == 2
    assert "nope: no such file or folder" in capsys.readouterr().err
    existing = tmp_path / "exists.sha256"
    existing.write_text("")
    assert main(["manifest", "create", str(folder), "-o", str(existing)]) == 4
    assert "pass --force" in capsys.readouterr().err
    assert existing.read_text() == ""


def test_watch_reports_what_changed_between_passes(tmp_path: Path, capsys, monkeypatch) -> None:
    folder = _folder(tmp_path / "ckpt")
    manifest = tmp_path / "sums.sha256"
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    capsys.readouterr()
    target = folder / "model weights.bin"
    original = target.read_bytes()
    flipped = bytearray(original)
    flipped[100] ^= 0x80
    edits = iter(
        [
            lambda: target.write_bytes(bytes(flipped)),  # silent corruption: same size
            lambda: target.write_bytes(original[:-10]),  # truncation
        ]
    )
    sleeps: list[float] = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        next(edits)()

    monkeypatch.setattr(watch_cmd.time, "sleep", fake_sleep)
    argv = ["watch", str(folder), "-m", str(manifest), "--interval", "60", "--passes", "3"]
    assert main([*argv, "--json"]) == 1
    passes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["pass"] for p in passes] == [1, 2, 3]
    assert [p["ok"] for p in passes] == [True, False, False]
    assert passes[0]["changed"] == []
    (second,) = passes[1]["changed"]
    assert second["path"] == "ckpt/model weights.bin"
    assert second["before"]["sha256"] != second["after"]["sha256"]
    assert second["before"]["size"] == second["after"]["size"]
    (third,) = passes[2]["changed"]
    assert third["after"]["size"] == len(original) - 10
    assert len(sleeps) == 2 and all(0 < s <= 60 for s in sleeps)


def test_git_lfs_pointer_needs_the_download_named(tmp_path: Path, capsys) -> None:
    data = b"weights" * 1000
    pointer = tmp_path / "model.safetensors"
    pointer.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        f"oid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
    )
    assert main(["verify", "-m", str(pointer)]) == 2
    assert "name the downloaded file" in capsys.readouterr().err
    download = tmp_path / "download.bin"
    download.write_bytes(data)
    assert main(["verify", str(download), "-m", str(pointer)]) == 0


@pytest.mark.parametrize("strict", [False, True])
def test_unlisted_files_are_extra_and_fail_only_when_strict(
    tmp_path: Path, capsys, strict: bool
) -> None:
    folder = _folder(tmp_path / "ckpt")
    manifest = tmp_path / "sums.sha256"
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    capsys.readouterr()
    # names no loader reads: config.json or tokenizer.json here fail even without --strict
    # (`integrity.loader_names`, tests/test_records_rt56_loaded_names.py)
    (folder / "notes.json").write_text("{}")
    (folder / "shards" / "log.json").write_text("{}")
    args = ["verify", "-m", str(manifest), str(folder), "--no-tensors", "--json"]
    assert main(args + (["--strict"] if strict else [])) == (1 if strict else 0)
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is not strict and doc["strict"] is strict
    extras = sorted(Path(f["path"]).name for f in doc["files"] if f["status"] == "extra")
    assert extras == ["log.json", "notes.json"]
    (folder / "model weights.bin").write_bytes(b"changed")
    assert main(args) == 1


def test_watch_fails_on_extras_only_when_strict(tmp_path: Path, capsys) -> None:
    folder = _folder(tmp_path / "ckpt")
    manifest = tmp_path / "sums.sha256"
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    (folder / "checkpoint-2000.bin").write_bytes(b"a new save")
    watch = ["watch", str(folder), "-m", str(manifest), "--passes", "1", "--interval", "0"]
    assert main(watch) == 0
    assert main([*watch, "--strict"]) == 1
    assert "NOT IN MANIFEST" in capsys.readouterr().out
