"""A real Lightning checkpoint (`Trainer.fit`, then `trainer.save_checkpoint`) through scan,
inspect and convert, and the jailed worker loading it where Lightning cannot be imported.

The module saves its hyper-parameters, among them a path and a Lightning AttributeDict, so the
file needs `--allow lightning`: the worker rebuilds those as a pure path and a dict."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from inspector.cli import main
from inspector.sandbox.host import client
from inspector.scan.engine import scan_file
from inspector.scan.pickles.policy import classify
from inspector.scan.pickles.presets import PRESETS, allow_flags

pytest_plugins = ("sandbox_fixtures",)  # fixture: unchanged

OUTSIDE_TORCH = {"lightning.pytorch.utilities.parsing.AttributeDict", "pathlib.PosixPath"}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _regressor_class(lightning):
    """The LightningModule under test, defined once Lightning is imported."""
    from lightning.pytorch.utilities.parsing import AttributeDict

    class Regressor(lightning.LightningModule):
        def __init__(self, lr: float, data_dir: Path, schedule: AttributeDict) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.model = Net()

        def training_step(self, batch, _index):
            x, y = batch
            return nn.functional.mse_loss(self.model(x), y)

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr,
                                          weight_decay=0.05)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, **self.hparams.schedule)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler,
                                                             "interval": "step"}}

    return Regressor


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint path, the fitted module, its trainer)."""
    # Lightning is imported here, not at module level: it adds seconds to every collection of
    # the suite, and only the tests that use this checkpoint need it
    lightning = pytest.importorskip(
        "lightning", reason="lightning is not installed (the dev extra installs it)")
    from lightning.pytorch.utilities.parsing import AttributeDict

    Regressor = _regressor_class(lightning)
    root = tmp_path_factory.mktemp("lightning")
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 2))
    module = Regressor(lr=0.01, data_dir=root / "data",
                       schedule=AttributeDict(step_size=1, gamma=0.5))
    trainer = lightning.Trainer(max_steps=2, accelerator="cpu", logger=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=root)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))
    path = root / "last.ckpt"
    trainer.save_checkpoint(path)
    return path, module, trainer


def test_scan_names_the_two_benign_globals_outside_torchs_allowlist(trained):
    result = scan_file(trained[0])
    # AttributeDict is a class the policy does not know: a question, never a danger
    assert result.verdict == "suspicious" and not result.weights_only_ok
    outside = {g.import_name for g in result.globals
               if g.reason != "allowed by torch.load(weights_only=True)"}
    assert outside == OUTSIDE_TORCH
    assert all(classify(*name.rsplit(".", 1)).severity != "dangerous"
               for name in PRESETS["lightning"][1])


def test_inspect_asks_for_the_preset_then_summarises_the_training_state(trained, capsys):
    path, module, trainer = trained
    assert main(["inspect", str(path), "--json"]) == 5
    error = json.loads(capsys.readouterr().out)["error"]
    assert set(error["globals"]) == OUTSIDE_TORCH
    assert error["message"].endswith("add: --allow lightning")

    assert main(["inspect", str(path), "--json", "--allow", "lightning"]) == 1  # suspicious
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None
    values = {o["key"]: o["repr"] for o in report["objects"]}
    assert values["epoch"] == repr(trainer.current_epoch)
    assert values["global_step"] == repr(trainer.global_step) == "2"
    optimizer = trainer.optimizers[0]
    assert values["optimizer_states.0.param_groups.0.lr"] == repr(optimizer.param_groups[0]["lr"])
    assert values["optimizer_states.0.param_groups.0.initial_lr"] == "0.01"
    assert values["lr_schedulers.0.gamma"] == "0.5"
    assert values["hyper_parameters.lr"] == "0.01"
    assert values["hyper_parameters.schedule.step_size"] == "1"
    assert values["hyper_parameters.data_dir"] == repr(
        Path(module.hparams.data_dir)).replace("PosixPath", "PurePosixPath")
    [mapped] = report["optimizer_params"]
    assert mapped["type"] == "AdamW" and mapped["model"] == "state_dict"
    assert [p["name"] for p in mapped["params"]] == [n for n, _ in module.named_parameters()]
    items = {i["code"]: i for i in report["resume"]["items"]}
    assert report["resume"]["ready"] is True
    assert items["progress"]["detail"] == f"epoch {trainer.current_epoch} · global_step 2"
    assert items["optimizer_state"]["detail"].startswith("1 parameter group · tracks the model's")
    assert items["lr_scheduler"]["detail"] == "StepLR · last_epoch 2"
    json.dumps(report, allow_nan=False)

    assert main(["inspect", str(path), "--allow", "lightning"]) == 1
    text = capsys.readouterr().out.splitlines()
    data_dir = values["hyper_parameters.data_dir"]
    # a PurePosixPath is no value the host reads: the line is the jailed loader's word
    assert (f"hyper-parameters: lr 0.01 · data_dir {data_dir} · schedule.step_size 1 · "
            "schedule.gamma 0.5 (as reported by the jailed loader, not checked here)") in text
    assert any(line.startswith("optimizer ids: optimizer_states.0 (AdamW): 4 parameter ids "
                               "named from state_dict (0 model.fc1.weight") for line in text)
    assert "  LR scheduler (optional): saved — StepLR · last_epoch 2" in text


def test_convert_extracts_weights_the_plain_module_loads_strictly(tmp_path, trained, unchanged,
                                                                   capsys):
    path, module, _ = trained
    unchanged(path)
    out = tmp_path / "net.safetensors"
    assert main(["convert", str(path), "--key", "state_dict", "--strip-prefix", "model.",
                 "-o", str(out), "--allow", "lightning", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verified"] is True
    net = Net()
    net.load_state_dict(load_file(out), strict=True)
    x = torch.randn(5, 4)
    with torch.no_grad():
        assert torch.equal(net(x), module.model(x))


BLOCKER = """
import importlib.abc, runpy, sys
class NoLightning(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("lightning", "lightning_fabric", "pytorch_lightning"):
            raise ImportError("lightning is blocked in this worker: " + name)
sys.meta_path.insert(0, NoLightning())
sys.argv = ["worker"]
runpy.run_module("inspector.sandbox.worker.main", run_name="__main__", alter_sys=True)
"""


def test_the_jailed_worker_loads_it_where_lightning_cannot_be_imported(tmp_path, trained,
                                                                      monkeypatch, cold_workers):
    # Cold workers start as `sys.executable -I -m inspector.sandbox.worker.main`; this interpreter
    # installs an import hook that refuses every Lightning package first.
    python = tmp_path / "python-without-lightning"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -I -c '{BLOCKER}'\n")
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    preset = list(PRESETS["lightning"][1])

    report = client.inspect_file(trained[0], allow_globals=preset)
    assert report.error is None and report.timing["worker"] == "cold"
    keys = {o.key for o in report.objects}
    assert {"hyper_parameters.schedule.gamma", "hyper_parameters.data_dir"} <= keys

    # the same worker, asked to import a Lightning class itself, cannot
    refused = client.inspect_file(trained[0], allow_globals=[*preset, "lightning.LightningModule"])
    assert refused.error.code == "bad_allowed_global"
    assert "lightning.LightningModule" in refused.error.message


def test_one_preset_admits_what_a_lightning_1_checkpoint_needs():
    # PyTorch Lightning 1.x saved hparams as an argparse.Namespace beside paths
    assert allow_flags(["argparse.Namespace", "pathlib.PosixPath"]) == ["--allow", "lightning"]
    assert allow_flags(["argparse.Namespace"]) == ["--allow", "argparse"]
    assert allow_flags(["pathlib._local.WindowsPath", "my.Config"]) == [
        "--allow", "lightning", "--allow-global", "my.Config"]
