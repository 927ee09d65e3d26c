"""SAM (a two-step optimizer: davda54/sam's shape) under the guard: its first step moves every
weight outside an optimizer step, which the guard named `weights-changed` at every step (all
saves unhealthy) until the documented `intended(guard, model)` block tells it the change is
meant; a memory fault between steps is still named."""

from __future__ import annotations

import pytest
import torch
from guard_support import alarms, run, tiny_model, weights_reader  # noqa: F401
from torch import nn

from inspector.guard import Guard, GuardConfig, intended

pytestmark = pytest.mark.usefixtures("weights_reader")


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimisation as davda54/sam writes it; `step` is its second step."""

    def __init__(self, params, base_optimizer, rho=0.05, **kw):
        super().__init__(params, dict(rho=rho, **kw))
        self.base_optimizer = base_optimizer(self.param_groups, **kw)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self):
        norm = torch.norm(torch.stack([p.grad.norm(2) for g in self.param_groups
                                       for p in g["params"] if p.grad is not None]), 2)
        for g in self.param_groups:
            scale = g["rho"] / (norm + 1e-12)
            for p in g["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * scale)

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()


def sam_loss(guard, tell: bool):
    """The loss `run` backpropagates: SAM's first pass and ascent step first (inside
    `intended` when `tell`), then the loss at the perturbed weights."""
    def loss_of(model, data, step):
        x, y = data
        nn.functional.mse_loss(model(x), y).backward()
        opt = optimizers[id(model)]
        if tell:
            with intended(guard, model):
                opt.first_step()
        else:
            opt.first_step()
        opt.zero_grad(set_to_none=True)
        return nn.functional.mse_loss(model(x), y)
    return loss_of


optimizers: dict = {}


def train(run_dir, tell: bool, fault_at=None):
    model = tiny_model()
    opt = SAM(model.parameters(), torch.optim.SGD, lr=0.05, momentum=0.9)
    optimizers[id(model)] = opt
    guard = Guard(run_dir, GuardConfig(console=False))

    def fault(step):  # the test's own memory fault between two steps: one exponent bit
        if step == fault_at:
            with torch.no_grad():
                model[2].weight.view(-1).view(torch.int32)[3] ^= 1 << 27

    verdicts = run(guard, model, range(40), opt=opt, loss_of=sam_loss(guard, tell),
                   before_step=fault)
    guard.close()
    return verdicts


def test_sam_with_its_ascent_step_told_raises_nothing(tmp_path):
    verdicts = train(tmp_path, tell=True)
    assert [v.step for v in verdicts if v.alarm] == []
    assert verdicts[-1].loss < verdicts[0].loss


def test_sam_untold_is_named_at_every_step(tmp_path):
    """What the documented placement did before `intended`: every step alarmed."""
    verdicts = train(tmp_path, tell=False)
    assert len([v for v in verdicts if v.alarm]) >= 30
    assert {a["rule"] for a in alarms(tmp_path)} == {"weights-changed"}


def test_a_fault_before_the_ascent_step_is_still_named(tmp_path):
    verdicts = train(tmp_path, tell=True, fault_at=20)
    assert [v.step for v in verdicts if v.alarm][:1] == [20]
    assert ("weights-changed", "2.weight") in {(b.rule, b.param)
                                               for b in verdicts[20].alarm.breaches}
