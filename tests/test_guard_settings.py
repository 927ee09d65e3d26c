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
    assert ("step 5: optimizer-setting: the optimizer's param_groups.0.lr is -0.05, out of the "
            "bounds its optimizer admits") in capfd.readouterr().err


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


def _steps_with(run_dir, scheduler_for, steps):
    """The documented loop under a scheduler built by `scheduler_for(optimizer)`; the verdicts
    and the learning rates it set."""
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = scheduler_for(optimizer)
    rates = []

    def between(step):
        if step:
            scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])

    return run(Guard(run_dir, GuardConfig()), model, range(steps), optimizer, between), rates


@pytest.mark.parametrize("name", ["one-cycle-20", "cosine-to-zero-and-back", "linear-to-zero",
                                  "step-x0.01", "hf-cosine", "hf-polynomial-1e-7"])
def test_schedules_that_fall_fast_or_end_at_zero_raise_nothing(tmp_path, name):
    from transformers import (
        get_cosine_schedule_with_warmup,
        get_polynomial_decay_schedule_with_warmup,
    )
    sched = torch.optim.lr_scheduler
    build = {
        "one-cycle-20": lambda o: sched.OneCycleLR(o, max_lr=1e-2, total_steps=21),
        "cosine-to-zero-and-back": lambda o: sched.CosineAnnealingLR(o, T_max=15),
        "linear-to-zero": lambda o: sched.LambdaLR(o, lambda s: max(0.0, 1 - s / 20)),
        "step-x0.01": lambda o: sched.MultiStepLR(o, [10, 20], gamma=0.01),
        "hf-cosine": lambda o: get_cosine_schedule_with_warmup(o, 5, 20),
        "hf-polynomial-1e-7": lambda o: get_polynomial_decay_schedule_with_warmup(
            o, 2, 20, lr_end=1e-9),
    }[name]
    verdicts, rates = _steps_with(tmp_path, build, steps=20)
    assert not [v for v in verdicts if v.alarm]
    assert min(rates) <= max(rates) / 10  # each falls at least 10x in these 20 steps


def test_a_learning_rate_collapsed_by_an_exponent_flip_is_named_and_never_sealed(
        tmp_path, capfd):
    from inspector.core.vocabulary import SaveOutcome
    from inspector.ledger import save
    from inspector.run.checkpoints import read_ledger, resume_choice

    def train(fault_step):
        model = tiny_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        guard = Guard(tmp_path / str(fault_step), GuardConfig())
        kept = {}

        def between(step):
            if step == fault_step:
                group = optimizer.param_groups[0]
                group["lr"] = flip_float(group["lr"], 57)  # exponent bit 5: / 2^32
                kept["lr"] = group["lr"]
                kept["weights"] = [p.detach().clone() for p in model.parameters()]
            if step in (4, 8):
                save(model.state_dict(), guard.run_dir / f"step-{step}.pt", step=step)

        verdicts = run(guard, model, range(60), optimizer, between)
        kept["optimizer"] = optimizer  # alive, as in a training script (the guard holds it weakly)
        return guard, model, verdicts, kept

    clean_guard, _, clean, _ = train(fault_step=-1)
    guard, model, hurt, kept = train(fault_step=6)
    # the harm, under torch's own Adam: every value finite and in range, and the run stalls
    assert 0 < kept["lr"] < 1e-12
    moved = max(float((p - q).abs().max())
                for p, q in zip(model.parameters(), kept["weights"], strict=True))
    assert moved < 1e-9
    assert hurt[-1].loss > 1.3 * clean[-1].loss
    assert not [v for v in clean if v.alarm] and clean_guard.health() == []
    hit = next(v for v in hurt if v.alarm)
    assert hit.step == 6
    assert [(b.rule, b.param) for b in hit.alarm.breaches] == [
        ("optimizer-setting", "param_groups.0.lr")]
    assert "param_groups.0.lr fell to 6.985e-13 in one step, from 0.003" in capfd.readouterr().err
    assert any("param_groups.0.lr" in p for p in guard.health())
    saves = {s.step: s for s in read_ledger(guard.run_dir).saves}
    assert saves[4].outcome == SaveOutcome.VERIFIED
    assert saves[8].outcome == SaveOutcome.UNHEALTHY
    assert "fell to 6.985e-13 in one step, from 0.003" in saves[8].detail
    assert resume_choice(guard.run_dir).record.step == 4


def _saved_after(run_dir, fault, steps=40):
    """The plain loop with Adam at 1e-2, `fault(optimizer, step)` before each step and a
    ledger save right after the fault at steps 4 and 8; the verdicts, the saves, the model
    and the optimizer (kept alive, as a training script does)."""
    from inspector.ledger import save
    from inspector.run.checkpoints import read_ledger

    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def between(step):
        fault(optimizer, step)
        if step in (4, 8):
            save(model.state_dict(), run_dir / f"step-{step}.pt", step=step)

    verdicts = run(Guard(run_dir, GuardConfig()), model, range(steps), optimizer, between)
    return verdicts, {s.step: s for s in read_ledger(run_dir).saves}, model, optimizer


@pytest.mark.parametrize("key", ["eps", "maximize"])
def test_a_setting_no_schedule_writes_is_named_when_it_changes(tmp_path, key):
    from inspector.core.vocabulary import SaveOutcome

    def fault(optimizer, step):
        group = optimizer.param_groups[0]
        if step == 6:
            group[key] = flip_float(group["eps"], 62) if key == "eps" else True

    _, _, clean, _ = _saved_after(tmp_path / "clean", lambda o, s: None)
    verdicts, saves, model, _ = _saved_after(tmp_path / key, fault)
    # the harm, under torch's own Adam: eps 1.8e300 freezes the weights, maximize climbs
    x, y = batch(999)
    loss = float(nn.functional.mse_loss(model(x), y))
    assert loss > 2 * float(nn.functional.mse_loss(clean(x), y))
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 6
    assert [(b.rule, b.param) for b in hit.alarm.breaches] == [
        ("optimizer-setting", f"param_groups.0.{key}")]
    assert saves[4].outcome == SaveOutcome.VERIFIED
    assert saves[8].outcome == SaveOutcome.UNHEALTHY
    said = "changed from" if key == "maximize" else "is 1.798e+300, out of the bounds"
    assert f"param_groups.0.{key} {said}" in saves[8].detail


def test_a_collapse_after_the_guard_read_the_settings_is_not_sealed(tmp_path):
    from inspector.core.vocabulary import SaveOutcome

    def fault(optimizer, step):
        if step == 8:  # after guard.step of step 7, before the save
            group = optimizer.param_groups[0]
            group["lr"] = flip_float(group["lr"], 57)

    verdicts, saves, _, _ = _saved_after(tmp_path, fault, steps=9)
    assert saves[4].outcome == SaveOutcome.VERIFIED
    assert saves[8].outcome == SaveOutcome.UNHEALTHY
    assert "param_groups.0.lr fell to" in saves[8].detail
    assert verdicts[8].alarm is not None  # and the step itself names it


def test_settings_a_schedule_writes_or_that_never_change_raise_nothing(tmp_path):
    def fault(optimizer, step):
        group = optimizer.param_groups[0]
        group["weight_decay"] = 0.01 * step  # a weight-decay schedule (DINO's kind)
        group["betas"] = (0.9 - 0.001 * step, 0.999)

    verdicts, saves, _, _ = _saved_after(tmp_path, fault, steps=20)
    assert not [v for v in verdicts if v.alarm]
    assert all(s.verified for s in saves.values())


def test_a_flipped_beta2_is_named_and_the_moment_it_hides_is_not_sealed(tmp_path):
    from inspector.core.vocabulary import SaveOutcome

    index = 3

    def fault(optimizer, step, moment=True):
        group = optimizer.param_groups[0]
        if step == 8:  # after guard.step of step 7, before the save: torch admits 0.24975
            b1, b2 = group["betas"]
            group["betas"] = (b1, flip_float(b2, 53))
            if moment:  # and one first moment x65536, finite: no bound holds it at these betas
                state = optimizer.state[optimizer.param_groups[0]["params"][0]]
                state["exp_avg"].view(-1)[index] *= 2.0 ** 16

    _, clean_saves, clean, _ = _saved_after(tmp_path / "clean", lambda o, s: None, steps=10)
    _, _, beta_only, _ = _saved_after(tmp_path / "beta2", lambda o, s: fault(o, s, False),
                                      steps=10)
    verdicts, saves, model, _ = _saved_after(tmp_path / "both", fault, steps=10)
    # the harm: the element the moment steers moves ~x65536 further than in either twin
    moved = abs(float(model[0].weight.view(-1)[index] - clean[0].weight.view(-1)[index]))
    alone = abs(float(beta_only[0].weight.view(-1)[index] - clean[0].weight.view(-1)[index]))
    assert moved > 100 * max(alone, 1e-6)
    assert all(s.verified for s in clean_saves.values())
    assert saves[4].outcome == SaveOutcome.VERIFIED
    assert saves[8].outcome == SaveOutcome.UNHEALTHY
    assert "param_groups.0.betas.1 changed from 0.999 to 0.2497" in saves[8].detail
    assert [(b.rule, b.param) for b in verdicts[8].alarm.breaches] == [
        ("optimizer-setting", "param_groups.0.betas.1")]
