"""The transformers guard checks every step whose loss the Trainer computes itself (label
smoothing, `compute_loss_func`, a subclass's `compute_loss`: the labels are popped, so the
model's output carries no loss), and a step whose loss no one shows it (a subclass's own
`training_step`) is said and fails every later save; the same for Lightning's manual
optimization calling `loss.backward()` itself. Each fault is the test's own: an exponent-bit
flip of a weight after optimizer step 4, beside a clean same-seed twin."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
from guard_support import unhealthy_at_step_4
from test_guard_integrations import Pairs, _tiny_class
from test_guard_parity import flip_top_exponent
from torch import nn
from torch.utils.data import DataLoader, Dataset

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import GuardConfig
from inspector.run.checkpoints import read_ledger


class Classifier(nn.Module):
    """A model whose output carries a loss only when it is given labels."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        self.config = SimpleNamespace(problem_type="single_label_classification")  # read by
        # the Trainer's label smoothing

    def forward(self, x, labels=None):
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


class Rows(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 4, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": int(self.x[i].sum() > 0) + int(self.x[i, 0] > 1)}


def _cross_entropy(outputs, labels, num_items_in_batch=None):
    return nn.functional.cross_entropy(outputs["logits"], labels)


def train(tmp_path, recipe: str, fault: bool):
    """A real Trainer with the guard and the ledger, saving every 2 steps; `recipe` says who
    computes the loss; with `fault`, the test flips a weight after optimizer step 4."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from inspector.guard.hf_callback import GuardTrainerCallback
    from inspector.ledger.hf import LedgerCallback

    class OwnLoss(Trainer):  # pops the labels, as the Trainer's own label smoother does
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = nn.functional.cross_entropy(outputs["logits"], labels)
            return (loss, outputs) if return_outputs else loss

    class OwnStep(Trainer):  # never calls compute_loss; the model's output has no loss
        def training_step(self, model, inputs, num_items_in_batch=None):
            labels = inputs.pop("labels")
            loss = nn.functional.cross_entropy(model(**inputs)["logits"], labels)
            loss.backward()
            return loss.detach()

    class Fault(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if fault and state.global_step == 4:  # after optimizer step 4, before its save
                flip_top_exponent(model.net[0].weight)

    out = tmp_path / "out"
    args = TrainingArguments(
        output_dir=str(out), max_steps=8, per_device_train_batch_size=8, report_to=[],
        use_cpu=True, logging_strategy="no", disable_tqdm=True, remove_unused_columns=False,
        learning_rate=1e-2, save_strategy="steps", save_steps=2,
        label_smoothing_factor=0.1 if recipe == "label_smoothing" else 0.0)
    kind = {"compute_loss": OwnLoss, "training_step": OwnStep}.get(recipe, Trainer)
    extra = {"compute_loss_func": _cross_entropy} if recipe == "compute_loss_func" else {}
    guard = GuardTrainerCallback(out, GuardConfig(console=False))
    kind(model=Classifier(), args=args, train_dataset=Rows(),
         callbacks=[Fault(), guard, LedgerCallback()], **extra).train()
    return out, guard


@pytest.mark.parametrize("recipe", ["label_smoothing", "compute_loss_func", "compute_loss"])
def test_a_trainer_computed_loss_is_checked_and_the_flip_never_resumed(tmp_path, recipe):
    from transformers.trainer_utils import get_last_checkpoint

    clean, clean_guard = train(tmp_path / "clean", recipe, fault=False)
    assert clean_guard.guard.step_index == 8 and not clean_guard.guard.alarms
    assert {s.outcome for s in read_ledger(clean).saves} == {SaveOutcome.VERIFIED}
    assert get_last_checkpoint(str(clean)) == str(clean / "checkpoint-8")

    out, callback = train(tmp_path / "flip", recipe, fault=True)
    assert callback.guard.step_index == 8
    first = callback.guard.alarms[0]
    assert first.step == 4
    assert ("weights-changed", "net.0.weight") in {(b.rule, b.param) for b in first.breaches}
    unhealthy_at_step_4(out, "weights-changed on net.0.weight")
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")


def test_a_training_step_the_guard_cannot_see_is_said_and_never_sealed(tmp_path, capfd):
    clean, _ = train(tmp_path / "clean", "compute_loss", fault=False)
    assert {s.outcome for s in read_ledger(clean).saves} == {SaveOutcome.VERIFIED}

    out, callback = train(tmp_path / "own", "training_step", fault=False)
    assert not callback.guard.alarms
    assert "step 0 was not checked: the callback saw no training loss" in capfd.readouterr().err
    saves = read_ledger(out).saves
    assert [s.outcome for s in saves] == [SaveOutcome.UNHEALTHY] * 4
    assert "8 optimizer steps the guard never checked" in saves[-1].detail


def test_lightning_manual_backward_outside_lightning_is_said_and_never_sealed(tmp_path, capfd):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    from inspector.guard.lightning_callback import GuardCallback
    from inspector.ledger.lightning import LedgerCheckpointIO

    def fit(run, own_backward: bool):
        class Manual(_tiny_class(pl)):
            def __init__(self):
                super().__init__()
                self.automatic_optimization = False

            def training_step(self, batch, batch_idx):
                opt = self.optimizers()
                opt.zero_grad()
                loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
                loss.backward() if own_backward else self.manual_backward(loss)
                opt.step()

        guard = GuardCallback(run, GuardConfig(console=False))
        trainer = pl.Trainer(max_steps=4, accelerator="cpu", logger=False,
                             enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=run, plugins=[LedgerCheckpointIO(run_dir=run)],
                             callbacks=[guard, ModelCheckpoint(dirpath=run,
                                                               every_n_train_steps=2,
                                                               save_top_k=-1)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(Manual(), DataLoader(Pairs(), batch_size=None, shuffle=False))
        return guard

    clean = fit(tmp_path / "clean", own_backward=False)
    assert clean.guard.step_index == 4
    assert {s.outcome for s in read_ledger(tmp_path / "clean").saves} == {SaveOutcome.VERIFIED}

    own = fit(tmp_path / "own", own_backward=True)
    assert not own.guard.alarms
    assert "was not checked: no backward went through Lightning" in capfd.readouterr().err
    assert {s.outcome for s in read_ledger(tmp_path / "own").saves} == {SaveOutcome.UNHEALTHY}
