"""The Overview says what a checkpoint is: the architecture guessed from its keys and, for a
training checkpoint, whether it holds what a resume needs (screenshots in tests/artifacts/gui/).

The checkpoints are built by a child Python (the GUI test process never imports torch), from a
transformers config made here, never downloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gui_support import TESTS, each_theme, wait_loaded
from PySide6.QtWidgets import QApplication

from inspector.gui.widgets.model_summary import WEIGHTS_ONLY

pytest_plugins = ("gui_fixtures",)  # fixtures: window

_BUILD = r"""
import json, sys
from pathlib import Path
import torch, transformers
sys.path.insert(0, sys.argv[1])
import factories

out = Path(sys.argv[2])
torch.manual_seed(0)
cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
model = transformers.LlamaForCausalLM(cfg)
torch.save(model.state_dict(), out / "llama.pt")
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 2,
            "step": 300}, out / "llama-train.pt")
frozen = torch.optim.Adam(model.lm_head.parameters(), lr=1e-3)  # the rest is frozen
model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
frozen.step()
torch.save({"model": model.state_dict(), "optimizer": frozen.state_dict(), "step": 5},
           out / "llama-frozen.pt")
json.dump({"layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
           "vocab": cfg.vocab_size, "params": sum(p.numel() for p in model.parameters())},
          open(out / "config.json", "w"))
"""


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Path, dict]:
    # importorskip here, not at module level: importing transformers adds a second or more to
    # every collection, and only the tests that open these checkpoints need it
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("gui-arch")
    subprocess.run([sys.executable, "-c", _BUILD, str(TESTS), str(folder)], check=True,
                   timeout=600)
    return folder, json.loads((folder / "config.json").read_text())


def test_overview_names_the_architecture(window, qtbot, llama):
    folder, cfg = llama
    (doc,) = window.open_paths([folder / "llama.pt"])
    wait_loaded(qtbot, doc)
    text = window.overview.fields["architecture"].text()
    assert text.startswith("Llama-style decoder")
    assert f"{cfg['layers']} decoder layers" in text
    assert f"hidden size {cfg['hidden']}" in text and f"vocabulary {cfg['vocab']}" in text
    assert f"{cfg['params']:,} parameters" in text
    resume = window.overview.model_summary.resume  # weights alone: what it is, no checklist
    assert resume.isVisible() and resume.accessibleDescription() == WEIGHTS_ONLY
    assert "Not ready" not in resume.text() and resume.checklist is None


def test_the_built_in_sample_is_weights_with_an_epoch_not_a_failed_resume(window, qtbot,
                                                                          artifacts):
    """The benign sample saves an epoch and a learning rate beside its weights, no optimizer:
    the Overview says it is weights only (and shows the epoch), never 'Not ready to resume'."""
    benign, _ = window.open_samples()
    wait_loaded(qtbot, benign)
    window.file_list.setCurrentRow(window.docs.index(benign))
    qtbot.waitUntil(lambda: window.overview.doc is benign)
    assert benign.result.resume is None
    resume = window.overview.model_summary.resume
    assert resume.isVisible() and resume.accessibleDescription() == WEIGHTS_ONLY
    assert window.overview.fields["training"].text() == "epoch 12"
    window.resize(1280, 720)
    for theme in each_theme(qtbot):
        assert resume.text() == WEIGHTS_ONLY  # kept through a palette change
        assert window.grab().save(str(artifacts / "gui"
                                      / f"overview-weights-only-{theme}-1280x720.png"))


def test_training_checkpoint_shows_the_resume_checklist(window, qtbot, llama, artifacts):
    folder, cfg = llama
    (weights, doc) = window.open_paths([folder / "llama.pt", folder / "llama-train.pt"])
    wait_loaded(qtbot, weights)
    wait_loaded(qtbot, doc)
    window.file_list.setCurrentRow(1)
    overview = window.overview
    qtbot.waitUntil(lambda: overview.doc is doc)
    resume = overview.model_summary.resume
    assert resume.isVisible()
    rows = resume.accessibleDescription().splitlines()
    assert rows[0].startswith("Ready to resume")
    assert any(r.startswith("Optimizer state: saved — ") and "1 parameter group · tracks the"
               in r for r in rows)
    assert "Epoch / step: saved — epoch 2 · step 300" in rows
    assert any(r.startswith("LR scheduler (optional): not saved") for r in rows)
    assert "✓ saved" in resume.text() and "not saved" in resume.text()
    # the optimizer's state is training state, not part of the architecture's parameters
    assert f"{cfg['params']:,} parameters" in overview.fields["architecture"].text()
    shots = artifacts / "gui"
    window.resize(1280, 720)
    rendered = {}
    for theme in each_theme(qtbot):
        rendered[theme] = resume.text()
        assert window.grab().save(str(shots / f"overview-resume-{theme}-1280x720.png"))
    # the row colours follow the palette; the words do not change
    assert rendered["light"] != rendered["dark"]
    assert resume.accessibleDescription().splitlines() == rows


def test_an_optimizer_for_part_of_the_model_is_not_ready(window, qtbot, llama, artifacts):
    folder, _ = llama
    (doc,) = window.open_paths([folder / "llama-frozen.pt"])
    wait_loaded(qtbot, doc)
    resume = window.overview.model_summary.resume
    assert resume.isVisible()
    rows = resume.accessibleDescription().splitlines()
    assert rows[0] == "Not ready to resume: optimizer state does not match the model"
    assert any(r.startswith("Optimizer state: does not match the model — 1 parameter group · "
                            "tracks 1 parameter tensor (") for r in rows)
    assert "⚠ does not match the model" in resume.text()
    window.resize(1280, 720)
    QApplication.processEvents()
    assert window.grab().save(str(artifacts / "gui" / "overview-resume-mismatch-1280x720.png"))
