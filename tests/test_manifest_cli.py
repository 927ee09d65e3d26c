"""`manifest create` with loader options: a checkpoint that needs one allowed global."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from inspector.cli import main


def test_allow_global_lets_manifest_create_record_tensors(tmp_path: Path, capsys) -> None:
    path = tmp_path / "hp.pt"
    torch.save({"w": torch.arange(6.0), "hparams": argparse.Namespace(lr=0.5)}, path)
    before = path.read_bytes()
    manifest = tmp_path / "manifest.json"
    assert main(["manifest", "create", str(path), "-o", str(manifest)]) == 3
    err = capsys.readouterr().err
    assert "argparse.Namespace" in err and "--allow-global" in err
    assert not manifest.exists()

    allow = ["--allow-global", "argparse.Namespace"]
    assert main(["manifest", "create", str(path), "-o", str(manifest), *allow]) == 0
    assert "1 file, 1 tensors" in capsys.readouterr().out
    record = json.loads(manifest.read_text())["files"][0]
    assert [(t["key"], t["shape"]) for t in record["tensors"]] == [("w", [6])]
    assert main(["verify", "-m", str(manifest), *allow]) == 0
    assert main(["verify", "-m", str(manifest)]) == 3
    assert path.read_bytes() == before
