"""`manifest create` with loader options: a checkpoint that needs one allowed global."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from inspector.cli import main


def test_allow_global_lets_manifest_create_record_tensors(tmp_path: Path, capsys) -> None:
    path = tmp_path / "hp.pt"
    torch.save({"w": torch.arange(6.0), "hparams": argparse.Namespace(lr=0.5)}, path)
    before = path.read_bytes()
    manifest = tmp_path / "manifest.json"
    assert main(["manifest", "create", str(path), "-o", str(manifest)]) == 3
    err = capsys.readouterr().err
    assert "argparse.Namespace" in err and "add: --allow argparse;" in err
    assert not manifest.exists()

    allow = ["--allow-global", "argparse.Namespace"]
    preset = ["--allow", "argparse"]
    assert main(["manifest", "create", str(path), "-o", str(manifest), *preset]) == 0
    assert "1 file, 1 tensor" in capsys.readouterr().out
    record = json.loads(manifest.read_text())["files"][0]
    assert [(t["key"], t["shape"]) for t in record["tensors"]] == [("w", [6])]
    assert main(["verify", "-m", str(manifest), *allow]) == 0
    assert main(["verify", "-m", str(manifest)]) == 3
    assert path.read_bytes() == before


def test_dash_prints_a_json_manifest_that_verifies(tmp_path: Path, capsys, monkeypatch) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    save_file({"w": torch.ones(3, 2)}, folder / "model.safetensors")
    (folder / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert main(["manifest", "create", "model", "-o", "-"]) == 0
    text = capsys.readouterr().out
    doc = json.loads(text)
    assert [f["path"] for f in doc["files"]] == ["model/config.json", "model/model.safetensors"]
    assert [t["key"] for t in doc["files"][1]["tensors"]] == ["w"]
    assert not (tmp_path / "-").exists()
    (tmp_path / "manifest.json").write_text(text)
    assert main(["verify", "-m", "manifest.json"]) == 0
