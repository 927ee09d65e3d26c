"""BatchNorm's running variance shrunk by a cleared exponent bit (x 2^-64: positive, finite)
between the last step and a save: `variance-shrunk` names it and the save is unhealthy, where
eval on the saved model is ruined; ordinary BatchNorm training (eval toggles, momentum None,
no running statistics, a channel that goes dead) raises nothing."""

from __future__ import annotations

import pytest
import torch
from guard_support import run
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save


def bn_model(momentum=0.1, track=True, dead=False) -> nn.Module:
    torch.manual_seed(0)
    first = nn.Linear(4, 8)
    if dead:  # channel 3 of the norm layer sees a constant: its variance decays to 0
        with torch.no_grad():
            first.weight[3].zero_()
            first.bias[3] = 0.5
        first.weight.register_hook(lambda g: g.index_fill(0, torch.tensor([3]), 0.0))
    return nn.Sequential(first, nn.BatchNorm1d(8, momentum=momentum,
                                               track_running_stats=track),
                         nn.Tanh(), nn.Linear(8, 1))


def data(step):
    g = torch.Generator().manual_seed(2000 + step)
    x = torch.randn(32, 4, generator=g) + 3.0
    return x, x.sum(dim=1, keepdim=True)


def eval_loss(model) -> float:
    model.eval()
    with torch.no_grad():
        x, y = data(99_999)
        out = nn.functional.mse_loss(model(x), y).item()
    model.train()
    return out


def normalised(model) -> float:
    """The largest |output| of the norm layer in eval mode, on held-out inputs."""
    model.eval()
    with torch.no_grad():
        out = model[1](model[0](data(99_999)[0])).abs().max().item()
    model.train()
    return out


def train(run_dir, shrink: bool = False, flip_mean: bool = False, forward: bool = False):
    """60 steps with a save after the last; before the save, the test's own memory fault
    (`shrink`: an exponent bit of a running variance cleared, x 2^-64; `flip_mean`: the sign
    of the running mean farthest from 0) or a training-mode forward (`forward`)."""
    model = bn_model()
    guard = Guard(run_dir, GuardConfig(console=False))
    saved = []

    def at_end(step, opt):
        if step == 59:
            if shrink:
                var = model[1].running_var.view(torch.int32)
                i = next(j for j in range(8) if int(var[j]) >> 29 & 1)
                var[i] ^= 1 << 29
            if flip_mean:
                mean = model[1].running_mean
                mean.view(torch.int32)[int(mean.abs().argmax())] ^= -(1 << 31)
            if forward:
                model(data(7)[0])
            saved.append(save(model.state_dict(), run_dir / "ckpt" / "s.pt", step=step,
                              run_dir=run_dir))

    run(guard, model, range(60), opt=torch.optim.Adam(model.parameters(), lr=1e-2), data=data,
        after_step=at_end)
    guard.close()
    return model, saved[0]


def test_a_shrunk_running_variance_is_named_before_the_save(tmp_path):
    bad, bad_save = train(tmp_path / "bad", shrink=True)
    good, good_save = train(tmp_path / "good", shrink=False)
    # the harm: in eval mode the channel is divided by sqrt(eps), not by its deviation
    assert normalised(bad) > 30 * normalised(good)
    assert bool((bad[1].running_var > 0).all()) and bool(bad[1].running_var.isfinite().all())
    assert good_save.outcome == SaveOutcome.VERIFIED
    assert bad_save.outcome == SaveOutcome.UNHEALTHY
    assert "variance-shrunk on 1.running_var" in bad_save.detail


@pytest.mark.parametrize("kind", ["momentum None", "no running stats", "dead channel",
                                  "eval toggles"])
def test_ordinary_batchnorm_training_raises_nothing(tmp_path, kind):
    model = bn_model(momentum=None if kind == "momentum None" else 0.1,
                     track=kind != "no running stats", dead=kind == "dead channel")
    guard = Guard(tmp_path, GuardConfig(console=False))

    def toggle(step):
        if kind == "eval toggles" and step % 5 == 0:
            eval_loss(model)

    verdicts = run(guard, model, range(150), opt=torch.optim.Adam(model.parameters(), lr=1e-2),
                   data=data, before_step=toggle)
    assert [(v.step, v.alarm.breaches[0].rule) for v in verdicts if v.alarm] == []
    if kind == "dead channel":
        assert float(model[1].running_var[3]) < 1e-6  # it did decay toward 0


def test_a_running_mean_changed_with_no_forward_is_named_before_the_save(tmp_path):
    bad, bad_save = train(tmp_path / "bad", flip_mean=True)
    good, good_save = train(tmp_path / "good")
    x = data(99_999)[0]
    with torch.no_grad():  # the harm: the channel shifted by twice its mean in eval mode
        bad.eval(), good.eval()
        shift = (bad[1](bad[0](x)) - good[1](good[0](x))).abs().max().item()
    assert shift > 1.0
    assert good_save.outcome == SaveOutcome.VERIFIED
    assert bad_save.outcome == SaveOutcome.UNHEALTHY
    assert "weights-changed on 1.running_mean" in bad_save.detail


def test_a_training_mode_forward_before_the_save_is_no_fault(tmp_path):
    """The statistics moved, and so did the layer's count: a forward wrote them."""
    _, record = train(tmp_path, forward=True)
    assert record.outcome == SaveOutcome.VERIFIED
