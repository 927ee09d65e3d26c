"""An LR scheduler's saved state is part of the health check
(`ledger.health.scheduler_problems`): a flipped `last_epoch` or `base_lrs` bit, which leaves
every number finite and moves every later learning rate of a resumed run, is never sealed; the
ordinary recipes (torch's schedulers, alone, chained, sequential, created mid-run, resumed with
`last_epoch=N`, stepped per epoch, skipped by a GradScaler, transformers' schedules, two
optimizers) raise nothing. Faults are the test's own, each beside a clean same-seed twin."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as sched

from inspector.core.vocabulary import SaveOutcome
from inspector.ledger import save
from inspector.ledger.health import state_problems
from inspector.run.checkpoints import read_ledger, resume_choice

T = 200


def cosine(optimizer):
    return sched.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, T) / T)))


def plain_run(run, fault=None, steps: int = 40):
    """A plain loop (Adam, a cosine LambdaLR) saved through the ledger after `steps`;
    `fault(scheduler)` is the test's own, after the last scheduler step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = cosine(optimizer)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 8, generator=g)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), x[:, :1]).backward()
        optimizer.step()
        scheduler.step()
    if fault is not None:
        fault(scheduler)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict()}
    save(state, run / "step-40.pt", step=steps, run_dir=run)
    return model, state


def resumed_lr(model, state, more: int) -> float:
    """The learning rate a run resumed from `state` reaches `more` steps later."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = cosine(optimizer)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    for _ in range(more):
        optimizer.step()
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


def flip_last_epoch(scheduler):
    scheduler.last_epoch ^= 1 << 7  # 40 -> 168


def flip_base_lr(scheduler):
    value = torch.tensor([scheduler.base_lrs[0]], dtype=torch.float64)
    value.view(torch.int64)[0] ^= 1 << 55  # an exponent bit: x 2^-8
    scheduler.base_lrs[0] = float(value)


@pytest.mark.parametrize(("fault", "said"), [(flip_last_epoch, "last_epoch 168 but it took 40"),
                                             (flip_base_lr, "base_lrs")])
def test_a_flipped_scheduler_state_is_unhealthy_and_never_resumed(tmp_path, fault, said):
    clean_model, clean_state = plain_run(tmp_path / "clean")
    model, state = plain_run(tmp_path / "flip", fault)
    # the harm: the resumed schedule is elsewhere (the cosine's step 120: 3.5e-3 due)
    due = resumed_lr(clean_model, clean_state, 80)
    assert due == pytest.approx(1e-2 * 0.5 * (1 + math.cos(math.pi * 120 / T)))
    assert abs(resumed_lr(model, state, 80) - due) > 0.5 * due
    assert read_ledger(tmp_path / "clean").saves[0].outcome == SaveOutcome.VERIFIED
    record = read_ledger(tmp_path / "flip").saves[0]
    assert record.outcome == SaveOutcome.UNHEALTHY and said in record.detail
    assert record.path == "step-40.pt.unhealthy"
    assert resume_choice(tmp_path / "flip").record is None


def _params():
    torch.manual_seed(0)
    return list(nn.Linear(4, 3).parameters())


def _loop(optimizer, scheduler, steps, per_epoch=1, metric=False, scaler=None, skip=()):
    """`steps` optimizer steps, the scheduler stepped every `per_epoch` of them; the states
    checked after every scheduler step."""
    found = []
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i in range(1, steps + 1):
        optimizer.zero_grad()
        loss = sum((p * p).sum() for p in params)
        if scaler is not None:
            scaler.scale(loss).backward()
            if i in skip:
                params[0].grad.fill_(math.inf)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if i % per_epoch == 0:
            scheduler.step(1.0 / i) if metric else scheduler.step()
            found += state_problems({"optimizer": optimizer.state_dict(),
                                     "lr_scheduler": scheduler.state_dict()})
    return found


def _recipes():
    def adam(lr=1e-3):
        return torch.optim.Adam(_params(), lr=lr)

    def sgd():
        return torch.optim.SGD(_params(), lr=0.1, momentum=0.9)

    def seq(o):
        return sched.SequentialLR(o, [sched.LinearLR(o, 0.1, total_iters=5),
                                      sched.CosineAnnealingLR(o, 20)], [5])

    def chained(o):
        return sched.ChainedScheduler([sched.StepLR(o, 3), sched.ExponentialLR(o, 0.95)])

    def hf(kind):
        from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup
        make = {"linear": get_linear_schedule_with_warmup,
                "cosine": get_cosine_schedule_with_warmup}[kind]
        return lambda o: make(o, 5, 30)

    return {
        "lambda": (adam, cosine, {}),
        "step": (sgd, lambda o: sched.StepLR(o, 4), {}),
        "multistep": (sgd, lambda o: sched.MultiStepLR(o, [5, 10]), {}),
        "exponential": (sgd, lambda o: sched.ExponentialLR(o, 0.9), {}),
        "cosine": (adam, lambda o: sched.CosineAnnealingLR(o, 10), {}),
        "polynomial": (adam, lambda o: sched.PolynomialLR(o, 10), {}),
        "onecycle": (sgd, lambda o: sched.OneCycleLR(o, 1.0, total_steps=40), {}),
        "cyclic": (sgd, lambda o: sched.CyclicLR(o, 0.01, 0.1, step_size_up=4), {}),
        "warm_restarts": (adam, lambda o: sched.CosineAnnealingWarmRestarts(o, 3, 2), {}),
        "sequential": (adam, seq, {}),
        "chained": (sgd, chained, {}),
        "plateau": (adam, lambda o: sched.ReduceLROnPlateau(o, patience=1), {"metric": True}),
        "per_epoch": (adam, lambda o: sched.StepLR(o, 2), {"per_epoch": 4}),
        "hf_linear": (adam, hf("linear"), {}),
        "hf_cosine": (adam, hf("cosine"), {}),
    }


@pytest.mark.parametrize("name", list(_recipes()))
def test_ordinary_schedules_raise_nothing(name):
    make_optimizer, make_scheduler, options = _recipes()[name]
    optimizer = make_optimizer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _loop(optimizer, make_scheduler(optimizer), 40, **options) == []


def test_warm_restarts_stepped_by_fractional_epochs_raise_nothing():
    optimizer = torch.optim.Adam(_params(), lr=1e-3)
    scheduler = sched.CosineAnnealingWarmRestarts(optimizer, 2, 2)
    for i in range(30):
        optimizer.step()
        scheduler.step(i / 4)
        assert state_problems({"optimizer": optimizer.state_dict(),
                               "lr_scheduler": scheduler.state_dict()}) == []
    scheduler.T_cur += 64.0  # the test's own fault: past its cycle
    assert "outside its cycle" in state_problems({"s": scheduler.state_dict()})[0]


def test_a_scheduler_made_mid_run_or_resumed_with_last_epoch_raises_nothing():
    optimizer = torch.optim.Adam(_params(), lr=1e-3)
    assert _loop(optimizer, sched.ExponentialLR(optimizer, 1.0), 5) == []  # a constant phase
    assert _loop(optimizer, sched.CosineAnnealingLR(optimizer, 30), 10) == []  # made mid-run
    resumed = torch.optim.Adam(_params(), lr=1e-3)
    resumed.load_state_dict(optimizer.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sched.CosineAnnealingLR(resumed, 30, last_epoch=14)  # the old resume idiom
    assert _loop(resumed, again, 5) == []


def test_two_optimizers_with_their_schedulers_raise_nothing():
    g, d = torch.optim.Adam(_params(), lr=2e-4), torch.optim.Adam(_params(), lr=1e-3)
    sg, sd = sched.StepLR(g, 3), cosine(d)
    for _ in range(10):
        for o, s in ((g, sg), (d, sd)):
            _loop(o, s, 1)
    state = {"optimizer_states": [g.state_dict(), d.state_dict()],
             "lr_schedulers": [sg.state_dict(), sd.state_dict()]}
    assert state_problems(state) == []
    state["lr_schedulers"][1]["base_lrs"] = [1e-3 * 2 ** 64]  # the test's own fault
    assert "base_lrs" in state_problems(state)[0]


def test_steps_a_gradient_scaler_skipped_raise_nothing():
    optimizer = torch.optim.Adam(_params(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    found = _loop(optimizer, cosine(optimizer), 20, scaler=scaler, skip={1, 2, 7})
    assert found == []
    assert float(optimizer.state_dict()["state"][0]["step"]) == 17  # three were skipped
