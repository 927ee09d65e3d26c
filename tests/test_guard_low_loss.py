"""A run trained to near-zero loss (`rules.StartScale`): its recent losses are so low that an
ordinary hard batch is 30x their median, which the spike rules called a spike (every save of
the next steps unhealthy) though the model is healthy; a spike past the run's starting scale
is still named."""

from __future__ import annotations

import torch
from guard_support import run, tiny_model
from torch import nn

from inspector.guard.guard import Guard, GuardConfig

TEACHER = tiny_model(seed=7)


def fitted(step: int, jump: float = 0.0):
    """A batch the student can fit (the teacher's outputs), one sample of every 23rd batch with
    a label it cannot (an ordinary hard sample); `jump` added to every label at step 500."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(16, 4, generator=g)
    with torch.no_grad():
        y = TEACHER(x)
    if step % 23 == 0:
        y[0] += 0.4
    if step == 500:
        y += jump
    return x, y


def train(run_dir, jump: float = 0.0):
    model = tiny_model()
    guard = Guard(run_dir, GuardConfig(console=False))
    verdicts = run(guard, model, range(560), opt=torch.optim.Adam(model.parameters(), lr=1e-2),
                   data=lambda step: fitted(step, jump))
    return model, verdicts


def test_a_run_trained_to_near_zero_loss_raises_no_spike_alarm_on_its_hard_batches(tmp_path):
    model, verdicts = train(tmp_path)
    late = sorted(v.loss for v in verdicts[300:])
    hard = [v.loss for v in verdicts[300:] if v.step % 23 == 0]
    assert late[len(late) // 2] < 1e-3  # the median late loss: near zero
    assert min(hard) > 30 * late[len(late) // 2]  # each hard batch is a x30 "spike"
    assert [v.step for v in verdicts if v.alarm] == []
    x, _ = fitted(10_000)  # the model is healthy: it fits held-out inputs
    with torch.no_grad():
        assert nn.functional.mse_loss(model(x), TEACHER(x)).item() < 1e-3


def test_a_spike_past_the_runs_starting_scale_is_still_named(tmp_path):
    _, verdicts = train(tmp_path, jump=3.0)
    first = max(v.loss for v in verdicts[:5])
    hit = [v for v in verdicts if v.alarm]
    assert hit[0].step == 500 and hit[0].loss > first / 2  # (the step taken under warn unsettles
    # the next ones)
    assert {"loss-spike-median", "loss-spike-ema"} <= {b.rule for b in hit[0].alarm.breaches}
