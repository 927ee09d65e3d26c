"""Complex weights and buffers (a spectral layer's weights, rotary embeddings' `freqs_cis`) are
checked as any float tensor: the guard reads their real and imaginary parts, and the ledger
finds a NaN in them before a save. The faults are the test's own writes between steps."""

from __future__ import annotations

import math

import pytest
import torch
from guard_support import run, weights_reader  # noqa: F401
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.ledger.health import state_problems
from inspector.run.checkpoints import read_ledger, resume_choice

FAULT_STEP = 9


class Spectral(nn.Module):
    """A layer that mixes its input in the frequency domain with complex weights, and a
    persistent complex buffer of rotations (as rotary embeddings keep)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(5, dtype=torch.cfloat) * 0.5)
        angles = torch.arange(5) * 0.3
        self.register_buffer("rot", torch.polar(torch.ones(5), angles))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        spectrum = torch.fft.rfft(x, dim=-1) * self.w * self.rot
        return self.head(torch.fft.irfft(spectrum, n=8, dim=-1))


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(700 + step)
    x = torch.randn(32, 8, generator=g)
    return x, x[:, :3].sum(1, keepdim=True)


def train(run_dir, fault=None, steps=16):
    """The documented loop, a save every 4 steps; `fault(model)` runs before `FAULT_STEP`.
    The verdicts and the saves by step."""
    model = Spectral()
    guard = Guard(run_dir, GuardConfig(console=False))

    def faulting(step):
        if step == FAULT_STEP and fault is not None:
            with torch.no_grad():
                fault(model)

    def saving(step, opt):
        if step % 4 == 3:
            save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                 run_dir / f"step-{step + 1}.pt", step=step + 1, keep=5, run_dir=run_dir)

    verdicts = run(guard, model, range(steps), torch.optim.Adam(model.parameters(), lr=1e-2),
                   faulting, data, after_step=saving)
    guard.close()
    return verdicts, {s.step: s for s in read_ledger(run_dir).saves}


def real_part_times(factor: float, name: str):
    def fault(model):
        getattr(model, name).real[2] *= factor
    return fault


@pytest.mark.usefixtures("weights_reader")
@pytest.mark.parametrize(("name", "factor", "rule"), [
    ("w", 2.0 ** 16, "weights-changed"),      # finite: only the fingerprint names it
    ("w", math.nan, "weight-nonfinite"),
    ("rot", math.nan, "weight-nonfinite")])   # a buffer: no fingerprint, its values read
def test_a_fault_in_a_complex_tensor_is_named_and_never_sealed(tmp_path, name, factor, rule):
    clean, clean_saves = train(tmp_path / "clean")
    hurt, saves = train(tmp_path / "hurt", real_part_times(factor, name))
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    assert (rule, name) in {(b.rule, b.param) for b in hurt[FAULT_STEP].alarm.breaches}
    assert saves[8].outcome == SaveOutcome.VERIFIED
    assert saves[12].outcome == saves[16].outcome == SaveOutcome.UNHEALTHY
    assert name in saves[16].detail
    assert resume_choice(tmp_path / "hurt").record.step == 8


def test_nan_in_a_complex_or_float8_tensor_is_unhealthy_without_a_guard():
    rot = torch.polar(torch.ones(4), torch.arange(4.0))
    assert state_problems({"rot": rot}) == []
    rot.imag[1] = math.nan
    assert state_problems({"rot": rot}) == ["NaN in rot"]
    moment = torch.zeros(3, dtype=torch.cdouble)
    moment.real[0] = math.inf
    scales = torch.tensor([1.0, math.nan]).to(torch.float8_e4m3fn)  # no norm kernel takes it
    assert state_problems({"scales": scales}) == ["NaN in scales"]
    optimizer = {"state": {0: {"exp_avg": moment}}, "param_groups": [{"params": [0]}]}
    assert state_problems({"optimizer": optimizer}) == [
        "Inf in optimizer.state.0.exp_avg (no optimizer's state is ever infinite)"]
