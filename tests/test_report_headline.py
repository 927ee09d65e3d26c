"""A report whose checks failed never heads as safe: a clean file that fails its manifest is
"PROBLEM" on the terminal and "Checks failed" in the HTML, not "SAFE TO OPEN"."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from inspector.cli import main


def test_a_clean_file_that_fails_its_manifest_never_heads_as_safe(tmp_path, capsys):
    model = tmp_path / "m.safetensors"
    save_file({"w": torch.ones(4)}, model)
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text("0" * 64 + "  m.safetensors\n")
    html, doc = tmp_path / "r.html", tmp_path / "r.json"
    assert main(["report", str(model), "--manifest", str(manifest), "-o", str(html)]) == 1
    assert capsys.readouterr().out.startswith("PROBLEM: 1 file, 1 problem")
    text = html.read_text()
    assert "CHECKS FAILED" in text.upper() and "SAFE TO OPEN" not in text
    assert main(["report", str(model), "--manifest", str(manifest), "-o", str(doc)]) == 1
    assert json.loads(doc.read_text())["status"] == "failed"
