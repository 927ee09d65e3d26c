"""A guard started on a resumed run starts from what the run's earlier sessions journaled
(`guard.baseline`), not blind: a CosineAnnealingLR whose `eta_min` became 2.0 five steps after
the resume climbs the loss five orders of magnitude, which a fresh guard's warm-ups and windows
learned as they went (no alarm, the step-100 checkpoint sealed); now the loss passing 10 x the
largest the run learned before the resume is `loss-spike-journaled`, with the same warn and halt
machinery, and the save is unhealthy. A resumed clean twin raises nothing: the rules' numbers
after the resume are the uninterrupted run's; a warm-up, a resume from an earlier checkpoint than
the last record, and data whose loss is 3x higher or lower after the resume raise nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as sched

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig, GuardHalt
from inspector.guard.rules import JournaledMax
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger

torch.manual_seed(0)
X = torch.randn(512, 16)
Y = (X @ torch.randn(16, 4)).argmax(1)


def _fresh(lr: float = 0.1):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return model, optimizer, sched.CosineAnnealingLR(optimizer, T_max=100)


def _train(guard, model, optimizer, scheduler, steps, fault_at=None, scale=1.0):
    """The documented plain loop over batches of 32; `eta_min` set to 2.0 (0.0 with float64
    bit 62 set) after step `fault_at`; `scale` multiplies the inputs (other data). The alarms."""
    alarms = []
    for t in steps:
        idx = torch.arange(t * 32, t * 32 + 32) % 512
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(X[idx] * scale), Y[idx])
        loss.backward()
        verdict = guard.step(loss, model, optimizer)
        if verdict.alarm is not None:
            alarms.append((t, [b.rule for b in verdict.alarm.breaches]))
        if verdict.take_step:
            optimizer.step()
        scheduler.step()
        if t == fault_at:
            scheduler.eta_min = 2.0
    return alarms


def _save(run_dir, model, optimizer, scheduler, step):
    return save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict()}, run_dir / f"step-{step}.pt", step=step)


def _session(run_dir, config, start, end, load=None, **train):
    """One guarded session from `start` to `end` (resumed from the save `load`), saved at
    `end`: (alarms, the guard, the model)."""
    model, optimizer, scheduler = _fresh()
    if load is not None:
        state = torch.load(run_dir / f"step-{load}.pt", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    guard = Guard(run_dir, config)
    alarms = _train(guard, model, optimizer, scheduler, range(start, end), **train)
    _save(run_dir, model, optimizer, scheduler, end)
    guard.close()
    return alarms, guard, model


def _resumed(run_dir, action="warn", fault_at=None):
    config = GuardConfig(action=action, console=False)
    first, _, _ = _session(run_dir, config, 0, 40)
    second, _, model = _session(run_dir, config, 40, 100, load=40, fault_at=fault_at)
    with torch.no_grad():
        loss = nn.functional.cross_entropy(model(X), Y).item()
    return first + second, {s.step: s for s in read_ledger(run_dir).saves}, loss


def test_a_divergence_after_a_resume_is_named_and_not_sealed(tmp_path):
    clean_alarms, clean, clean_loss = _resumed(tmp_path / "clean")
    alarms, saves, loss = _resumed(tmp_path / "fault", fault_at=45)
    # the harm: the twin ends at 0.06, the faulted run five orders of magnitude up
    assert clean_loss < 0.1 and loss > 1000
    assert clean_alarms == [] and all(s.outcome == SaveOutcome.VERIFIED for s in clean.values())
    assert all(t > 45 for t, _ in alarms)
    assert any("loss-spike-journaled" in rules for _, rules in alarms)
    assert saves[40].outcome == SaveOutcome.VERIFIED
    assert saves[100].outcome == SaveOutcome.UNHEALTHY


def test_the_resumed_divergence_halts_with_a_scene(tmp_path):
    with pytest.raises(GuardHalt) as halted:
        _resumed(tmp_path, action="halt", fault_at=45)
    assert halted.value.scene.is_dir()
    assert "loss-spike-journaled" in str(halted.value)


def test_a_resumed_guard_goes_on_with_the_uninterrupted_runs_numbers(tmp_path):
    config = GuardConfig(console=False)
    _, whole, _ = _session(tmp_path / "whole", config, 0, 60)
    _session(tmp_path / "resumed", config, 0, 40)
    alarms, resumed, _ = _session(tmp_path / "resumed", config, 40, 60, load=40)
    assert alarms == []
    mine, theirs = resumed._rules_state(), whole._rules_state()
    for rule in ("loss-spike-max", "grad_norm-spike-max", "loss-spike-ema",
                 "loss-spike-median", "grad_norm-spike-median"):
        assert mine[rule] == theirs[rule], rule
    assert mine["weights"]["weight-largest"] == theirs["weights"]["weight-largest"]
    assert mine["loss-spike-journaled"]["largest"] > 1.0  # the untrained start's loss


@pytest.mark.parametrize("scale", [3.0, 1 / 3])
def test_other_data_after_a_resume_raises_nothing(tmp_path, scale):
    """Inputs 3x larger (a loss about 3x higher) or smaller after the resume."""
    config = GuardConfig(console=False)
    _session(tmp_path, config, 0, 40)
    alarms, _, _ = _session(tmp_path, config, 40, 80, load=40, scale=scale)
    assert alarms == []
    assert all(s.outcome == SaveOutcome.VERIFIED for s in read_ledger(tmp_path).saves)


def test_a_resume_from_an_earlier_save_than_the_last_record_raises_nothing(tmp_path):
    """The run went on past its step-40 save to step 70 (journaled at close), then resumed from
    step 40: the norms there are not step 70's, and the next reading is the base."""
    config = GuardConfig(console=False)
    _session(tmp_path, config, 0, 40)
    _session(tmp_path, config, 40, 70, load=40)
    alarms, _, _ = _session(tmp_path, config, 40, 70, load=40)
    assert alarms == []


def test_a_warm_up_resumed_midway_raises_nothing(tmp_path):
    def session(start, end, load=None):
        model, optimizer, _ = _fresh(lr=0.05)
        scheduler = sched.SequentialLR(optimizer, [
            sched.LinearLR(optimizer, 0.01, total_iters=30),
            sched.CosineAnnealingLR(optimizer, 70)], [30])
        if load is not None:
            state = torch.load(tmp_path / f"step-{load}.pt", weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        guard = Guard(tmp_path, GuardConfig(console=False))
        alarms = _train(guard, model, optimizer, scheduler, range(start, end))
        _save(tmp_path, model, optimizer, scheduler, end)
        guard.close()
        return alarms

    assert session(0, 15) == [] and session(15, 100, load=15) == []
    assert all(s.outcome == SaveOutcome.VERIFIED for s in read_ledger(tmp_path).saves)


def test_a_new_task_in_the_same_folder_may_start_afresh(tmp_path):
    """`GuardConfig(resume_baseline=False)`: nothing journaled is loaded."""
    _session(tmp_path, GuardConfig(console=False), 0, 40)
    _, guard, _ = _session(tmp_path, GuardConfig(console=False, resume_baseline=False), 40, 41,
                           load=40)
    assert guard._rules_state()["loss-spike-max"]["seen"] == 1


def test_the_journaled_bound_is_fixed_for_a_session_and_silent_in_the_first():
    rule = JournaledMax("loss", k=10.0)
    for value in (1.5, 0.5, 0.2):
        assert rule.judge(1e9) is None  # a run's first session: Megatron's rule's job
        rule.learn(value)
    rule.new_session()
    for value in (2.0, 4.0, 8.0, 14.9):  # a steady climb is not learned into the bound
        assert rule.judge(value) is None
        rule.learn(value)
    assert rule.judge(15.0).threshold == 15.0
