"""A gradient scaler's saved state is checked before the ledger seals it: a flipped exponent bit
in its scale leaves every number of the checkpoint finite, and the first step after a resume
turns the weights NaN."""

from __future__ import annotations

import pytest
import torch
from guard_support import batch, flip_float, tiny_model
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.ledger import save
from inspector.ledger.health import scaler_problems
from inspector.run.checkpoints import resume_choice


def steps(model, optimizer, scaler, count, first=0):
    """`count` steps of the documented mixed-precision loop (GradScaler on the CPU)."""
    for step in range(first, first + count):
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        scaler.scale(nn.functional.mse_loss(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()


def test_a_flipped_scale_is_never_sealed_and_its_harm_is_real(tmp_path):
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    steps(model, optimizer, scaler, 5)
    good = save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scaler": scaler.state_dict()}, tmp_path / "step-5.pt", step=5)
    assert good.outcome == SaveOutcome.VERIFIED
    state = scaler.state_dict()
    assert state["scale"] == 65536.0
    state["scale"] = flip_float(state["scale"], 62)  # 2^16 -> 2^-1008: finite, 0 as float32
    bad = save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": state}, tmp_path / "step-6.pt", step=6)
    assert bad.outcome == SaveOutcome.UNHEALTHY
    assert ("scaler.gradient scaler: scale 3.64556e-304 is not a positive normal float32"
            in bad.detail)
    assert resume_choice(tmp_path).record.step == 5
    # the harm, under torch's own GradScaler: resumed from that state (a float32 scale of 0:
    # zero gradients, unscaled by 1/0), one step turns the weights NaN; the clean twin trains
    for scaler_state, finite in ((scaler.state_dict(), True), (state, False)):
        twin = tiny_model()
        twin.load_state_dict(model.state_dict())
        resumed = torch.amp.GradScaler("cpu")
        resumed.load_state_dict(scaler_state)
        steps(twin, torch.optim.SGD(twin.parameters(), lr=0.05), resumed, 1, first=6)
        moved = any(not torch.equal(p, q) for p, q in zip(twin.parameters(),
                                                            model.parameters(), strict=True))
        assert moved and all(bool(torch.isfinite(p).all()) for p in twin.parameters()) == finite


@pytest.mark.parametrize("change", [
    {"growth_factor": 1.0}, {"backoff_factor": 1.5}, {"_growth_tracker": 2000},
    {"_growth_tracker": -1}, {"growth_interval": 0}, {"scale": float("inf")}, {"scale": -2.0},
])
def test_each_value_the_scaler_never_holds_is_named(change):
    state = {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
             "growth_interval": 2000, "_growth_tracker": 3}
    assert scaler_problems({"scaler": state}) == []
    assert len(scaler_problems({"scaler": {**state, **change}})) == 1


def test_states_a_scaler_writes_raise_nothing():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 40, growth_interval=3)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for step in range(12):
        steps(model, optimizer, scaler, 1, first=step)
        seen.append(scaler.state_dict())
    assert len({s["scale"] for s in seen}) > 1  # it grew every 3 steps
    assert all(scaler_problems({"scaler": s}) == [] for s in seen)
    off = torch.amp.GradScaler("cpu", enabled=False)
    assert scaler_problems({"scaler": off.state_dict()}) == []
