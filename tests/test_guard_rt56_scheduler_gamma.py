"""A scheduler's `gamma` with an exponent bit flipped mid-run (ExponentialLR's 0.99 -> 0.2475,
a 4x fall every step, each step within the guard's one-step collapse factor) is never sealed:
the ledger refuses a state whose last rate is orders of magnitude from `base_lr * gamma^k`
(`ledger.health._gamma_problem`). The same schedulers with their own gamma, stepped or written
over by a manual warm-up, raise nothing. Faults are the test's own, each beside a clean
same-seed twin."""

from __future__ import annotations

import struct

import pytest
import torch
from guard_support import run, tiny_model
from torch.optim import lr_scheduler as sched

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.ledger.health import state_problems
from inspector.run.checkpoints import read_ledger, resume_choice


def flip(value: float, bit: int) -> float:
    (word,) = struct.unpack("<Q", struct.pack("<d", value))
    return struct.unpack("<d", struct.pack("<Q", word ^ (1 << bit)))[0]


SCHEDULERS = {
    "exponential": lambda o: sched.ExponentialLR(o, 0.99),
    "step": lambda o: sched.StepLR(o, 2, gamma=0.9),
    "multistep": lambda o: sched.MultiStepLR(o, [5, 10, 15, 20], gamma=0.8),
}


def _guarded(run_dir, make, flip_at: int | None, steps: int = 40, save_at=(20, 40)):
    """The plain loop with SGD and `make`'s scheduler stepped each step; gamma's bit 53 cleared
    (0.99 -> 0.2475) after step `flip_at`; ledger saves holding the scheduler at `save_at`."""
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = make(optimizer)

    def between(step):
        if step:
            scheduler.step()
        if step == flip_at:
            scheduler.gamma = flip(scheduler.gamma, 53)
        if step in save_at:
            save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "scheduler": scheduler.state_dict()}, run_dir / f"step-{step}.pt", step=step)

    verdicts = run(Guard(run_dir, GuardConfig()), model, range(steps + 1), optimizer, between)
    return verdicts, {s.step: s for s in read_ledger(run_dir).saves}, optimizer


def test_a_flipped_gamma_is_never_sealed_nor_resumed(tmp_path):
    make = SCHEDULERS["exponential"]
    _, clean, clean_opt = _guarded(tmp_path / "clean", make, None)
    _, saves, optimizer = _guarded(tmp_path / "flip", make, 17)
    # the harm: the rate has fallen 4x a step since, while the twin's fell 1% a step
    assert optimizer.param_groups[0]["lr"] < 1e-12 < 1e-2 < clean_opt.param_groups[0]["lr"]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean.values())
    # three steps after the flip, the closed form already refuses the state
    for step in (20, 40):
        assert saves[step].outcome == SaveOutcome.UNHEALTHY
        assert "its gamma changed during the run" in saves[step].detail
    assert resume_choice(tmp_path / "flip").record is None


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_gamma_schedulers_stepped_or_warmed_up_raise_nothing(tmp_path, name):
    _, saves, _ = _guarded(tmp_path, SCHEDULERS[name], None, steps=30, save_at=(10, 30))
    assert all(s.outcome == SaveOutcome.VERIFIED for s in saves.values())
    # a manual warm-up writing the rate before the scheduler steps (Lightning's recipe)
    optimizer = torch.optim.SGD(tiny_model().parameters(), lr=0.05)
    scheduler = SCHEDULERS[name](optimizer)
    found = []
    for step in range(1, 60):
        if step <= 20:
            optimizer.param_groups[0]["lr"] = 0.05 * step / 20
        optimizer.step()
        scheduler.step()
        found += state_problems({"optimizer": optimizer.state_dict(),
                                 "scheduler": scheduler.state_dict()})
    assert found == []
