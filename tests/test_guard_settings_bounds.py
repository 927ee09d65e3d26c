"""Finite is not healthy: the settings the guard and the ledger hold fixed or bounded
(`run.optimizer_settings`, `guard.settings`). A momentum of 1.8, an `eps` of 1.8e300, a learning
rate or weight decay raised 256x, a learning rate dropped to exactly 0 by a flipped scheduler
count, a BatchNorm's momentum divided by 256: each is finite and admitted by torch, each hurts
the run (shown against a clean twin), and each is named and never sealed. Each fault is the
test's own: one bit of a Python number, written between steps or into the state being saved."""

from __future__ import annotations

import math

import pytest
import torch
from guard_support import batch, flip_float, run, tiny_model
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.ledger.health.moments import group_problems
from inspector.run.checkpoints import read_ledger


def _train(run_dir, make_opt, steps, fault=None, saves=(), model=None, data=batch):
    """The plain loop with a ledger save of model and optimizer after each step of `saves`;
    `fault(step, optimizer, model)` runs between steps. The guard, the model, the verdicts,
    the saves by step and the optimizer."""
    model = model or tiny_model()
    opt = make_opt(model)
    guard = Guard(run_dir, GuardConfig(console=False))

    def between(step):
        if fault is not None:
            fault(step, opt, model)

    def after(step, optimizer):
        if step in saves:
            save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                 run_dir / f"step-{step}.pt", step=step, run_dir=run_dir)

    verdicts = run(guard, model, range(steps), opt, between, data=data, after_step=after)
    return guard, model, verdicts, {s.step: s for s in read_ledger(run_dir).saves}, opt


def _loss(model, data=batch) -> float:
    with torch.no_grad():
        x, y = data(999)
        return float(nn.functional.mse_loss(model(x), y))


def _flip(key: str, bit: int, at: int, item: int | None = None):
    def fault(step, opt, model):
        if step == at:
            for group in opt.param_groups:
                group[key] = flip_float(group[key], bit)
    return fault


@pytest.mark.parametrize("make_opt, key", [
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), "momentum"),
    (lambda m: torch.optim.RMSprop(m.parameters(), lr=1e-3, alpha=0.99), "alpha"),
])
def test_a_decay_flipped_past_one_is_named_and_never_sealed(tmp_path, make_opt, key):
    _, clean, quiet, clean_saves, _ = _train(tmp_path / "clean", make_opt, 30, saves=(9, 29))
    _, model, verdicts, saves, _ = _train(tmp_path / "hurt", make_opt, 30,
                                          _flip(key, 52, 10), saves=(9, 29))
    # the harm, under torch's own step: 0.9 -> 1.8 grows the buffer geometrically, 0.99 ->
    # 1.98 turns RMSprop's average of squares negative (its root NaN) or huge
    assert not _loss(model) < 10 * _loss(clean)
    assert not [v for v in quiet if v.alarm] and all(s.verified for s in clean_saves.values())
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 10
    assert next((b.rule, b.param) for b in hit.alarm.breaches) == (
        "optimizer-setting", f"param_groups.0.{key}")
    assert saves[9].outcome == SaveOutcome.VERIFIED
    assert saves[29].outcome == SaveOutcome.UNHEALTHY
    assert group_problems({"optimizer": optimizer_state(saves, tmp_path)}) != []


def optimizer_state(saves, tmp_path):
    """The optimizer state of the hurt run's last save, as written."""
    return torch.load(tmp_path / "hurt" / saves[29].path, weights_only=True)["optimizer"]


def test_a_radius_named_rho_is_not_a_decay(tmp_path):
    """A sharpness-aware wrapper's group (rho beside momentum) keeps ASAM's radius 2.0."""
    from inspector.run.optimizer_settings import refused

    assert refused({"lr": 0.1, "momentum": 0.9, "rho": 2.0, "adaptive": True}) == []
    assert refused({"lr": 1.0, "rho": 1.8, "eps": 1e-6}) == [("rho", 1.8)]  # Adadelta's
    assert refused({"lr": 1.0, "rho": 1.0, "eps": 1e-6}) == []  # its constructor admits 1


def _adam(model):
    return torch.optim.Adam(model.parameters(), lr=1e-2)


def _resume(run_dir, state, steps=20):
    """A restarted process resuming `state` with a fresh guard (as `run latest` then a
    training script would); the guard, the model, the verdicts."""
    model = tiny_model()
    model.load_state_dict(state["model"])
    opt = _adam(model)
    opt.load_state_dict(state["optimizer"])
    guard = Guard(run_dir, GuardConfig(console=False))
    verdicts = run(guard, model, range(100, 100 + steps), opt)
    return guard, model, verdicts, opt


@pytest.mark.parametrize("key, flipped", [("eps", flip_float(1e-8, 62)), ("maximize", True)])
def test_a_setting_flipped_in_the_saved_state_is_never_sealed_nor_learned_at_resume(
        tmp_path, key, flipped):
    def written(run_dir, corrupt):
        guard, model, _, _, opt = _train(run_dir, _adam, 10)
        state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        if corrupt:  # a fault in the dict being written, after the guard last read the live one
            state["optimizer"]["param_groups"][0][key] = flipped
        record = save(state, run_dir / "step-9.pt", step=9, run_dir=run_dir)
        guard.close()
        return state, record

    clean_state, clean_record = written(tmp_path / "clean", False)
    state, record = written(tmp_path / "hurt", True)
    assert clean_record.outcome == SaveOutcome.VERIFIED
    assert record.outcome == SaveOutcome.UNHEALTHY
    assert f"param group 0: {key}" in record.detail
    # the harm after a resume: eps 1.8e300 freezes Adam, maximize climbs
    start = tiny_model()
    start.load_state_dict(state["model"])
    _, clean, quiet, _ = _resume(tmp_path / "clean", clean_state)
    guard, model, verdicts, opt = _resume(tmp_path / "hurt", state)
    assert not [v for v in quiet if v.alarm]
    assert _loss(clean) < 0.9 * _loss(start) <= _loss(model)
    # the restarted guard compares with the run's first value, never learns the flipped one
    assert verdicts[0].alarm is not None
    assert (f"param_groups.0.{key}", "optimizer-setting") in [
        (b.param, b.rule) for b in verdicts[0].alarm.breaches]
    assert any(f"param_groups.0.{key}" in line for line in guard.health())
    later = save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                 tmp_path / "hurt" / "step-119.pt", step=119, run_dir=tmp_path / "hurt")
    assert later.outcome == SaveOutcome.UNHEALTHY


def test_a_deliberate_change_said_with_accept_settings_is_the_new_baseline(tmp_path):
    def fault(step, opt, model):
        if step == 5:
            opt.param_groups[0]["eps"] = 1e-6
            guard.accept_settings()

    model = tiny_model()
    opt = _adam(model)
    guard = Guard(tmp_path, GuardConfig(console=False))
    verdicts = run(guard, model, range(10), opt, lambda s: fault(s, opt, model))
    assert not [v for v in verdicts if v.alarm] and guard.health() == []
    record = save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                  tmp_path / "step-9.pt", step=9, run_dir=tmp_path)
    assert record.outcome == SaveOutcome.VERIFIED
    guard.close()
    _, _, resumed, _ = _resume(tmp_path, torch.load(tmp_path / "step-9.pt"), steps=3)
    assert not [v for v in resumed if v.alarm]


@pytest.mark.parametrize("key, at", [("lr", 20), ("weight_decay", 20)])
def test_a_scheduled_setting_raised_256x_is_named_and_held(tmp_path, key, at):
    def make(m):  # 1e-3 and 5e-4 have exponent bit 55 clear: the flip multiplies by 2^8
        return torch.optim.SGD(m.parameters(), lr=1e-3 if key == "lr" else 0.01, momentum=0.9,
                               weight_decay=5e-4)

    def data(step):  # a target ten times larger: large weights, which a decay x256 holds back
        x, y = batch(step)
        return x, y * (1 if key == "lr" else 10)

    _, clean, quiet, clean_saves, _ = _train(tmp_path / "clean", make, 60, saves=(19, 59),
                                             data=data)
    guard, model, verdicts, saves, _ = _train(tmp_path / "hurt", make, 60, _flip(key, 55, at),
                                              saves=(19, 59), data=data)
    # the clean twin names no setting (the tenfold target's fast growth fires weight-statistics
    # alarms in both twins)
    assert not [b for v in quiet if v.alarm for b in v.alarm.breaches
                if b.rule == "optimizer-setting"]
    assert key != "lr" or all(s.verified for s in clean_saves.values())
    assert _loss(model, data) > 1.5 * _loss(clean, data)
    hit = next(v for v in verdicts if v.alarm and any(
        b.rule == "optimizer-setting" for b in v.alarm.breaches))
    assert hit.step == at
    assert ("optimizer-setting", f"param_groups.0.{key}") in [
        (b.rule, b.param) for b in hit.alarm.breaches]
    # held while it stays raised: the windowed alarms it caused have long passed by step 59
    assert any(f"param_groups.0.{key} rose to" in line for line in guard.health())
    assert key != "lr" or saves[19].outcome == SaveOutcome.VERIFIED
    assert saves[59].outcome == SaveOutcome.UNHEALTHY


def test_a_flipped_scheduler_count_that_drops_the_rate_to_zero_is_named(tmp_path):
    total, warm = 200, 10

    def make(m):
        opt = _adam(m)
        make.sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: s / warm if s < warm else max(0.0, (total - s) / (total - warm)))
        return opt

    kept = {}

    def fault(step, opt, model, flip):
        if step:
            make.sched.step()
        if flip and step == 30:
            make.sched.last_epoch ^= 1 << 10  # the next step computes the rate at 1055: 0
        if step == 40:
            kept[flip] = [p.detach().clone() for p in model.parameters()]

    def moved(model, flip):
        return max(float((p.detach() - q).abs().max())
                   for p, q in zip(model.parameters(), kept[flip], strict=True))

    _, clean, quiet, _, _ = _train(tmp_path / "clean", make, 60,
                                   lambda s, o, m: fault(s, o, m, False))
    _, model, verdicts, saves, _ = _train(tmp_path / "hurt", make, 60,
                                          lambda s, o, m: fault(s, o, m, True), saves=(59,))
    assert not [v for v in quiet if v.alarm]
    assert moved(model, True) == 0 < moved(clean, False)  # it stopped learning at step 31
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 31
    assert [(b.rule, b.param, b.value) for b in hit.alarm.breaches] == [
        ("optimizer-setting", "param_groups.0.lr", 0.0)]
    assert "param_groups.0.lr fell to 0 in one step" in saves[59].detail


def _bn_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))


def _shifted(step):
    x, y = batch(step)
    return x + 3.0, y


def test_a_norm_layers_momentum_flipped_is_named_and_never_sealed(tmp_path):
    def fault(step, opt, model):
        if step == 5:
            model[1].momentum = flip_float(model[1].momentum, 55)  # 0.1 -> 0.1/256

    def make(m):
        return torch.optim.SGD(m.parameters(), lr=0.01)

    _, clean, quiet, clean_saves, _ = _train(tmp_path / "clean", make, 40, saves=(4, 39),
                                             model=_bn_model(), data=_shifted)
    guard, model, verdicts, saves, _ = _train(tmp_path / "hurt", make, 40, fault, saves=(4, 39),
                                              model=_bn_model(), data=_shifted)
    # the harm: training (batch statistics) is the same; eval uses the frozen running mean
    assert abs(verdicts[-1].loss - quiet[-1].loss) < 1e-6
    clean.eval(), model.eval()
    gap = float((model[1].running_mean - clean[1].running_mean).abs().max())
    assert gap > 1.0
    assert not [v for v in quiet if v.alarm] and all(s.verified for s in clean_saves.values())
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 5
    assert [(b.rule, b.param) for b in hit.alarm.breaches] == [("norm-setting", "1.momentum")]
    assert saves[4].outcome == SaveOutcome.VERIFIED
    assert saves[39].outcome == SaveOutcome.UNHEALTHY
    assert "1.momentum changed from 0.1 to 0.0003906" in saves[39].detail
    guard.accept_settings()
    assert guard.health() == []


@pytest.mark.parametrize("name", ["one-cycle", "one-cycle-div-1e4", "warm-restarts",
                                  "linear-warm-up-from-0", "hf-linear-warm-up", "plateau",
                                  "lr-find-ramp", "dino-weight-decay"])
def test_ordinary_schedules_raise_no_setting_alarm(tmp_path, name):
    from transformers import get_linear_schedule_with_warmup

    sched = torch.optim.lr_scheduler
    build = {
        "one-cycle": lambda o: sched.OneCycleLR(o, max_lr=1e-2, total_steps=60),
        "one-cycle-div-1e4": lambda o: sched.OneCycleLR(o, max_lr=1e-2, total_steps=60,
                                                        div_factor=1e4,
                                                        final_div_factor=1.0),
        "warm-restarts": lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=7, eta_min=0),
        "linear-warm-up-from-0": lambda o: sched.LambdaLR(o, lambda s: min(1.0, s / 10)),
        "hf-linear-warm-up": lambda o: get_linear_schedule_with_warmup(o, 10, 60),
        "plateau": lambda o: sched.ReduceLROnPlateau(o, patience=0, factor=0.1),
        # Lightning's lr_find: exponential from 1e-8 to 1 over 60 steps, then back
        "lr-find-ramp": lambda o: sched.LambdaLR(o, lambda s: 1e-5 * 1e8 ** (s / 59)
                                                 if s < 60 else 1.0),
        "dino-weight-decay": None,
    }[name]
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.04)
    scheduler = build(optimizer) if build is not None else None
    rates = []

    def between(step):
        if name == "dino-weight-decay":  # cosine from 0.04 to 0.4
            optimizer.param_groups[0]["weight_decay"] = 0.4 - 0.18 * (1 + math.cos(
                math.pi * step / 60))
        elif name == "plateau":
            scheduler.step(1.0)  # never improves: the rate falls 10x every step
        elif step:
            scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])

    guard = Guard(tmp_path, GuardConfig(console=False))
    verdicts = run(guard, model, range(60), optimizer, between)
    assert not [(v.step, b.rule) for v in verdicts if v.alarm for b in v.alarm.breaches
                if b.rule == "optimizer-setting"]
    assert not [line for line in guard.health() if "optimizer-setting" in line]
    assert max(rates) >= 4 * min(rates) or name == "dino-weight-decay"
