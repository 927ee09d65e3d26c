"""Healthy recipes the weight rules must not call corrupt: a task head stepped every third
step, a layer unfrozen mid-run, a schedule's warm restart. An alarm here is false, and costs
the saves after it (`docs/guard.md`)."""

from __future__ import annotations

import torch
from torch import nn

from inspector.guard.guard import Guard, GuardConfig


class MultiHead(nn.Module):
    """A shared body and three task heads, one trained per step (round robin)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(32, 4) for _ in range(3)])

    def forward(self, x, task):
        return self.heads[task](self.body(x))


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3000 + step)
    x = torch.randn(32, 8, generator=g)
    return x, ((x[:, :3].sum(1) > 0).long() + 2 * (x[:, 4] > 0).long())


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def alarms(run_dir, model, opt, steps, forward, before=None, sched=None):
    """The documented plain loop; the (step, rule, tensor) of every alarm."""
    guard = Guard(run_dir, GuardConfig(console=False))
    out = []
    for step in range(steps):
        if before is not None:
            before(step)
        opt.zero_grad(set_to_none=True)
        x, y = data(step)
        loss = nn.functional.cross_entropy(forward(step, x), y)
        loss.backward()
        verdict = guard.step(loss, model, opt, step=step)
        if verdict.take_step:
            opt.step()
        if sched is not None:
            sched.step()
        if verdict.alarm:
            out += [(step, b.rule, b.param) for b in verdict.alarm.breaches]
    guard.close()
    return out


def test_round_robin_task_heads_raise_no_update_size_alarm(tmp_path):
    model = MultiHead()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    assert alarms(tmp_path, model, opt, 60, lambda s, x: model(x, s % 3)) == []


def test_a_layer_unfrozen_mid_run_raises_no_update_size_alarm(tmp_path):
    model = mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def unfreeze(step):
        if step == 40:
            for p in model[0].parameters():
                p.requires_grad_(True)

    assert alarms(tmp_path, model, opt, 60, lambda s, x: model(x), before=unfreeze) == []


def test_warm_restarts_raise_no_update_size_alarm(tmp_path):
    # the cycle's tail runs at a rate near 0, so its steps are tiny; the restart multiplies
    # the rate (and the steps) by thousands: measured per unit of rate, nothing jumped
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64),
                          nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=100)
    assert alarms(tmp_path, model, opt, 130, lambda s, x: model(x), sched=sched) == []
