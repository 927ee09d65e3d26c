"""`verify CHECKPOINT` without a manifest, through the checkpoint's ledger record: the record is
the manifest, and it is held to what the run commands hold it to. A save the ledger did not
prove (`mismatch`, `unverified`, `unhealthy`) is no basis for an ok, and a folder save is its
whole listing, hidden names included."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.ledger.folder import record_folder


def _folder(run, on_disk, memory):
    folder = run / "step-1"
    folder.mkdir(parents=True)
    save_file(on_disk, str(folder / "model.safetensors"))
    return folder, record_folder(folder, expected=memory, step=1, run_dir=run)


@pytest.mark.parametrize("memory", [{"w": torch.ones(8)}, None],
                         ids=["mismatch", "unverified"])
def test_a_record_whose_save_was_not_proven_is_no_ok(tmp_path, capsys, memory):
    # what landed is not the state in memory (mismatch), or no state to prove it against
    asked, record = _folder(tmp_path, {"w": torch.full((8,), -1.0)}, memory)
    assert record.outcome == ("mismatch" if memory else "unverified")
    # renamed out of its writer's pattern (step-1.mismatch), as an unhealthy folder is
    folder = tmp_path / record.path
    assert folder.name == f"step-1.{record.outcome}" and not asked.exists()
    assert load_file(str(folder / "model.safetensors"))["w"].tolist() == [-1.0] * 8
    assert main(["verify", str(folder), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["ok"] and all(f["status"] == "ok" for f in doc["files"])
    assert f"its save record's outcome is {record.outcome}, not verified" in doc["errors"][0]
    assert main(["run", "latest", str(tmp_path)]) == 1  # the same save, the same word


def test_a_proven_save_still_verifies(tmp_path, capsys):
    state = {"w": torch.ones(8)}
    folder, record = _folder(tmp_path, state, state)
    assert record.outcome == "verified"
    assert main(["verify", str(folder)]) == 0


def test_hidden_files_put_into_a_folder_save_since_fail_it(tmp_path, capsys):
    state = {"w": torch.ones(8)}
    folder, _ = _folder(tmp_path, state, state)
    (folder / ".cache").mkdir()
    save_file({"w": torch.zeros(8)}, str(folder / ".cache" / "model.safetensors"))
    (folder / ".rng_state.pth").write_bytes(b"added after the save")
    # under a folder no walk enters, named as the recorded file is
    (folder / ".git").mkdir()
    save_file({"w": torch.zeros(8)}, str(folder / ".git" / "model.safetensors"))
    assert main(["run", "verify", str(tmp_path)]) == 1
    capsys.readouterr()
    assert main(["verify", str(folder), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    failing = {f["path"] for f in doc["files"] if f["status"] != "ok"}
    assert failing == {str(folder / name) for name in (".cache/model.safetensors",
                                                       ".rng_state.pth", ".git/model.safetensors")}
