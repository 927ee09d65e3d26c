"""An LR scheduler whose schedule's numbers changed mid-run (CosineAnnealingLR's `T_max` 100 ->
4196 or `eta_min` 0 -> 2.0, LinearLR's `total_iters`, PolynomialLR's `power`, the warm restarts'
`eta_min`, CyclicLR's `max_lrs`, a OneCycleLR phase, the running part of a SequentialLR) is never
sealed: the ledger holds the rate the state keeps to its closed form from the state's own
numbers (`ledger.health.schedulers`), as torch's own schedulers always are (to ~1e-11 of the
base rate
over thousands of steps, a resume between). Faults are the test's own, each beside a clean
same-seed twin; the clean recipes (warm-up by SequentialLR, restarts, one-cycle, cyclic, torch's
documented chaining of two schedulers on one optimizer, a resume) raise nothing."""

from __future__ import annotations

import warnings

import pytest
import torch
from guard_support import run, tiny_model
from torch.optim import lr_scheduler as sched

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.ledger.health import state_problems
from inspector.run.checkpoints import read_ledger, resume_choice

SAID = "closed form"


def _cosine_run(run_dir, fault, steps: int = 40):
    """The documented plain loop, SGD with CosineAnnealingLR(T_max=100) stepped each step,
    `fault(scheduler)` after step 30, a ledger save at `steps`; then a resume from that file
    whose schedule runs to step 100: the last rate it reaches."""
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = sched.CosineAnnealingLR(optimizer, T_max=100)

    def after(step, opt):
        scheduler.step()
        if step == 30 and fault is not None:
            fault(scheduler)
        if step == steps:
            save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                  "scheduler": scheduler.state_dict()}, run_dir / f"step-{step}.pt", step=step)

    run(Guard(run_dir, GuardConfig(console=False)), model, range(1, steps + 1), optimizer,
        after_step=after)
    resumed = torch.optim.SGD(tiny_model().parameters(), lr=0.1, momentum=0.9)
    again = sched.CosineAnnealingLR(resumed, T_max=100)
    again.load_state_dict(scheduler.state_dict())
    for _ in range(100 - steps):
        resumed.step()
        again.step()
    return read_ledger(run_dir).saves[0], resumed.param_groups[0]["lr"]


def _t_max(s):
    s.T_max ^= 1 << 12  # 100 -> 4196


def _eta_min(s):
    s.eta_min = 2.0  # 0.0 with float64 bit 62 set


@pytest.mark.parametrize("fault", [_t_max, _eta_min])
def test_a_cosine_whose_numbers_changed_is_never_sealed(tmp_path, fault):
    clean, clean_lr = _cosine_run(tmp_path / "clean", None)
    record, lr = _cosine_run(tmp_path / "flip", fault)
    # the harm: the twin's schedule ends at 0; the changed one never decays (or climbs)
    assert clean_lr < 1e-12 and lr > 0.05
    assert clean.outcome == SaveOutcome.VERIFIED
    assert record.outcome == SaveOutcome.UNHEALTHY and SAID in record.detail
    assert "CosineAnnealingLR" in record.detail
    assert resume_choice(tmp_path / "flip").record is None


def _params():
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(3))]


def _loop(make, steps: int, fault=None, resume_at: int | None = None, every: int = 1,
          fault_at: int = 0):
    """SGD stepped `steps` times with `make`'s scheduler after each step; `fault(scheduler)`
    after step `fault_at`; the state rebuilt from its state dicts after `resume_at` (a
    resume); every problem the ledger's state check finds, checked every `every` steps."""
    params = _params()

    def fresh():
        optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
        return optimizer, make(optimizer)

    optimizer, scheduler = fresh()
    found = []
    for step in range(1, steps + 1):
        params[0].grad = torch.ones(3)
        optimizer.step()
        scheduler.step()
        if fault is not None and step == fault_at:
            fault(scheduler)
        if step == resume_at:
            saved = optimizer.state_dict(), scheduler.state_dict()
            optimizer, scheduler = fresh()
            optimizer.load_state_dict(saved[0])
            scheduler.load_state_dict(saved[1])
        if step % every == 0:
            found += state_problems({"optimizer": optimizer.state_dict(),
                                     "lr_scheduler": scheduler.state_dict()})
    return found


def _set(key, value):
    return lambda s: setattr(s, key, value)


def _seq(o):
    return sched.SequentialLR(o, [sched.LinearLR(o, 0.1, total_iters=10),
                                  sched.CosineAnnealingLR(o, 90)], [10])


def _phase(s):
    s._schedule_phases[0]["end_step"] *= 4


FLIPPED = {  # a chained ratio keeps the change's trace from step 20 on
    "linear": (lambda o: sched.LinearLR(o, 0.01, 1.0, total_iters=50), _set("total_iters", 306),
               20),
    "polynomial": (lambda o: sched.PolynomialLR(o, 80, 2.0), _set("power", 8.0), 20),
    "constant": (lambda o: sched.ConstantLR(o, 0.25, total_iters=60), _set("factor", 0.5), 20),
    "sequential": (_seq, lambda s: setattr(s._schedulers[1], "T_max", 90 ^ (1 << 10)), 20),
    # these compute each rate afresh from their numbers: a change shows until their next step
    "warm_restarts": (lambda o: sched.CosineAnnealingWarmRestarts(o, 5, 2), _set("eta_min", 2.0),
                      40),
    "cyclic": (lambda o: sched.CyclicLR(o, 0.01, 0.1, step_size_up=7), _set("max_lrs", [25.6]),
               40),
    "onecycle": (lambda o: sched.OneCycleLR(o, 1.0, total_steps=200), _phase, 40),
}


@pytest.mark.parametrize("name", list(FLIPPED))
def test_closed_form_schedulers_whose_numbers_changed_are_named(name):
    make, fault, at = FLIPPED[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _loop(make, 40, every=4) == []
        found = _loop(make, 40, fault=fault, every=40, fault_at=at)
    assert len(found) == 1 and SAID in found[0]


CLEAN = {
    "cosine": lambda o: sched.CosineAnnealingLR(o, 37, eta_min=1e-4),
    "cosine_past_t_max": lambda o: sched.CosineAnnealingLR(o, 16),
    "linear": lambda o: sched.LinearLR(o, 0.001, 1.0, total_iters=150),
    "polynomial": lambda o: sched.PolynomialLR(o, 250, 2.0),
    "constant": lambda o: sched.ConstantLR(o, 0.3, total_iters=70),
    "warm_restarts": lambda o: sched.CosineAnnealingWarmRestarts(o, 5, 2, 1e-5),
    "cyclic_triangular2": lambda o: sched.CyclicLR(o, 0.01, 0.1, 7, mode="triangular2"),
    "cyclic_exp_range": lambda o: sched.CyclicLR(o, 0.01, 0.1, 7, mode="exp_range",
                                                 gamma=0.99),
    "onecycle_three_phase": lambda o: sched.OneCycleLR(o, 1.0, total_steps=400,
                                                       anneal_strategy="linear",
                                                       three_phase=True),
    "warmup_then_cosine": _seq,
    "chained_scheduler": lambda o: sched.ChainedScheduler(
        [sched.LinearLR(o, 0.1, total_iters=10), sched.CosineAnnealingLR(o, 90)]),
}


@pytest.mark.parametrize("name", list(CLEAN))
def test_clean_schedules_over_many_steps_and_a_resume_raise_nothing(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _loop(CLEAN[name], 300, resume_at=137, every=3) == []


def test_two_schedulers_chained_on_one_optimizer_raise_nothing():
    """torch's documented chaining: two schedulers stepped back to back, each saved apart; each
    one's rate is then the other's times its own ratio, off its own closed form."""
    optimizer = torch.optim.SGD(_params(), lr=0.1)
    warm, cosine = sched.LinearLR(optimizer, 0.1, total_iters=10), sched.CosineAnnealingLR(
        optimizer, 50)
    for _ in range(60):
        optimizer.step()
        warm.step()
        cosine.step()
        assert state_problems({"optimizer": optimizer.state_dict(),
                               "schedulers": [warm.state_dict(), cosine.state_dict()]}) == []
