"""`convert` of a plain sharded `.bin` folder (no transformers needed): progress on a terminal's
stderr, none with --quiet or off a terminal, and the output named as transformers names it."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from inspector.cli import main
from inspector.shards.convert import FolderError, plan_folder

ROOT = Path(__file__).resolve().parent.parent


def _sharded(folder: Path) -> dict[str, torch.Tensor]:
    folder.mkdir()
    torch.manual_seed(1)
    state = {f"layer.{i}.weight": torch.randn(64, 64) for i in range(4)}
    shards = {
        "weights-00001-of-00002.bin": ["layer.0.weight", "layer.1.weight"],
        "weights-00002-of-00002.bin": ["layer.2.weight", "layer.3.weight"],
    }
    for name, keys in shards.items():
        torch.save({k: state[k] for k in keys}, folder / name)
    weight_map = {k: name for name, keys in shards.items() for k in keys}
    doc = {"metadata": {"total_size": 4 * 64 * 64 * 4}, "weight_map": weight_map}
    (folder / "weights.bin.index.json").write_text(json.dumps(doc))
    return state


def _convert(args: list[str], on_terminal: bool) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal (or a pipe); exit code, stdout, stderr."""
    command = [sys.executable, "-m", "inspector", "convert", *args]
    if not on_terminal:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout, done.stderr
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    err = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 300)
        try:
            chunk = os.read(leader, 65536) if ready else b""
        except OSError:  # EIO: the child closed its end
            chunk = b""
        if not chunk:
            break
        err += chunk
    out = proc.stdout.read().decode()
    proc.wait(timeout=60)
    os.close(leader)
    return proc.returncode, out, err.decode()


def test_progress_on_a_terminal_only_and_never_with_quiet(tmp_path: Path) -> None:
    state = _sharded(tmp_path / "ckpt")
    # one worker at a time: a line per shard and the worker's percentage
    code, out, err = _convert([str(tmp_path / "ckpt"), "-o", str(tmp_path / "a"), "--jobs", "1"],
                              True)
    assert code == 0, err
    assert "converting 1/2: " in err and "converting 2/2: " in err and "%" in err
    assert "index     " in out
    # shards at once: a line per shard as it starts, no single worker's percentage
    code, out, err = _convert([str(tmp_path / "ckpt"), "-o", str(tmp_path / "j"), "--jobs", "2"],
                              True)
    assert code == 0, err
    assert "converting 1/2: " in err and "converting 2/2: " in err
    code, out, err = _convert([str(tmp_path / "ckpt"), "-o", str(tmp_path / "b"), "-q"], True)
    assert (code, err) == (0, "")
    code, out, err = _convert([str(tmp_path / "ckpt"), "-o", str(tmp_path / "c"), "--json"], False)
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert [Path(p).name for p in report["outputs"]] == [
        "weights-00001-of-00002.safetensors",
        "weights-00002-of-00002.safetensors",
    ]
    index = json.loads((tmp_path / "c" / "weights.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 4 * 64 * 64 * 4
    loaded = {}
    for name in sorted(set(index["weight_map"].values())):
        loaded |= load_file(tmp_path / "c" / name)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    assert main(["convert", str(tmp_path / "ckpt"), "-o", str(tmp_path / "one.safetensors")]) == 4
    assert not (tmp_path / "one.safetensors").exists()


def _files(folder: Path, *names: str) -> Path:
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"{}" if name.endswith(".json") else b"x")
    return folder


def test_what_a_folder_converts_and_where_to(tmp_path: Path, capsys) -> None:
    trainer = _files(tmp_path / "t", "pytorch_model.bin", "training_args.bin", "optimizer.pt")
    job = plan_folder(trainer, None)
    assert job.pairs == [(trainer / "pytorch_model.bin", trainer / "model.safetensors")]
    single = _files(tmp_path / "s", "model.pt", "config.json")
    assert plan_folder(single, tmp_path / "o").pairs[0][1] == tmp_path / "o" / "model.safetensors"
    assert plan_folder(single, tmp_path / "x.safetensors").pairs[0][1] == tmp_path / "x.safetensors"
    one = _files(tmp_path / "one", "pytorch_model-00001-of-00001.bin")
    (one / "pytorch_model.bin.index.json").write_text(
        '{"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}}'
    )
    job = plan_folder(one / "pytorch_model.bin.index.json", None)
    assert [out.name for _src, out in job.pairs] == ["model.safetensors"]
    assert job.output_index is None
    cases = {
        "already_safetensors": _files(tmp_path / "a", "model.safetensors", "training_args.bin"),
        "ambiguous": _files(tmp_path / "b", "a.bin.index.json", "b.bin.index.json"),
        "no_checkpoint": _files(tmp_path / "c", "config.json"),
    }
    for code, folder in cases.items():
        with pytest.raises(FolderError) as caught:
            plan_folder(folder, None)
        assert caught.value.code == code
    assert main(["convert", str(cases["already_safetensors"])]) == 3
    assert "holds safetensors weights already" in capsys.readouterr().err
    blobs = tmp_path / "hub" / "models--o--m" / "blobs"
    blobs.mkdir(parents=True)
    (blobs.parent / "snapshots").mkdir()
    assert main(["convert", str(trainer), "-o", str(blobs)]) == 4
    assert "blobs/" in capsys.readouterr().err
    assert sorted(p.name for p in trainer.iterdir()) == [
        "optimizer.pt", "pytorch_model.bin", "training_args.bin",
    ]
