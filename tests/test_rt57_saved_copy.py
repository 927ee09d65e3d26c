"""A fault in the copy being saved, not in the live model, is never sealed (red team 57,
finding 1). The save is the documented one (`inspector.ledger.save(state, path, run_dir=RUN)`
beside a `Guard(RUN)` in the plain loop) of a staged copy (`{k: v.detach().clone()}`, as an
async checkpoint stages one); the fault is the test's own bit flip in that copy, after the
guard's last step, and each faulty run has a clean same-seed twin. The guard's save-time
check holds every saved tensor carrying a watched name to the guard's fingerprint of the live
weights at the save and to the learned largest |w| bound; an EMA copy and a copy staged a step
before the save are not the live weights and stay sealed.
"""

from __future__ import annotations

import pytest
import torch
from guard_support import batch, tiny_model, weights_reader  # noqa: F401
from torch import nn

from inspector.cli import main
from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save

STEPS = 10


class Scaled(nn.Module):
    """A tiny MLP whose output is multiplied by a buffer no forward writes (a constant)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_model()
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * self.scale.mean()


def flip(tensor: torch.Tensor, index: int, bit: int) -> None:
    """The test's own fault: one bit of one float32 element flipped in place."""
    tensor.view(-1).view(torch.int32)[index] ^= 1 << bit


def train(run, model: nn.Module | None = None, steps: int = STEPS):
    """The documented loop: guard.step after backward, the optimizer step when it says so."""
    model = model if model is not None else tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    guard = Guard(run, GuardConfig(console=False))
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if guard.step(loss, model, opt, step=step).take_step:
            opt.step()
        with torch.no_grad():
            for k, v in model.state_dict().items():
                ema[k].lerp_(v, 0.1)
    return guard, model, opt, ema


def staged(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def loss_of(model: nn.Module, weights: dict[str, torch.Tensor]) -> float:
    """The eval loss of `weights` loaded into a model of the same kind."""
    twin = type(model)() if not isinstance(model, nn.Sequential) else tiny_model()
    twin.load_state_dict(weights)
    x, y = batch(99)
    with torch.no_grad():
        return float(nn.functional.mse_loss(twin(x), y))


def largest_index(t: torch.Tensor, below: float = float("inf")) -> int:
    """The element of largest |w| below `below` (0.5: bit 30 set keeps it finite, x2^128)."""
    magnitude = t.detach().abs().view(-1)
    return int(torch.where(magnitude < below, magnitude, 0.0).argmax())


@pytest.mark.usefixtures("weights_reader")
@pytest.mark.parametrize(("bit", "below"), [(30, 0.5), (31, float("inf"))])
def test_a_weight_flipped_in_the_staged_copy_is_unhealthy_and_run_latest_skips_it(
        tmp_path, capsys, bit, below):
    """Bit 30 (x2^128, finite, past the bound) and bit 31 (the sign of the largest weight:
    within the bound, only the bytes show it) of one element of the copy's `2.weight`."""
    records = {}
    for faulty in (False, True):
        run = tmp_path / ("faulty" if faulty else "clean")
        guard, model, opt, _ = train(run)
        first = save({"model": staged(model), "optimizer": opt.state_dict()},
                     run / "step-9.pt", step=9, run_dir=run)
        assert first.outcome == SaveOutcome.VERIFIED
        copy = staged(model)
        if faulty:
            flip(copy["2.weight"], largest_index(copy["2.weight"], below), bit)
        records[faulty] = (save({"model": copy, "optimizer": opt.state_dict()},
                                run / "step-10.pt", step=10, run_dir=run),
                           loss_of(model, dict(model.state_dict())), loss_of(model, copy))
        guard.close()
    (clean, live0, saved0), (bad, live1, saved1) = records[False], records[True]
    assert clean.outcome == SaveOutcome.VERIFIED and live0 == saved0 == live1
    assert saved1 != live1  # the harm: the copy is not the model the run trained
    assert copy["2.weight"].isfinite().all()
    assert bad.outcome == SaveOutcome.UNHEALTHY
    assert "saved-copy on model.2.weight: its bytes differ from the live weights" in bad.detail
    assert ("past the bound" in bad.detail) == (bit == 30)
    capsys.readouterr()
    assert main(["run", "latest", str(tmp_path / "faulty")]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("step-9.pt")
    assert "skipped step 10 (step-10.pt.unhealthy): unhealthy at save: " in err
    assert "saved-copy on model.2.weight: its bytes differ" in err


def test_an_ema_and_a_copy_staged_a_step_before_are_sealed_and_a_flipped_ema_is_not(tmp_path):
    """Neither an EMA nor weights staged before the last step are the live bytes: not judged
    as copies; the learned bound still holds them (an EMA of past weights never passes it)."""
    outcomes = {}
    for faulty in (False, True):
        run = tmp_path / str(faulty)
        guard, model, opt, ema = train(run, steps=STEPS - 1)
        early = staged(model)
        loss = nn.functional.mse_loss(model(batch(STEPS)[0]), batch(STEPS)[1])
        opt.zero_grad()
        loss.backward()
        assert guard.step(loss, model, opt, step=STEPS - 1).take_step
        opt.step()
        if faulty:  # 20x its largest: past the learned bound (8x), under the mirror rule's 256x
            ema["2.weight"].view(-1)[largest_index(ema["2.weight"])] *= 20
        state = {"model": staged(model), "ema": ema, "staged_before": early}
        outcomes[faulty] = (save(state, run / "step.pt", step=STEPS, run_dir=run),
                            loss_of(model, ema))
        guard.close()
    (clean, clean_loss), (bad, bad_loss) = outcomes[False], outcomes[True]
    assert clean.outcome == SaveOutcome.VERIFIED, clean.detail
    assert bad_loss > 2 * clean_loss  # the harm: the EMA's eval loss
    assert bad.outcome == SaveOutcome.UNHEALTHY
    assert "saved-copy on ema.2.weight: saved largest |w|" in bad.detail
    assert "256x" not in bad.detail  # the state's own mirror check does not see it
    assert "model." not in bad.detail and "staged_before" not in bad.detail


def test_a_constant_buffer_flipped_in_the_copy_is_unhealthy(tmp_path):
    """A buffer no forward writes (`scale`) is held to the live one's bytes in a copy."""
    outcomes = {}
    for faulty in (False, True):
        run = tmp_path / str(faulty)
        guard, model, _, _ = train(run, Scaled())
        copy = staged(model)
        if faulty:
            flip(copy["scale"], 2, 31)  # its sign: -0.5, within any bound
        outcomes[faulty] = (save({"state_dict": copy}, run / "step.pt", step=STEPS, run_dir=run),
                            loss_of(model, copy), loss_of(model, dict(model.state_dict())))
        guard.close()
    (clean, c_saved, c_live), (bad, b_saved, b_live) = outcomes[False], outcomes[True]
    assert clean.outcome == SaveOutcome.VERIFIED and c_saved == c_live
    assert b_saved != b_live  # the harm
    assert bad.outcome == SaveOutcome.UNHEALTHY
    assert "saved-copy on state_dict.scale: its bytes differ from the live buffer" in bad.detail


def test_two_guarded_models_sharing_names_stay_sealed(tmp_path):
    """Two guarded models whose tensors share names (two `nn.Sequential`s, a GAN's pair), one
    with weights 20x the other's, staged together: neither's copy is bounded by the other's."""
    first, second = tiny_model(0), tiny_model(1)
    with torch.no_grad():
        second[2].weight.mul_(20)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-4) for m in (first, second)]
    guard = Guard(tmp_path, GuardConfig(console=False))
    for step in range(6):
        for model, opt in zip((first, second), opts, strict=True):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(batch(step)[0]), batch(step)[1])
            loss.backward()
            if guard.step(loss, model, opt, step=step).take_step:
                opt.step()
    record = save({"G": staged(first), "D": staged(second)}, tmp_path / "pair.pt", step=6,
                  run_dir=tmp_path)
    assert record.outcome == SaveOutcome.VERIFIED, record.detail
    guard.close()
