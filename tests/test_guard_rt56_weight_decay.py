"""A weight decay held at exactly 0 that turns to 2.0 (0.0 with bit 62 flipped, the one single
flip of 0.0 that matters) is `optimizer-setting`, held while it stays, so no later save is
sealed; a weight-decay schedule that climbs from 0 raises nothing. Each fault is the test's own:
one bit of the Python float in `param_groups`."""

from __future__ import annotations

import pytest
import torch
from guard_support import batch, flip_float, run, tiny_model
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger


def _run(run_dir, opt: str, between_writes):
    """Twenty guarded steps with saves at 10 and 20; `between_writes(group, step)` before each."""
    model = tiny_model()
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if opt == "sgd"
                 else torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0))

    def between(step):
        between_writes(optimizer.param_groups[0], step)
        if step in (10, 20):
            save(model.state_dict(), run_dir / f"step-{step}.pt", step=step)

    verdicts = run(Guard(run_dir, GuardConfig()), model, range(21), optimizer, between)
    return verdicts, {s.step: s for s in read_ledger(run_dir).saves}, model


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_a_weight_decay_flipped_from_zero_is_named_and_never_sealed(tmp_path, opt):
    def flip(group, step):
        if step == 5:
            group["weight_decay"] = flip_float(group["weight_decay"], 62)

    _, clean_saves, clean = _run(tmp_path / "clean", opt, lambda g, s: None)
    verdicts, saves, model = _run(tmp_path / "flip", opt, flip)
    # the harm under torch's own optimizer: every weight shrinks each step
    norm = sum(float(p.detach().norm()) for p in model.parameters())
    assert norm < 0.8 * sum(float(p.detach().norm()) for p in clean.parameters())
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 5
    assert [(b.rule, b.param) for b in hit.alarm.breaches] == [
        ("optimizer-setting", "param_groups.0.weight_decay")]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    assert saves[10].outcome == saves[20].outcome == SaveOutcome.UNHEALTHY
    assert "weight_decay left 0 for 2 in one step" in saves[20].detail


def test_a_weight_decay_schedule_from_zero_raises_nothing(tmp_path):
    def schedule(group, step):
        group["weight_decay"] = 0.02 * step  # climbs from exactly 0 in small steps

    verdicts, saves, _ = _run(tmp_path, "sgd", schedule)
    assert not [v for v in verdicts if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in saves.values())
    x, y = batch(999)
    assert torch.isfinite(nn.functional.mse_loss(tiny_model()(x), y))
