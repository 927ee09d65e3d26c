"""The guard's Lightning callback under manual optimization and under gradient accumulation,
in real `Trainer.fit` runs on the CPU (red team 56, findings 4 and 6). Each fault (a batch whose
inputs are scaled by 1e4) is the test's own, in `training_step`, beside a clean same-seed twin.

- Manual optimization: `training_step` is the user's whole step (it steps the optimizers), so
  the alarm's re-run never replays it (it stepped the optimizer on the bad batch, then crashed
  `fit` with a second backward); one `manual_backward` feeding two optimizers is checked once.
- `accumulate_grad_batches` N: the step's loss is the N micro-batches' (each divided by N, as
  Lightning back-propagates it) and the re-run replays all N, each from its RNG state, so a
  reproducible bad batch is `reproducible` (it was `transient`: the last micro-batch alone,
  undivided) and the optimizer steps the same gradient as without a re-run.
"""

from __future__ import annotations

import warnings

import torch
from guard_support import alarms
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from inspector.guard.guard import GuardConfig

BAD = 5  # the optimizer step whose batch goes wrong


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))


def fit(run_dir, module, accumulate: int = 1, steps: int = 8, config: GuardConfig | None = None):
    """`module` trained `steps` optimizer steps with the guard's callback; the callback."""
    import lightning.pytorch as pl

    from inspector.guard.lightning_callback import GuardCallback

    callback = GuardCallback(run_dir, config or GuardConfig(warmup=3, console=False))
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=run_dir,
                         accumulate_grad_batches=accumulate, callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(module, DataLoader(data(), batch_size=8, shuffle=False))
    return callback


def manual_module(bad: bool, optimizers: int = 1, raw_second: bool = False):
    """Manual optimization, the documented loop: zero_grad, forward, `manual_backward`, then
    each optimizer's step (two: the body's SGD and the head's Adam, one backward for both);
    with `raw_second`, the head's gradients come from a `loss.backward()` Lightning never sees.
    It counts its `training_step` calls and its optimizers' real steps."""
    import lightning.pytorch as pl

    class Manual(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.net = net()
            self.calls = 0
            self.stepped = 0

        def training_step(self, batch, batch_idx):
            self.calls += 1
            x, y = batch
            if bad and self.global_step == BAD * optimizers:
                x = x * 1e4
            opts = self.optimizers()
            opts = opts if isinstance(opts, list) else [opts]
            for opt in opts:
                opt.zero_grad()
            loss = nn.functional.mse_loss(self.net(x), y)
            self.manual_backward(loss, retain_graph=raw_second)
            opts[0].step()
            if raw_second:
                opts[1].zero_grad()
                loss.backward()
            for opt in opts[1:]:
                opt.step()

        def configure_optimizers(self):
            if optimizers == 1:
                opts = [torch.optim.SGD(self.parameters(), lr=0.01)]
            else:
                opts = [torch.optim.SGD(self.net[0].parameters(), lr=0.01),
                        torch.optim.Adam(self.net[3].parameters(), lr=1e-3)]
            for opt in opts:
                opt.register_step_post_hook(lambda *_: setattr(self, "stepped",
                                                               self.stepped + 1))
            return opts if optimizers > 1 else opts[0]

    return Manual()


def test_manual_optimization_names_a_bad_batch_and_never_replays_the_users_step(tmp_path):
    clean = manual_module(bad=False)
    fit(tmp_path / "clean", clean)
    assert alarms(tmp_path / "clean") == []
    module = manual_module(bad=True)
    fit(tmp_path / "bad", module, config=GuardConfig(warmup=3, console=False, action="skip"))
    # training went on to the end: one training_step and one optimizer step per batch
    assert module.calls == clean.calls == 8 and module.stepped == clean.stepped == 8
    [record] = [a for a in alarms(tmp_path / "bad") if a["step"] == BAD]
    assert record["action"] == "skip" and record["attribution"] is None
    assert "rerun" not in record
    # skipped: the bad batch's update never reached the weights, which stay near the twin's
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_one_manual_backward_feeding_two_optimizers_is_checked_once(tmp_path):
    module = manual_module(bad=False, optimizers=2)
    callback = fit(tmp_path, module)
    assert alarms(tmp_path) == []  # no param-orphaned for the head's Adam, not yet stepped
    # max_steps counts each optimizer's step under manual optimization: 4 batches, 8 steps
    assert module.calls == 4 and module.stepped == 8 and callback._unchecked.health() == []


def test_a_second_optimizer_fed_by_a_backward_lightning_never_saw_is_unchecked(tmp_path):
    module = manual_module(bad=False, optimizers=2, raw_second=True)
    callback = fit(tmp_path, module)
    [line] = callback._unchecked.health()
    assert "never checked" in line


def accumulating_module(bad: bool):
    """Automatic optimization; with `bad`, the inputs of the third micro-batch of optimizer
    step BAD are scaled by 1e4."""
    import lightning.pytorch as pl

    class Accumulating(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net()

        def training_step(self, batch, batch_idx):
            x, y = batch
            if bad and batch_idx == 4 * BAD + 2:
                x = x * 1e4
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Accumulating()


def test_under_accumulation_a_bad_batch_is_reproducible_and_the_step_is_unchanged(tmp_path):
    clean = accumulating_module(bad=False)
    fit(tmp_path / "clean", clean, accumulate=4)
    assert alarms(tmp_path / "clean") == []
    module = accumulating_module(bad=True)
    fit(tmp_path / "bad", module, accumulate=4)
    alarmed = [a for a in alarms(tmp_path / "bad") if a["step"] == BAD]
    assert alarmed and all(a["attribution"] == "reproducible" for a in alarmed)
    record = alarmed[0]
    [loss] = {b["value"] for b in [record, *record["also"]] if b["rule"].startswith("loss")}
    assert record["rerun"]["loss"] == loss
    # the twin without a re-run steps the same gradients: the replay left the step as it was
    twin = accumulating_module(bad=True)
    fit(tmp_path / "norerun", twin, accumulate=4,
        config=GuardConfig(warmup=3, console=False, rerun=False))
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), twin.parameters(),
                                                  strict=True))
