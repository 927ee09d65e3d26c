"""A ledger save's signature names the save it was made for (its path in the run folder): read
without the journal (`verify FILE`, `verify DIR`, the app's badge), a signed save copied with
its signature over another save's name (a rollback) is `changed`, not intact, beside a clean
twin whose files and signatures are where they were saved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from signing_keys import write_key

from inspector.cli import main
from inspector.core.vocabulary import SignatureState
from inspector.signing.folder import check_folder


@pytest.fixture
def key(tmp_path: Path, monkeypatch) -> Path:
    pem, pub = write_key(tmp_path, "key")
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    return pub


def _verify(target: Path, pub: Path, capsys) -> tuple[int, dict]:
    code = main(["verify", str(target), "--public-key", str(pub), "--json"])
    return code, json.loads(capsys.readouterr().out)["signature"]


def test_a_file_save_copied_over_a_later_one_is_not_its_signature(tmp_path, key,
                                                                 capsys) -> None:
    import torch

    from inspector.ledger import save

    runs = {name: tmp_path / name for name in ("clean", "rolled")}
    for run in runs.values():
        for step in (1, 2):
            state = {"w": torch.full((4, 4), float(step))}
            save(state, run / "ckpt" / f"step-{step}.pt", step=step, run_dir=run)
    ckpt = runs["rolled"] / "ckpt"
    for suffix in ("", ".sig"):
        shutil.copyfile(ckpt / f"step-1.pt{suffix}", ckpt / f"step-2.pt{suffix}")

    code, verdict = _verify(runs["clean"] / "ckpt" / "step-2.pt", key, capsys)
    assert code == 0 and verdict["state"] == SignatureState.INTACT
    code, verdict = _verify(ckpt / "step-2.pt", key, capsys)
    assert code == 1 and verdict["state"] == SignatureState.CHANGED
    assert "signed for step 1 at ckpt/step-1.pt" in verdict["reason"]


def test_a_folder_save_copied_under_another_name_is_not_its_signature(tmp_path, key,
                                                                     capsys) -> None:
    from inspector.ledger import save_folder

    def write(folder: Path) -> None:
        save_file({"w": np.ones(8, dtype=np.float32)}, str(folder / "model.safetensors"))

    save_folder(write, tmp_path / "checkpoint-5", step=5, run_dir=tmp_path)
    shutil.copytree(tmp_path / "checkpoint-5", tmp_path / "checkpoint-9")
    shutil.copyfile(tmp_path / "checkpoint-5.sig", tmp_path / "checkpoint-9.sig")

    for name, state in (("checkpoint-5", SignatureState.INTACT),
                        ("checkpoint-9", SignatureState.CHANGED)):
        checked = check_folder(tmp_path / name, tmp_path / f"{name}.sig", key)
        assert checked.verdict.state == state, name
    assert "at checkpoint-5" in str(checked.verdict.reason)


def test_a_save_outside_its_run_folder_is_still_its_signature(tmp_path, key, capsys) -> None:
    import torch

    from inspector.ledger import save

    target = tmp_path / "elsewhere" / "step-3.pt"
    save({"w": torch.zeros(2)}, target, step=3, run_dir=tmp_path / "run")
    code, verdict = _verify(target, key, capsys)
    assert code == 0 and verdict["state"] == SignatureState.INTACT


def test_a_missing_folder_save_keeps_its_signature_verdict(tmp_path, key, capsys) -> None:
    from inspector.ledger import save_folder

    def write(folder: Path) -> None:
        save_file({"w": np.ones(8, dtype=np.float32)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text("{}")

    runs = {name: tmp_path / name for name in ("kept", "gone")}
    for run in runs.values():
        save_folder(write, run / "checkpoint-5", step=5, run_dir=run)
    shutil.rmtree(runs["gone"] / "checkpoint-5")
    for name, state in (("kept", "intact"), ("gone", "missing")):
        main(["run", "verify", str(runs[name]), "--public-key", str(key), "--json"])
        [checkpoint] = json.loads(capsys.readouterr().out)["checkpoints"]
        assert checkpoint["state"] == state
        # the signature still signs exactly what the record holds
        assert checkpoint["signature"]["state"] == SignatureState.INTACT, name
