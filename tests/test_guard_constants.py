"""Integer buffers are weights too: a model's position ids or index tables are saved in every
checkpoint and read by every forward, but no optimizer steps them and no forward writes them,
so one flipped bit there moves neither the norms nor the largest |w| of any float tensor. The
guard fingerprints them once and compares at every reading; counters a forward writes (a norm
layer's `num_batches_tracked`, torch's fake-quantizers, a model's own) are not faults. Each
fault is the test's own write into the buffer."""

from __future__ import annotations

import pytest
import torch
from guard_support import run, weights_reader  # noqa: F401
from torch import nn
from torch.ao.quantization import FakeQuantize, disable_observer

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger, resume_choice

pytestmark = pytest.mark.usefixtures("weights_reader")  # inline and in the background

LENGTH = 8


class Positions(nn.Module):
    """Token and position embeddings over `position_ids` (a buffer, as transformers keeps it),
    a forward-written counter, a fake-quantizer and a BatchNorm: every kind of integer buffer
    a forward may or may not write."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tok = nn.Embedding(16, 8)
        self.pos = nn.Embedding(LENGTH, 8)
        self.register_buffer("position_ids", torch.arange(LENGTH))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.quant = FakeQuantize()
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8 * LENGTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        h = self.tok(x) + self.pos(self.position_ids)
        h = self.norm(self.quant(h).transpose(1, 2)).transpose(1, 2)
        return self.head(torch.tanh(h).flatten(1))


def tokens(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's batch: the target is the token at position 2."""
    g = torch.Generator().manual_seed(500 + step)
    x = torch.randint(0, 16, (16, LENGTH), generator=g)
    return x, x[:, 2:3].float() / 16


def train(run_dir, steps, fault=None, saves=()):
    """The plain loop with Adam; the fake-quantizer's observer is switched off after step 10
    (the QAT recipe); `fault(model, step)` runs after step `step`, before its save."""
    model = Positions()
    guard = Guard(run_dir, GuardConfig())

    def between(step):
        if step == 11:
            model.apply(disable_observer)
        if step and fault is not None:
            fault(model, step - 1)
        if step - 1 in saves:
            save(model.state_dict(), run_dir / f"step-{step - 1}.pt", step=step - 1)

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    verdicts = run(guard, model, range(steps + 1), opt, between, tokens)[:steps]
    return guard, model, verdicts


def test_counters_a_forward_or_a_switch_writes_raise_nothing(tmp_path, capfd):
    guard, model, verdicts = train(tmp_path, 40)
    assert not [v for v in verdicts if v.alarm]
    assert guard.health() == []
    assert int(model.calls) == 41 and int(model.norm.num_batches_tracked) == 41
    assert int(model.quant.observer_enabled) == 0
    assert "inspector.guard" not in capfd.readouterr().err


def test_a_flipped_bit_in_position_ids_is_named_and_never_sealed(tmp_path):
    def fault(model, step):
        if step == 20:
            model.position_ids[2] ^= 1  # one bit: position 2 now reads position 3's embedding

    guard, model, verdicts = train(tmp_path, 24, fault, saves=(18, 22))
    # the harm, under torch: the same weights and input, another output
    x, _ = tokens(99)
    model.eval()
    with torch.no_grad():
        hurt = model(x)
        model.position_ids.copy_(torch.arange(LENGTH))
        clean = model(x)
    assert not torch.equal(hurt, clean) and torch.isfinite(hurt).all()
    model.position_ids[2] = 3
    hit = next(v for v in verdicts if v.alarm)
    # changed at step 21's reading, named at 22's where it held still (a counter would not)
    assert hit.step == 22
    assert ("weights-changed", "position_ids") in {(b.rule, b.param) for b in hit.alarm.breaches}
    assert any("weights-changed on position_ids" in p for p in guard.health())
    saves = {s.step: s for s in read_ledger(tmp_path).saves}
    assert saves[18].outcome == SaveOutcome.VERIFIED
    assert saves[22].outcome == SaveOutcome.UNHEALTHY
    assert "position_ids" in saves[22].detail
    assert resume_choice(tmp_path).record.step == 18


def test_a_flip_in_the_first_steps_is_named_once_they_are_read(tmp_path):
    def fault(model, step):
        if step == 0:  # between the guard's first two readings: not a counter, it holds
            model.position_ids[5] ^= 1 << 1

    _, _, verdicts = train(tmp_path, 8, fault)
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 3  # the last of the readings that tell counters from faults
    assert ("weights-changed", "position_ids") in {(b.rule, b.param) for b in hit.alarm.breaches}


def test_accept_weights_takes_a_deliberate_change(tmp_path):
    model = Positions()
    guard = Guard(tmp_path, GuardConfig())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    run(guard, model, range(4), opt, data=tokens)
    with torch.no_grad():
        model.position_ids.copy_(torch.arange(LENGTH).flip(0))
    guard.accept_weights(model)
    assert guard.health() == []
    verdicts = run(guard, model, range(4, 8), opt, data=tokens)
    assert not [v for v in verdicts if v.alarm]
