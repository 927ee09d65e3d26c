"""The guard checks each optimizer's hyper-parameters before the step they would steer: a value
torch's own optimizers refuse (a negated learning rate climbs the loss while every number stays
finite) is `optimizer-setting`, named with its group and key, and its scene is never resumed.
Each fault is the test's own: one bit of the Python float in `param_groups`."""

from __future__ import annotations

import pytest
import torch
from guard_support import alarms, batch, flip_float, run, tiny_model
from torch import nn

from inspector.core.errors import CodedError
from inspector.guard.guard import Guard, GuardConfig, GuardHalt


def test_schedulers_driving_the_settings_raise_nothing(tmp_path):
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=40)
    guard = Guard(tmp_path, GuardConfig())

    def between(step):
        if step:
            scheduler.step()  # the learning rate and beta1 move every step, from ~0

    verdicts = run(guard, model, range(40), optimizer, between)
    assert not [v for v in verdicts if v.alarm]


def test_a_negated_learning_rate_is_named_before_the_step_it_would_steer(tmp_path, capfd):
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def fault(step):
        if step == 5:
            group = optimizer.param_groups[0]
            group["lr"] = flip_float(group["lr"], 63)

    verdicts = run(Guard(tmp_path, GuardConfig()), model, range(8), optimizer, fault)
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 5
    assert [(b.rule, b.param, b.value) for b in hit.alarm.breaches] == [
        ("optimizer-setting", "param_groups.0.lr", -0.05)]
    (first, *_) = alarms(tmp_path)
    assert (first["rule"], first["params"]) == ("optimizer-setting", ["param_groups.0.lr"])
    assert ("step 5: optimizer-setting: the optimizer's param_groups.0.lr is -0.05, which "
            "torch's optimizers refuse") in capfd.readouterr().err


def test_a_negated_beta_halts_and_its_scene_is_never_resumed(tmp_path):
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    guard = Guard(tmp_path, GuardConfig(action="halt"))

    def fault(step):
        if step == 3:
            b1, b2 = optimizer.param_groups[0]["betas"]
            optimizer.param_groups[0]["betas"] = (b1, flip_float(b2, 63))

    with pytest.raises(GuardHalt) as caught:
        run(guard, model, range(6), optimizer, fault)
    # the harm, under torch's own step: a negative second moment, whose square root is NaN
    finite = []
    for step in range(3, 13):
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        finite.append(all(bool(torch.isfinite(p).all()) for p in model.parameters()))
    assert not all(finite), finite
    with pytest.raises(CodedError, match="holds the optimizer the guard alarmed on "
                                         r"\(optimizer-setting on param_groups.0.betas\)"):
        Guard(tmp_path, GuardConfig()).resume(caught.value.scene, tiny_model(),
                                              torch.optim.Adam(tiny_model().parameters()))
