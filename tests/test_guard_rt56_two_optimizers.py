"""One model stepped by two optimizers (a body's SGD and a head's Adam, the Muon+AdamW and
encoder-decoder pattern): each optimizer's step retakes the fingerprints of its own tensors only,
so a bit flipped in the first's tensors before the second steps is still named (red team 56,
finding 3); the second optimizer, not yet stepped at the first check, does not make its tensors
look orphaned (finding 5). Each fault is the test's own, beside a clean same-seed twin."""

from __future__ import annotations

import pytest
import torch
from guard_support import alarms, batch, tiny_model, weights_reader  # noqa: F401
from torch import nn

from inspector.guard.guard import Guard, GuardConfig
from inspector.guard.weights import fingerprint as fingerprint_module

pytestmark = pytest.mark.usefixtures("weights_reader")  # inline and in the background

FAULT_STEP = 5


def sign_flip(weight: torch.Tensor) -> None:
    """The test's fault: the sign bit of the tensor's largest |w|."""
    with torch.no_grad():
        i = int(weight.abs().view(-1).argmax())
        weight.view(-1).view(torch.int32)[i] ^= -2**31


def train(run_dir, fault: str | None, steps: int = 10, every: int = 1):
    """The plain loop with two optimizers; `fault`: None, "between" (after the body's step,
    before the head's) or "after" (after both). The guard is given the body's optimizer only,
    as a loop that checks once per step does. The verdicts and the model."""
    model = tiny_model()
    body = torch.optim.SGD(model[0].parameters(), lr=0.05, momentum=0.9)
    head = torch.optim.Adam(model[2].parameters(), lr=1e-2)
    guard = Guard(run_dir, GuardConfig(console=False, fingerprint_every=every))
    verdicts = []
    for step in range(steps):
        body.zero_grad()
        head.zero_grad()
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        verdicts.append(guard.step(loss, model, body, step=step))
        body.step()
        if fault == "between" and step == FAULT_STEP:
            sign_flip(model[0].weight)
        head.step()
        if fault == "after" and step == FAULT_STEP:
            sign_flip(model[0].weight)
    guard.close()
    return verdicts, model


def named(verdicts) -> set[tuple[int, str, str | None]]:
    return {(v.step, b.rule, b.param) for v in verdicts if v.alarm for b in v.alarm.breaches}


@pytest.mark.parametrize("every", [1, 2])
@pytest.mark.parametrize("fault", ["between", "after"])
def test_a_flip_in_the_first_optimizers_tensor_is_named_whichever_optimizer_steps_after_it(
        tmp_path, fault, every):
    clean, clean_model = train(tmp_path / "clean", None, every=every)
    hurt, model = train(tmp_path / "hurt", fault, every=every)
    assert not named(clean)
    # the harm: the flipped weight is in the model the run goes on with
    assert not torch.equal(model[0].weight, clean_model[0].weight)
    # with every=2 the fingerprints are taken in the periods of checks 1, 3, 5...: step 5's
    assert named(hurt) == {(FAULT_STEP + 1, "weights-changed", "0.weight")}
    [record] = alarms(tmp_path / "hurt")
    assert record["param"] == "0.weight" and record["attribution"] == "device"


def test_the_second_optimizers_tensors_are_not_orphaned_before_it_steps(tmp_path):
    verdicts, _ = train(tmp_path, None)
    assert not [v for v in verdicts if v.alarm]


def test_a_tensor_no_optimizer_holds_is_still_named_orphaned(tmp_path):
    """The class the orphan rule is for stays seen: a parameter that gets gradients and that
    neither optimizer holds is named, once, at the check after the first optimizer step."""
    model = tiny_model()
    body = torch.optim.SGD(model[0].parameters(), lr=0.05)
    head = torch.optim.Adam([model[2].weight], lr=1e-2)  # 2.bias left out: the fault
    guard = Guard(tmp_path, GuardConfig(console=False))
    verdicts = []
    for step in range(4):
        body.zero_grad()
        head.zero_grad()
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        verdicts.append(guard.step(loss, model, body, step=step))
        body.step()
        head.step()
    guard.close()
    assert named(verdicts) == {(1, "param-orphaned", "2.bias")}


def test_a_flip_in_a_frozen_tensor_is_named_once_and_held(tmp_path):
    """A tensor no optimizer steps keeps its fingerprint; its change is named at the next
    check, once (the check's fingerprint is expected from then on), and the health check holds
    it."""
    model = tiny_model()
    model[2].requires_grad_(False)
    opt = torch.optim.SGD(model[0].parameters(), lr=0.05)
    guard = Guard(tmp_path, GuardConfig(console=False, action="skip"))
    verdicts = []
    for step in range(8):
        opt.zero_grad()
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        verdicts.append(guard.step(loss, model, opt, step=step))
        if verdicts[-1].take_step:
            opt.step()
        if step == FAULT_STEP:
            sign_flip(model[2].weight)
    assert named(verdicts) == {(FAULT_STEP + 1, "weights-changed", "2.weight")}
    assert any("2.weight" in line for line in guard.health())
    guard.close()


def test_each_tensor_is_fingerprinted_once_per_step_across_the_optimizers(tmp_path, monkeypatch):
    """Per-optimizer fingerprints add no pass over the weights: after the first step, the two
    post-step hooks together read each tensor once."""
    read: list[int] = []
    real = fingerprint_module.fingerprint

    def counting(tensors):
        read.extend(t.data_ptr() for t in tensors)
        return real(tensors)

    monkeypatch.setattr(fingerprint_module, "fingerprint", counting)
    model = tiny_model()
    body = torch.optim.SGD(model[0].parameters(), lr=0.05)
    head = torch.optim.Adam(model[2].parameters(), lr=1e-2)
    guard = Guard(tmp_path, GuardConfig(console=False, overlap=False))
    for step in range(3):
        body.zero_grad()
        head.zero_grad()
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        guard.step(loss, model, body, step=step)
        read.clear()
        body.step()
        head.step()
        if step:
            assert sorted(read) == sorted(p.data_ptr() for p in model.parameters())
    guard.close()
