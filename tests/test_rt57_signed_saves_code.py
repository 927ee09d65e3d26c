"""Code added to a ledger-signed folder save (a tiny GPT-2 written by the ledger's
`save_pretrained`, signed as the ledger signs): `custom_generate/generate.py`, which
`from_pretrained(trust_remote_code=True).generate()` imports and runs in place of the model's.
`verify DIR --public-key` told it apart from its twin only as an unchecked file (exit 3), while
the run's record, which lists the whole folder, fails the save: now the signature is held to
that record, a changed save (exit 1), and nothing of ours runs the file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from signing_keys import write_key

from inspector.cli import main

_GENERATE = """
import json, os, sys
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)
print(json.dumps(model.generate()))
"""


def _ledgered_gpt2(run: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    from inspector.ledger.folder import save_pretrained

    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=32, n_positions=16)
    save_pretrained(GPT2LMHeadModel(config), run / "ckpt", step=1)
    return run / "ckpt"


def test_code_added_to_a_ledger_signed_folder_fails_verify_with_the_key(tmp_path, monkeypatch,
                                                                         capsys):
    (tmp_path / "keys").mkdir()
    pem, pub = write_key(tmp_path / "keys", "signer")
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    monkeypatch.setenv("CKPT_INSPECTOR_SEAL_KEY", "rt57-code")
    twin = _ledgered_gpt2(tmp_path / "twin")
    shutil.copytree(tmp_path / "twin", tmp_path / "added")
    added, canary = tmp_path / "added" / "ckpt", tmp_path / "CANARY"
    (added / "custom_generate").mkdir()
    (added / "custom_generate" / "generate.py").write_text(
        f"open({str(canary)!r}, 'w').write('ran')\n"
        "def generate(model, *args, **kwargs):\n    return 'hijacked'\n")

    def verify(folder: Path) -> tuple[int, dict]:
        capsys.readouterr()
        code = main(["verify", str(folder), "--public-key", str(pub), "--json", "--quiet"])
        return code, json.loads(capsys.readouterr().out)

    assert verify(twin)[0] == 0
    code, doc = verify(added)
    assert code == 1
    assert doc["signature"]["state"] == "changed"
    assert "added since the save: ckpt/custom_generate/generate.py" in doc["signature"]["reason"]
    assert not canary.exists()  # nothing of ours ran the added file

    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    loaded = subprocess.run([sys.executable, "-c", _GENERATE, str(added)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert loaded.stdout.strip() == '"hijacked"', loaded.stderr[-2000:]
    assert canary.read_text() == "ran"  # the real loader ran it
