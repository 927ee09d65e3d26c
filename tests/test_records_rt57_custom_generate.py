"""`custom_generate/generate.py`, added unlisted to a model folder whose files a manifest lists,
is `unchecked` and fails `verify` (round 57): transformers' `from_pretrained(...,
trust_remote_code=True)` imports it from the subfolder and its `generate` replaces the model's,
with nothing in config.json asking for it. The harm is shown under the real loader (a canary
appears), never under `verify`; the clean twin verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.cli import main

transformers = pytest.importorskip("transformers")


def _statuses(capsys, args: list[str]) -> tuple[int, dict[str, str]]:
    capsys.readouterr()
    code = main(["verify", *args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    return code, {Path(f["path"]).name: f["status"] for f in doc["files"]}


def test_custom_generate_code_runs_under_the_loader_and_fails_verify(tmp_path, capsys):
    canary = tmp_path / "canary"
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=32,
                                     n_positions=16)
    folders = {name: tmp_path / name for name in ("twin", "added")}
    for folder in folders.values():
        transformers.GPT2LMHeadModel(config).save_pretrained(folder)
        assert main(["manifest", "create", str(folder), "-o",
                     str(folder.with_suffix(".sha256"))]) == 0
    code_dir = folders["added"] / "custom_generate"
    code_dir.mkdir()
    (code_dir / "generate.py").write_text(
        f"import pathlib\npathlib.Path({str(canary)!r}).write_text('ran')\n"
        "def generate(model, *args, **kwargs):\n    return 'hijacked'\n")
    (code_dir / "requirements.txt").write_text("")
    for name, want in (("twin", 0), ("added", 3)):
        folder = folders[name]
        code, statuses = _statuses(capsys, ["-m", str(folder.with_suffix(".sha256")),
                                            str(folder)])
        assert code == want, statuses
    assert statuses["generate.py"] == "unchecked"
    assert statuses["requirements.txt"] == "unchecked"
    assert not canary.exists()  # nothing of ours ran it
    load = ("import sys, transformers\n"
            "m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], "
            "trust_remote_code=True)\nprint(m.generate())")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    ran = subprocess.run([sys.executable, "-c", load, str(folders["added"])], env=env,
                         capture_output=True, text=True, timeout=300)
    assert canary.read_text() == "ran", ran.stderr[-2000:]  # the harm, under the real loader
    assert ran.stdout.split()[-1:] == ["hijacked"]
