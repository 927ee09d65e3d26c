"""A manifest's names are read where they were recorded: a folder the user names never lets
them resolve somewhere else, whatever files exist there (anyone who can write the folder
decides that). A nested copy of the listed files inside the named folder, or beside the
manifest's folder, stands in for no file; a ledger record's names are the run folder's. Each
tampered folder (the loader reads the swapped weights) beside its clean twin."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.ledger import save_folder

FILES = ("model.safetensors", "config.json", "README.md")


def _model(folder: Path) -> None:
    folder.mkdir(parents=True)
    save_file({"w": torch.ones(4)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"hidden": 4}\n')
    (folder / "README.md").write_text("llama\n")


def _sums(manifest: Path, folder: Path, relative_to: Path) -> None:
    """`sha256sum` lines for the files of `folder`, named relative to `relative_to`."""
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text("".join(
        f"{hashlib.sha256((folder / f).read_bytes()).hexdigest()}  "
        f"{(folder / f).relative_to(relative_to).as_posix()}\n" for f in FILES))


def _swap(folder: Path, copies: Path, drop: tuple[str, ...] = ("README.md",)) -> None:
    """Genuine copies of the listed files into `copies`, the model's weights swapped, `drop`
    removed from the model's folder."""
    copies.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        shutil.copy2(folder / f, copies / f)
    for f in drop:
        (folder / f).unlink()
    save_file({"w": torch.full((4,), -666.0)}, str(folder / "model.safetensors"))
    assert load_file(str(folder / "model.safetensors"))["w"].tolist() == [-666.0] * 4


def _verify(capsys, *args: str) -> tuple[int, str]:
    code = main(["verify", *args])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("tampered", [False, True], ids=["twin", "tampered"])
def test_a_nested_copy_inside_the_named_folder_stands_in_for_nothing(tmp_path, capsys,
                                                                      monkeypatch, tampered):
    # `manifest create models/ -o SHA256SUMS`, later `verify -m SHA256SUMS models/llama`
    model = tmp_path / "models/llama"
    _model(model)
    _sums(tmp_path / "SHA256SUMS", model, tmp_path)
    if tampered:
        _swap(model, model / "models/llama")
    monkeypatch.chdir(tmp_path)
    code, out = _verify(capsys, "-m", "SHA256SUMS", "models/llama")
    if not tampered:
        assert code == 0 and "3 files: 3 ok" in out
        return
    assert code == 1
    assert "MISMATCH       models/llama/model.safetensors" in out
    assert "MISSING        models/llama/README.md" in out


def test_every_recorded_file_gone_is_missing_though_a_nested_copy_holds_them(tmp_path,
                                                                              capsys):
    model = tmp_path / "models/llama"
    _model(model)
    _sums(tmp_path / "SHA256SUMS", model, tmp_path)
    _swap(model, model / "models/llama", drop=FILES)
    os.rename(model / "model.safetensors", model / "pytorch_model.safetensors")
    code, out = _verify(capsys, "-m", str(tmp_path / "SHA256SUMS"), str(model))
    assert code == 1 and out.count("MISSING") == 3


@pytest.mark.parametrize("tampered", [False, True], ids=["twin", "tampered"])
def test_a_copy_beside_the_manifests_folder_stands_in_for_nothing(tmp_path, capsys,
                                                                  tampered):
    # the manifest kept in the model's folder, names relative to it; the folder named holds it
    model = tmp_path / "models/llama"
    _model(model)
    _sums(model / "SHA256SUMS", model, model)
    if tampered:
        _swap(model, tmp_path / "models", drop=())
    code, out = _verify(capsys, "-m", str(model / "SHA256SUMS"), str(tmp_path / "models"))
    if not tampered:
        assert code == 0 and "3 files: 3 ok" in out
        return
    assert code == 1 and "MISMATCH" in out and "model.safetensors" in out


def test_names_written_relative_to_the_folder_named_still_read_there(tmp_path, capsys,
                                                                     monkeypatch):
    # sha256sum habits: `sha256sum models/llama/* > checksums/SHA256SUMS`, then
    # `verify -m checksums/SHA256SUMS .`; and `cd models/llama && sha256sum * > ../../SUMS`
    model = tmp_path / "models/llama"
    _model(model)
    _sums(tmp_path / "checksums/SHA256SUMS", model, tmp_path)
    _sums(tmp_path / "SUMS", model, model)
    monkeypatch.chdir(tmp_path)
    assert _verify(capsys, "-m", "checksums/SHA256SUMS", ".")[0] == 0
    assert _verify(capsys, "-m", "SUMS", "models/llama")[0] == 0
    save_file({"w": torch.full((4,), -666.0)}, str(model / "model.safetensors"))
    assert _verify(capsys, "-m", "checksums/SHA256SUMS", ".")[0] == 1
    assert _verify(capsys, "-m", "SUMS", "models/llama")[0] == 1


@pytest.mark.parametrize("moved", [False, True], ids=["twin", "moved"])
def test_a_ledger_record_is_read_against_its_run_folder_only(tmp_path, capsys, moved):
    os.environ.pop("CKPT_INSPECTOR_SIGNING_KEY", None)
    run = tmp_path / "run"
    state = {"w": torch.arange(8, dtype=torch.float32)}

    def write(folder: Path) -> None:
        save_file(state, str(folder / "model.safetensors"))
        (folder / "config.json").write_text('{"hidden": 8}\n')

    save_folder(write, run / "ckpt/x", expected=state, step=5, run_dir=run)
    checkpoint = run / "ckpt/x"
    if moved:  # the record's run-relative names, read against the checkpoint, land here
        inner = checkpoint / "ckpt/x"
        inner.mkdir(parents=True)
        for f in ("model.safetensors", "config.json"):
            os.rename(checkpoint / f, inner / f)
    code, out = _verify(capsys, str(checkpoint))
    if not moved:
        assert code == 0 and "2 files: 2 ok" in out
        return
    assert code == 1
    assert "MISSING        ckpt/x/model.safetensors" in out
    assert "MISSING        ckpt/x/config.json" in out
