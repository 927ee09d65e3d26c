"""The guard inside real Lightning and transformers training runs, on tiny models, on the CPU."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from guard_support import alarms
from torch import nn
from torch.utils.data import DataLoader, Dataset

from inspector.guard.guard import GuardConfig, GuardHalt
from inspector.guard.inject import BitFlip
from inspector.guard.scene import read_scene

# Lightning, transformers and the guard's callbacks for them (which import them) are imported
# in the functions that use them: at module level they added seconds to every collection.

BAD = 5  # the batch (and step) that goes wrong


class Pairs(Dataset):
    """Batch-sized rows: row i is batch i when the loader keeps order and batch_size=1."""

    def __init__(self, nan_row: int | None = None):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(12, 4, 4, generator=g)
        if nan_row is not None:
            self.x[nan_row, 0, 0] = math.nan

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.x[i].sum(dim=1, keepdim=True)


def _tiny_class(pl):
    """The LightningModule the guard watches, defined once Lightning is imported."""

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Tiny


def fit(tmp_path, config, data):
    import lightning.pytorch as pl

    from inspector.guard.lightning_callback import GuardCallback

    model = _tiny_class(pl)()
    callback = GuardCallback(tmp_path, config)
    trainer = pl.Trainer(max_steps=8, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, callbacks=[callback])
    loader = DataLoader(data, batch_size=None, shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(model, loader)
    return model, callback


def test_lightning_skip_keeps_a_nan_batch_out_of_the_weights(tmp_path):
    model, _ = fit(tmp_path, GuardConfig(warmup=3, action="skip"), Pairs(nan_row=BAD))
    [record] = alarms(tmp_path)
    assert record["step"] == BAD and record["rule"] == "loss-nonfinite"
    assert record["action"] == "skip" and record["attribution"] == "reproducible"
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_lightning_attributes_a_first_run_fault_as_transient(tmp_path):
    flip = BitFlip(step=BAD, param="net.2.weight", index=1, bit=30)
    model, _ = fit(tmp_path, GuardConfig(warmup=3, faults=[flip]), Pairs())
    [record] = alarms(tmp_path)
    assert record["step"] == BAD and record["attribution"] == "transient"
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_lightning_halt_leaves_its_scene(tmp_path):
    with pytest.raises(GuardHalt) as caught:
        fit(tmp_path, GuardConfig(warmup=3, action="halt"), Pairs(nan_row=BAD))
    assert caught.value.code == 17
    scene = read_scene(caught.value.scene)
    assert scene.step == BAD and "optimizer.pt" in scene.files


class HfTiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x, labels):
        return {"loss": nn.functional.mse_loss(self.net(x), labels)}


class HfRows(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 4, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.x[i].sum(dim=0, keepdim=True)}


@pytest.mark.parametrize(("action", "skip_nonfinite", "taken"),
                         [("warn", False, "warn"), ("warn", True, "skip"), ("skip", True, "skip")])
def test_transformers_trainer_catches_a_flipped_gradient_at_its_step(tmp_path, action,
                                                                    skip_nonfinite, taken):
    from transformers import Trainer, TrainingArguments

    from inspector.guard.hf_callback import GuardTrainerCallback

    flip = BitFlip(step=BAD, param="net.0.weight", index=2, bit=30)
    callback = GuardTrainerCallback(tmp_path / "run", GuardConfig(
        warmup=3, action=action, faults=[flip], skip_nonfinite=skip_nonfinite))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=8,
                             per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             remove_unused_columns=False, learning_rate=1e-2)
    model = HfTiny()
    trainer = Trainer(model=model, args=args, train_dataset=HfRows(), callbacks=[callback])
    trainer.train()
    first = alarms(tmp_path / "run")[0]
    # the flipped element squares past float32, so the norm is Inf: by default even warn skips
    assert first["rule"] == "grad_norm-nonfinite"
    assert first["step"] == BAD and first["action"] == taken
    assert first["params"] == ["net.0.weight"] or first["worst"][0][0] == "net.0.weight"
    # AdamW's second moment remembers the flipped gradient only if that step was taken
    second_moment = trainer.optimizer.state[model.net[0].weight]["exp_avg_sq"]
    assert (second_moment.max() > 1e30) == (taken == "warn")
