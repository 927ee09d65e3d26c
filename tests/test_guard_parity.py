"""Parity: the faults of the plain-loop campaign (`test_guard_faults.py`) through real
Lightning and transformers Trainers on the CPU, each injected by the test's own callback (never
the guard's BitFlip): an exponent-bit flip in a weight between steps is named at the next
check, a NaN sample under the default warn never reaches the weights, and a checkpoint the
Trainer saves just after the flip is recorded unhealthy and never resumed; the same for a
flipped float buffer (`weight-largest`), which no optimizer step touches; a running variance
whose sign flipped (`variance-negative`); and a learning rate negated in the optimizer's
`param_groups` (`optimizer-setting`)."""

from __future__ import annotations

import warnings

import torch
from guard_support import alarms, unhealthy_at_step_4
from test_guard_integrations import BAD, HfRows, HfTiny, Pairs, _tiny_class
from torch.utils.data import DataLoader

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import GuardConfig
from inspector.run.checkpoints import read_ledger, resume_choice


def flip_top_exponent(param: torch.Tensor, index: int = 1) -> None:
    """The test's own fault: the top exponent bit of one float32 element (about x 2^128)."""
    with torch.no_grad():
        param.detach().view(-1).view(torch.int32)[index] ^= 1 << 30


def with_buffer(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with a float buffer beside its weights (a fixed scale no forward reads), in its
    state dict as BatchNorm's running statistics are."""
    model.register_buffer("scale", torch.full((4,), 0.5))
    return model


def lightning_fit(tmp_path, data, fault=None, prepare=lambda m: m):
    import lightning.pytorch as pl

    from inspector.guard.lightning_callback import GuardCallback

    class Fault(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if fault is not None and batch_idx == BAD:
                fault(pl_module)

    model = prepare(_tiny_class(pl)())
    guard = GuardCallback(tmp_path, GuardConfig(console=False))
    trainer = pl.Trainer(max_steps=8, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, callbacks=[Fault(), guard])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, DataLoader(data, batch_size=None, shuffle=False))
    return model, guard


def test_lightning_names_a_weight_flipped_between_steps(tmp_path):
    _, callback = lightning_fit(tmp_path, Pairs(),
                                fault=lambda m: flip_top_exponent(m.net[0].weight))
    first = callback.guard.alarms[0]
    assert first.step == BAD
    assert ("weights-changed", "net.0.weight") in {(b.rule, b.param) for b in first.breaches}
    assert alarms(tmp_path)[0]["param"] == "net.0.weight"


def test_lightning_names_a_buffer_flipped_between_steps(tmp_path):
    _, callback = lightning_fit(tmp_path, Pairs(), fault=lambda m: flip_top_exponent(m.scale),
                                prepare=with_buffer)
    first = callback.guard.alarms[0]
    assert first.step == BAD
    assert ("weight-largest", "scale") in {(b.rule, b.param) for b in first.breaches}


def test_lightning_default_warn_keeps_a_nan_sample_out_of_the_weights(tmp_path):
    model, callback = lightning_fit(tmp_path, Pairs(nan_row=BAD))
    assert [(a.step, a.action) for a in callback.guard.alarms] == [(BAD, "skip")]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def hf_train(tmp_path, flip_at=None, when="begin", save_steps=None,
             target=lambda m: m.net[0].weight, prepare=lambda m: m, fault=None):
    """A real transformers Trainer with the guard (and the ledger, when it saves); at step
    `flip_at` the test's own fault: `fault(model, optimizer)`, else a flip of `target`."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from inspector.guard.hf_callback import GuardTrainerCallback
    from inspector.ledger.hf import LedgerCallback

    out = tmp_path / "out"

    def act(model, optimizer):
        if fault is not None:
            fault(model, optimizer)
        else:
            flip_top_exponent(target(model))

    class Fault(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            if when == "begin" and state.global_step == flip_at:
                act(model, optimizer)

        def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
            if when == "end" and state.global_step == flip_at:  # after the optimizer step
                act(model, optimizer)

    guard = GuardTrainerCallback(out, GuardConfig(console=False))
    saving = ({"save_strategy": "steps", "save_steps": save_steps} if save_steps
              else {"save_strategy": "no"})
    args = TrainingArguments(output_dir=str(out), max_steps=8, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, logging_strategy="no",
                             disable_tqdm=True, remove_unused_columns=False,
                             learning_rate=1e-2, **saving)
    callbacks = [Fault(), guard] + ([LedgerCallback()] if save_steps else [])
    Trainer(model=prepare(HfTiny()), args=args, train_dataset=HfRows(),
            callbacks=callbacks).train()
    return out, guard


def test_transformers_names_a_weight_flipped_between_steps(tmp_path):
    out, callback = hf_train(tmp_path, flip_at=BAD)
    first = callback.guard.alarms[0]
    assert first.step == BAD
    assert ("weights-changed", "net.0.weight") in {(b.rule, b.param) for b in first.breaches}
    assert alarms(out)[0]["rule"] == "weights-changed"


def test_transformers_checkpoint_saved_after_a_buffer_flip_is_unhealthy_and_never_resumed(
        tmp_path):
    out, callback = hf_train(tmp_path, flip_at=4, when="end", save_steps=2,
                             target=lambda m: m.scale, prepare=with_buffer)
    assert ("weight-largest", "scale") in {(b.rule, b.param)
                                           for b in callback.guard.alarms[0].breaches}
    unhealthy_at_step_4(out, "weight-largest on scale")


def test_transformers_checkpoint_saved_after_a_flip_is_unhealthy_and_never_resumed(tmp_path):
    out, _ = hf_train(tmp_path, flip_at=4, when="end", save_steps=2)
    saves = unhealthy_at_step_4(out, "weights-changed on net.0.weight")
    choice = resume_choice(out)
    # renamed out of the Trainer's checkpoint-N pattern: its own resume skips it too
    from transformers.trainer_utils import get_last_checkpoint

    assert saves[4].path == "checkpoint-4.unhealthy" and not (out / "checkpoint-4").exists()
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    # the flipped weight stays past its learned bound, so the later saves are unhealthy too
    assert [r.step for r, _ in choice.skipped] == [8, 6, 4]
    assert all(why.startswith("unhealthy at save: ") for _, why in choice.skipped)


def test_lightning_checkpoint_saved_after_a_flip_is_unhealthy_and_never_resumed(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    from inspector.guard.lightning_callback import GuardCallback
    from inspector.ledger.lightning import LedgerCheckpointIO

    class Fault(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 4:  # after optimizer step 4, before its checkpoint
                flip_top_exponent(pl_module.net[0].weight)

    run = tmp_path / "ckpt"
    model = _tiny_class(pl)()
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, plugins=[LedgerCheckpointIO(run_dir=run)],
                         callbacks=[Fault(), GuardCallback(run, GuardConfig(console=False)),
                                    ModelCheckpoint(dirpath=run, every_n_train_steps=2,
                                                    save_top_k=-1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, DataLoader(Pairs(), batch_size=None, shuffle=False))
    saves = unhealthy_at_step_4(run, "weights-changed on net.0.weight")
    assert saves[4].path.endswith(".ckpt.unhealthy")


def test_lightning_names_a_learning_rate_negated_between_steps(tmp_path):
    def negate(module):  # the test's own fault: the sign bit of the group's Python float
        group = module.trainer.optimizers[0].param_groups[0]
        group["lr"] = -group["lr"]

    _, callback = lightning_fit(tmp_path, Pairs(), fault=negate)
    first = callback.guard.alarms[0]
    assert first.step == BAD
    assert [(b.rule, b.param) for b in first.breaches] == [("optimizer-setting",
                                                            "param_groups.0.lr")]
    assert first.breaches[0].value < 0


def test_transformers_checkpoint_saved_after_a_negated_learning_rate_is_unhealthy(tmp_path):
    def negate(model, optimizer):  # after optimizer and scheduler step 4, before its save
        inner = optimizer.optimizer if hasattr(optimizer, "optimizer") else optimizer
        group = inner.param_groups[0]
        group["lr"] = -group["lr"]

    out, callback = hf_train(tmp_path, flip_at=4, when="end", save_steps=2, fault=negate)
    saves = {s.step: s for s in read_ledger(out).saves}
    assert saves[4].outcome == SaveOutcome.UNHEALTHY
    assert "optimizer.param group 0: lr -0.005, out of the bounds" in saves[4].detail
    assert saves[4].path == "checkpoint-4.unhealthy"
    # the scheduler's next step sets the lr from its own base again: the later saves are sound
    assert [saves[s].outcome for s in (2, 6, 8)] == [SaveOutcome.VERIFIED] * 3
    assert resume_choice(out).record.step == 8
    # and the guard names it before the step it would steer
    first = callback.guard.alarms[0]
    assert (first.step, [(b.rule, b.param) for b in first.breaches]) == (
        4, [("optimizer-setting", "param_groups.0.lr")])


def test_lightning_names_a_running_variance_whose_sign_flipped(tmp_path):
    def with_norm(model):  # a BatchNorm beside the weights: its running statistics are buffers
        model.bn = torch.nn.BatchNorm1d(4)
        return model

    def negate(module):  # the test's own fault: the sign bit of one float32 element
        with torch.no_grad():
            module.bn.running_var.view(torch.int32)[1] ^= -(1 << 31)

    _, callback = lightning_fit(tmp_path, Pairs(), fault=negate, prepare=with_norm)
    first = callback.guard.alarms[0]
    assert first.step == BAD
    assert [(b.rule, b.param, b.value) for b in first.breaches] == [
        ("variance-negative", "bn.running_var", -1.0)]
