"""An optimizer's step counter that is not the steps the run took is never sealed (red team 57,
finding 4): Adam's `state[p]["step"]` decides its bias corrections, so a counter pushed from
12 to 12 * 2^16 resumes at several times the learning rate, and `load_state_dict` takes it.
The guard's optimizer hooks count the steps each parameter took (one per hooked step with a
gradient) and the ledger's save asks the guard's check, which holds the live counters and the
saved ones to that count. The faults are the test's own, after the guard's last step and
before the documented save, beside a clean same-seed twin; the runs that must stay sealed
skip steps, leave a parameter without a gradient, reload the optimizer mid-run and step two
same-shaped optimizers in turn.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from guard_support import batch, tiny_model
from torch import nn
from torch.utils.data import DataLoader

from inspector.cli import main
from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger

STEPS = 12


def flip_steps(optimizer: torch.optim.Optimizer, bit: int, only: int | None = None) -> None:
    """The test's own fault: one bit of each (or the `only`-th) float32 step counter."""
    for i, state in enumerate(optimizer.state.values()):
        if only is None or i == only:
            state["step"].view(torch.int32).bitwise_xor_(1 << bit)


def train(run, model, opt, guard, steps: int, first: int = 0, skip: tuple[int, ...] = ()):
    """The documented loop; at a step in `skip` the batch is NaN (the guard skips it)."""
    for step in range(first, first + steps):
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x * float("nan") if step in skip else x), y)
        loss.backward()
        if guard.step(loss, model, opt, step=step).take_step:
            opt.step()


def one_step_move(state: dict) -> list[float]:
    """How far one Adam step from the saved state moves each weight (the resume's harm)."""
    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    before = [p.detach().clone() for p in model.parameters()]
    nn.functional.mse_loss(model(batch(99)[0]), batch(99)[1]).backward()
    opt.step()
    return [float((p.detach() - b).norm()) for p, b in zip(model.parameters(), before,
                                                                 strict=True)]


@pytest.mark.parametrize(("bit", "only"), [(27, None), (24, 1)])
def test_a_flipped_step_counter_is_unhealthy_and_run_latest_skips_it(tmp_path, capsys, bit,
                                                                    only):
    """Bit 27 of every counter (12 -> 786432) and bit 24 of one (12 -> 3: a count below the
    steps taken is as wrong: the bias corrections of step 3)."""
    results = {}
    for faulty in (False, True):
        run = tmp_path / str(faulty)
        model = tiny_model()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        guard = Guard(run, GuardConfig(console=False))
        train(run, model, opt, guard, STEPS - 2)
        save({"model": model.state_dict(), "optimizer": opt.state_dict()}, run / "a.pt",
             step=STEPS - 2, run_dir=run)
        train(run, model, opt, guard, 2, first=STEPS - 2)
        if faulty:
            flip_steps(opt, bit, only)
        state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        record = save(state, run / "b.pt", step=STEPS, run_dir=run)
        results[faulty] = (record, one_step_move(state))
        guard.close()
    (clean, clean_move), (bad, bad_move) = results[False], results[True]
    assert clean.outcome == SaveOutcome.VERIFIED, clean.detail
    # the harm: the resumed step moves a weight by another amount
    assert max(abs(b - c) / c for b, c in zip(bad_move, clean_move, strict=True)) > 0.05
    assert bad.outcome == SaveOutcome.UNHEALTHY
    counter = "786432" if bit == 27 else "3"
    assert f": step {counter}, counted {STEPS}" in bad.detail
    assert "optimizer-step: the optimizer's step counters" in bad.detail
    capsys.readouterr()
    assert main(["run", "latest", str(tmp_path / "True")]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("a.pt")
    assert "skipped step 12 (b.pt.unhealthy): unhealthy at save: optimizer-step" in err


def test_a_counter_flipped_in_the_saved_copy_only_is_unhealthy(tmp_path):
    """The saved state dict's counters (a deep copy, as a staged save holds) against the count."""
    import copy

    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    guard = Guard(tmp_path, GuardConfig(console=False))
    train(tmp_path, model, opt, guard, STEPS)
    staged = copy.deepcopy(opt.state_dict())
    staged["state"][2]["step"].view(torch.int32).bitwise_xor_(1 << 27)
    record = save({"model": model.state_dict(), "optim": staged}, tmp_path / "s.pt",
                  step=STEPS, run_dir=tmp_path)
    assert record.outcome == SaveOutcome.UNHEALTHY
    assert "optimizer-step: saved optim step counters" in record.detail
    assert "2.weight: step 786432, counted 12" in record.detail
    assert "the optimizer's" not in record.detail  # the live counters are whole
    guard.close()


def test_skipped_steps_idle_parameters_reloads_and_two_optimizers_stay_sealed(tmp_path):
    """Counters that are right though they are not the step count: steps the guard skipped
    (every gradient dropped), a layer with no gradient for some steps, an optimizer reloaded
    from its own state dict mid-run, and two same-shaped Adams stepped in turn."""
    model, other = tiny_model(), tiny_model(1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    opt2 = torch.optim.Adam(other.parameters(), lr=0.01)
    guard = Guard(tmp_path, GuardConfig(console=False))
    train(tmp_path, model, opt, guard, 6, skip=(2, 4))
    for step in range(6, 10):  # the last layer idle: no gradient, Adam leaves its counter
        opt.zero_grad(set_to_none=True)
        model[2].requires_grad_(False)
        loss = nn.functional.mse_loss(model(batch(step)[0]), batch(step)[1])
        loss.backward()
        if guard.step(loss, model, opt, step=step).take_step:
            opt.step()
        model[2].requires_grad_(True)
        train(tmp_path, other, opt2, guard, 1, first=step)
    opt.load_state_dict(opt.state_dict())
    train(tmp_path, model, opt, guard, 3, first=10)
    counters = sorted({float(s["step"]) for s in opt.state.values()})
    assert counters == [7.0, 11.0]  # 13 steps, 2 skipped, 4 idle for the last layer
    record = save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                   "other": other.state_dict(), "optimizer2": opt2.state_dict()},
                  tmp_path / "ok.pt", step=13, run_dir=tmp_path)
    assert record.outcome == SaveOutcome.VERIFIED, record.detail
    guard.close()


def test_lightning_checkpoint_with_a_flipped_counter_is_unhealthy(tmp_path):
    """A real `Trainer.fit` on the CPU with the guard's callback and the ledger's CheckpointIO;
    the fault: the counters flipped in `on_save_checkpoint` of step 4's checkpoint."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    from inspector.guard.lightning_callback import GuardCallback
    from inspector.ledger.lightning import LedgerCheckpointIO

    class Module(pl.LightningModule):
        def __init__(self, faulty: bool) -> None:
            super().__init__()
            self.net, self.faulty = tiny_model(), faulty

        def training_step(self, data, index):
            return nn.functional.mse_loss(self.net(data[0]), data[1])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

        def on_save_checkpoint(self, checkpoint):
            if self.faulty and self.trainer.global_step == 4:
                for state in checkpoint["optimizer_states"][0]["state"].values():
                    state["step"].view(torch.int32).bitwise_xor_(1 << 27)

    saves = {}
    for faulty in (False, True):
        run = tmp_path / str(faulty)
        trainer = pl.Trainer(max_steps=6, accelerator="cpu", logger=False,
                             enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=run, plugins=[LedgerCheckpointIO(run_dir=run)],
                             callbacks=[GuardCallback(run, GuardConfig(console=False)),
                                        ModelCheckpoint(dirpath=run, every_n_train_steps=2,
                                                        save_top_k=-1)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(Module(faulty), DataLoader([batch(i) for i in range(6)],
                                                   batch_size=None))
        saves[faulty] = {s.step: s for s in read_ledger(run).saves}
    assert {s.outcome for s in saves[False].values()} == {SaveOutcome.VERIFIED}
    assert saves[True][2].outcome == SaveOutcome.VERIFIED
    assert saves[True][4].outcome == SaveOutcome.UNHEALTHY
    assert "step 262144, counted 4" in saves[True][4].detail
