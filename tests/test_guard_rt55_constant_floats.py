"""Float buffers no forward writes are weights too: a sinusoidal position table (the PyTorch
tutorial's `PositionalEncoding.pe`), RoPE's `inv_freq`, attention-bias tables. A sign flip there
keeps the buffer's norm and largest |value| (the only numbers read of float buffers before),
passes training and shifts every output that reads that position. The guard fingerprints every
buffer that held still over its first readings and names a change that then holds still; a
buffer a forward or a schedule writes shows itself by writing again and is no false alarm.
Each fault is the test's own write into the buffer; each harm is shown against a clean
same-seed twin."""

from __future__ import annotations

import math

import pytest
import torch
from guard_support import run, weights_reader  # noqa: F401
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger, resume_choice

pytestmark = pytest.mark.usefixtures("weights_reader")  # inline and in the background

LENGTH, WIDTH = 6, 8


def table() -> torch.Tensor:
    """The tutorial's sinusoidal position table."""
    pos = torch.arange(LENGTH).unsqueeze(1)
    div = torch.exp(torch.arange(0, WIDTH, 2) * (-math.log(10000.0) / WIDTH))
    pe = torch.zeros(LENGTH, WIDTH)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class Positional(nn.Module):
    """Inputs plus a position table, then a head over every position."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("pe", table())
        self.head = nn.Linear(LENGTH * WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(x + self.pe).flatten(1))


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's batch: the target reads position 2."""
    g = torch.Generator().manual_seed(700 + step)
    x = torch.randn(16, LENGTH, WIDTH, generator=g)
    return x, x[:, 2, :1]


def flip_sign(t: torch.Tensor, index: int) -> None:
    """The test's own fault: the sign bit of one float32 element."""
    with torch.no_grad():
        t.view(-1).view(torch.int32)[index] ^= -(1 << 31)


def train(run_dir, model, steps, fault=None, saves=()):
    """The plain loop with Adam; `fault(model, step)` runs after step `step`'s optimizer step,
    before its save."""
    guard = Guard(run_dir, GuardConfig())

    def between(step):
        if step and fault is not None:
            fault(model, step - 1)
        if step - 1 in saves:
            save(model.state_dict(), run_dir / f"step-{step - 1}.pt", step=step - 1)

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    verdicts = run(guard, model, range(steps + 1), opt, between, data)[:steps]
    return guard, verdicts


def hits(verdicts) -> list[tuple[int, str, str | None]]:
    return [(v.step, b.rule, b.param) for v in verdicts if v.alarm for b in v.alarm.breaches]


def test_a_sign_flip_in_a_position_table_harms_and_is_named_and_never_sealed(tmp_path):
    def fault(model, step):
        if step == 10:
            flip_sign(model.pe, 2 * WIDTH)  # pe[2, 0]

    clean, hurt = Positional(), Positional()
    _, twin = train(tmp_path / "clean", clean, 14, saves=(8, 12))
    _, verdicts = train(tmp_path / "hurt", hurt, 14, fault, saves=(8, 12))
    # the harm against the clean twin: the same everything but one sign, another output;
    # the numbers read of float buffers before (norm, largest |value|) are the same
    assert float(hurt.pe[2, 0]) == -float(clean.pe[2, 0]) != 0
    assert float(hurt.pe.norm()) == float(clean.pe.norm())
    assert float(hurt.pe.abs().max()) == float(clean.pe.abs().max())
    x, _ = data(99)
    with torch.no_grad():
        hurt.pe.copy_(clean.pe)
        same = hurt(x)
        flip_sign(hurt.pe, 2 * WIDTH)
        assert not torch.equal(hurt(x), same) and torch.isfinite(hurt(x)).all()
    assert not hits(twin)
    # changed at step 11's reading, held still at 12's: named there, and held
    assert (12, "weights-changed", "pe") in hits(verdicts)
    assert not [h for h in hits(verdicts) if h[0] < 12]
    saves = {s.step: s for s in read_ledger(tmp_path / "hurt").saves}
    assert saves[8].outcome == SaveOutcome.VERIFIED
    assert saves[12].outcome == SaveOutcome.UNHEALTHY and "pe" in saves[12].detail
    assert resume_choice(tmp_path / "hurt").record.step == 8
    assert {s.outcome for s in read_ledger(tmp_path / "clean").saves} == {SaveOutcome.VERIFIED}


def test_a_flip_between_the_last_step_and_a_save_is_never_sealed(tmp_path):
    def fault(model, step):
        if step == 9:
            flip_sign(model.pe, 2 * WIDTH)

    train(tmp_path, Positional(), 10, fault, saves=(5, 9))
    saves = {s.step: s for s in read_ledger(tmp_path).saves}
    assert saves[5].outcome == SaveOutcome.VERIFIED
    assert saves[9].outcome == SaveOutcome.UNHEALTHY
    assert "weights-changed on pe" in saves[9].detail


class Ordinary(nn.Module):
    """BatchNorm, a fixed `inv_freq`, an EMA buffer written by every forward, a running
    normaliser that starts collecting at step 12, a table a schedule refreshes every 10 steps,
    and an integer call counter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(LENGTH * WIDTH, 8)
        self.norm = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 1)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8))
        self.register_buffer("ema", torch.zeros(8))
        self.register_buffer("sumsq", torch.zeros(()))
        self.register_buffer("every10", torch.ones(8))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.lin(x.flatten(1)))
        if self.training:
            with torch.no_grad():
                self.calls += 1
                self.ema.mul_(0.9).add_(0.1 * h.mean(0))
                if self.calls > 12:
                    self.sumsq += (h * h).mean()
                if self.calls % 10 == 0:
                    self.every10.copy_(h.abs().mean(0))
        return self.out(torch.tanh(h * self.inv_freq.repeat(2)))


def test_buffers_an_ordinary_model_writes_are_no_false_alarm_for_good(tmp_path):
    model = Ordinary()
    guard, verdicts = train(tmp_path, model, 45, saves=(5, 25, 35, 44))
    assert int(model.calls) == 46 and float(model.sumsq) > 0
    # only the table refreshed every 10 steps: its first refresh (the forward of step 9)
    # cannot be told from a fault until its second; after that it is its writer's
    assert hits(verdicts) == [(10, "weights-changed", "every10")]
    assert guard.health() == []
    saves = {s.step: s.outcome for s in read_ledger(tmp_path).saves}
    assert saves == {5: SaveOutcome.VERIFIED, 25: SaveOutcome.VERIFIED,
                     35: SaveOutcome.VERIFIED, 44: SaveOutcome.VERIFIED}


def test_a_flip_in_inv_freq_of_an_ordinary_model_is_named(tmp_path):
    def fault(model, step):
        if step == 30:
            flip_sign(model.inv_freq, 1)

    guard, verdicts = train(tmp_path, Ordinary(), 34, fault)
    assert (32, "weights-changed", "inv_freq") in hits(verdicts)
    assert any("inv_freq" in line for line in guard.health())
