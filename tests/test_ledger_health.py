"""The ledger never seals bad weights: with the guard and the ledger used as the docs say, a
weight the test corrupts between steps (its own bit flip) makes the next save unhealthy, kept
as evidence beside its target; `run latest` and `Guard.resume` land on good weights and say
what they passed over."""

from __future__ import annotations

import math

import pytest
import torch
from guard_support import batch, tiny_model, weights_reader  # noqa: F401
from torch import nn

from inspector.cli import main
from inspector.core.errors import CodedError
from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig, GuardHalt
from inspector.ledger import save, save_folder
from inspector.run.checkpoints import read_ledger, resume_choice


def flip(tensor: torch.Tensor, index: int, bit: int) -> float:
    """Flip one bit of one float32 element in place (the test's own fault); the new value."""
    with torch.no_grad():
        tensor.detach().view(-1).view(torch.int32)[index] ^= 1 << bit
    return float(tensor.detach().view(-1)[index])


def train_and_save(run, steps, fault_at=None, saves=(), action="warn"):
    """The documented loop with a ledger save after chosen steps; the fault lands between the
    optimizer step of `fault_at - 1` and the save that follows it."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(run, GuardConfig(action=action))
    records = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if guard.step(loss, model, opt, step=step).take_step:
            opt.step()
        if step == fault_at:
            flip(model[0].weight, 3, 30)  # exponent bit: about x 2^128
        if step in saves:
            records.append(save(model.state_dict(), run / f"step-{step}.pt", step=step))
    return guard, model, records


@pytest.mark.usefixtures("weights_reader")
def test_a_weight_corrupted_before_a_save_is_recorded_unhealthy_and_never_resumed(tmp_path,
                                                                                 capsys):
    guard, _, (good, bad) = train_and_save(tmp_path, 12, fault_at=9, saves=(5, 9))
    assert good.outcome == SaveOutcome.VERIFIED
    assert bad.outcome == SaveOutcome.UNHEALTHY and not bad.verified
    assert "weights-changed on 0.weight" in bad.detail
    assert bad.path == "step-9.pt.unhealthy" and (tmp_path / bad.path).is_file()
    assert not (tmp_path / "step-9.pt").exists()
    assert "not sealed" in capsys.readouterr().err
    choice = resume_choice(tmp_path)
    assert choice.record.path == "step-5.pt"
    assert [(r.path, why.split(":")[0]) for r, why in choice.skipped] == [
        ("step-9.pt.unhealthy", "unhealthy at save")]
    assert main(["run", "latest", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("step-5.pt")
    assert "skipped step 9 (step-9.pt.unhealthy): unhealthy at save: " in err
    assert "weights-changed on 0.weight" in err
    guard.close()


@pytest.mark.usefixtures("weights_reader")
def test_the_guard_alarms_on_the_same_fault_at_the_next_step(tmp_path):
    guard, _, _ = train_and_save(tmp_path, 11, fault_at=9, saves=())
    assert [(a.step, a.breaches[0].rule, a.breaches[0].param) for a in guard.alarms] == [
        (10, "weights-changed", "0.weight")]
    guard.close()


def test_nan_in_a_state_is_unhealthy_without_a_guard(tmp_path):
    state = {"w": torch.ones(4), "mask": torch.tensor([0.0, -math.inf])}
    assert save(state, tmp_path / "ok.pt").outcome == SaveOutcome.VERIFIED  # -inf masks are fine
    state["w"][2] = math.nan
    record = save(state, tmp_path / "ok.pt")
    assert record.outcome == SaveOutcome.UNHEALTHY and record.detail.endswith("NaN in w")
    assert resume_choice(tmp_path).record.path == "ok.pt"
    assert torch.load(tmp_path / "ok.pt", weights_only=True)["w"].isfinite().all()


def test_a_folder_save_of_bad_weights_is_kept_as_evidence(tmp_path):
    model = tiny_model()
    with torch.no_grad():
        model[2].bias[0] = math.nan
    record = save_folder(lambda d: torch.save(model.state_dict(), d / "model.pt"),
                         tmp_path / "checkpoint-3", expected=model.state_dict(), step=3)
    assert record.outcome == SaveOutcome.UNHEALTHY
    assert record.path == "checkpoint-3.unhealthy"
    assert [f.path for f in record.files] == ["checkpoint-3.unhealthy/model.pt"]
    assert (tmp_path / "checkpoint-3.unhealthy" / "model.pt").is_file()
    assert read_ledger(tmp_path).saves[-1].outcome == SaveOutcome.UNHEALTHY
    assert resume_choice(tmp_path).record is None


def test_guard_resume_refuses_a_scene_whose_weights_were_the_fault(tmp_path):
    with pytest.raises(GuardHalt) as halted:
        train_and_save(tmp_path, 12, fault_at=6, action="halt")
    model = tiny_model(seed=5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    guard = Guard(tmp_path, GuardConfig())
    with pytest.raises(CodedError) as refused:
        guard.resume(halted.value.scene, model)
    assert refused.value.code == "scene-weights-corrupt"
    assert "0.weight" in refused.value.message and "run latest" in refused.value.message
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    guard.close()


def test_a_negated_running_variance_is_unhealthy_and_is_nan_in_eval(tmp_path):
    """A batch norm's running variance is a mean of variances: a flipped sign passes the guard
    (it reads buffers for size) and training (which normalises by the batch's own), and makes
    every eval output of that feature NaN."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        model(batch(step)[0]).pow(2).mean().backward()
        optimizer.step()
    assert save(model.state_dict(), tmp_path / "good.pt", step=3).outcome == SaveOutcome.VERIFIED
    with torch.no_grad():
        model[1].running_var[1] *= -1
    model.eval()
    out = model(batch(9)[0])
    assert bool(torch.isnan(out[:, 1]).all()) and bool(torch.isfinite(out[:, [0, 2]]).all())
    record = save(model.state_dict(), tmp_path / "bad.pt", step=4)
    assert record.outcome == SaveOutcome.UNHEALTHY
    assert "1.running_var negative in 1 value (a running variance never is)" in record.detail
    assert resume_choice(tmp_path).record.step == 3


class Masked(nn.Module):
    """The tiny MLP with a -inf mask buffer, which a model and its EMA both hold (meant)."""

    def __init__(self):
        super().__init__()
        self.net = tiny_model()
        self.register_buffer("mask", torch.tensor([0.0, -math.inf]))

    def forward(self, x):
        return self.net(x) + self.mask.exp().sum()


OPTIMIZER_STATE_FAULTS = {
    "sgd": (lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9), "momentum_buffer"),
    "rmsprop": (lambda ps: torch.optim.RMSprop(ps, lr=1e-3, momentum=0.9), "momentum_buffer"),
}


def train_with_ema(run, opt_name, fault=None, steps=12):
    """The documented loop under a guard, an EMA of the weights kept beside the model and
    saved with it every 4 steps; `fault(model, optimizer, ema)` (the test's own) runs right
    before the step-8 save. The model, its optimizer, the EMA, the saves by step."""
    model = Masked()
    factory, _ = OPTIMIZER_STATE_FAULTS[opt_name]
    opt = factory(model.parameters())
    guard = Guard(run, GuardConfig(console=False))
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if guard.step(loss, model, opt, step=step).take_step:
            opt.step()
        with torch.no_grad():
            for k, v in model.state_dict().items():
                if k != "mask":
                    ema[k].mul_(0.9).add_(v, alpha=0.1)
        if step == 8 and fault is not None:
            fault(model, opt, ema)
        if step % 4 == 0:
            save({"model": model.state_dict(), "optimizer": opt.state_dict(), "ema": ema},
                 run / f"step-{step}.pt", step=step, run_dir=run)
    guard.close()
    return model, opt, ema, {s.step: s for s in read_ledger(run).saves}


def resumed_step(run, path, opt_name) -> torch.Tensor:
    """A resume from `path` (fresh model and optimizer, as the script builds them) and one
    step: the first weight after it."""
    state = torch.load(run / path, weights_only=True)
    model = Masked()
    model.load_state_dict(state["model"])
    opt = OPTIMIZER_STATE_FAULTS[opt_name][0](model.parameters())
    opt.load_state_dict(state["optimizer"])
    x, y = batch(99)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    return model.net[0].weight.detach()


@pytest.mark.parametrize("opt_name", OPTIMIZER_STATE_FAULTS)
def test_an_inf_in_a_momentum_no_family_bounds_is_unhealthy(tmp_path, opt_name):
    key = OPTIMIZER_STATE_FAULTS[opt_name][1]

    def fault(model, opt, ema):
        opt.state[model.net[0].weight][key].view(-1)[3] = math.inf

    *_, clean_saves = train_with_ema(tmp_path / "clean", opt_name)
    *_, saves = train_with_ema(tmp_path / "hurt", opt_name, fault)
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    # the harm: a resume from it makes the weight non-finite at its first step
    assert torch.isfinite(resumed_step(tmp_path / "clean", "step-8.pt", opt_name)).all()
    assert not torch.isfinite(
        resumed_step(tmp_path / "hurt", saves[8].path, opt_name)).all()
    assert saves[8].outcome == SaveOutcome.UNHEALTHY
    assert f"Inf in optimizer.state.0.{key}" in saves[8].detail
    assert resume_choice(tmp_path / "hurt").record.step == 4


@pytest.mark.parametrize("factor", [math.inf, 2.0 ** 16])
def test_an_ema_copy_corrupted_beside_its_model_is_unhealthy(tmp_path, factor):
    def fault(model, opt, ema):
        weight = ema["net.2.weight"].view(-1)  # the output layer: no tanh saturates it
        weight[3] = factor if math.isinf(factor) else weight[3] * factor  # the test's own

    _, _, clean_ema, clean_saves = train_with_ema(tmp_path / "clean", "sgd")
    _, _, ema, saves = train_with_ema(tmp_path / "hurt", "sgd", fault)
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    # the harm: the EMA model evaluates far worse than its clean twin's
    losses = []
    for weights in (clean_ema, ema):
        model = Masked()
        model.load_state_dict(weights)
        x, y = batch(99)
        with torch.no_grad():
            losses.append(float(nn.functional.mse_loss(model(x), y)))
    assert not losses[1] < 100 * losses[0]  # NaN or Inf included
    assert saves[8].outcome == SaveOutcome.UNHEALTHY
    assert "ema.net.2.weight largest |value|" in saves[8].detail
    assert "its copy model.net.2.weight" in saves[8].detail
    assert resume_choice(tmp_path / "hurt").record.step == 4
