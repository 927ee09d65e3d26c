"""One guard over two models that take turns, as a GAN's two halves do (`guard.step(lossD, D,
optD)` then `guard.step(lossG, G, optG)`): each model is watched and judged on its own, though
their tensors share names (both `nn.Sequential`: `0.weight`, `2.bias`). The fault is the
test's own: an exponent bit of one half's weight flipped between iterations."""

from __future__ import annotations

import torch
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger, resume_choice

FLIP_AT = 15


def real(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(64, 2, generator=g) * 0.3 + torch.tensor([1.0, -1.0])


def train_gan(run_dir, flip=None, iterations=24):
    """The two halves stepped in turn under one guard, a save every 8 iterations; with
    `flip` ("G" or "D"), element 5 of that half's 0.weight is multiplied by 2^16 (one
    exponent bit) before iteration `FLIP_AT`. The alarms (iteration, half, rule, tensor)
    and the saves by iteration."""
    torch.manual_seed(0)
    nets = {"G": nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2)),
            "D": nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999))
            for k, m in nets.items()}
    G, D = nets["G"], nets["D"]
    guard = Guard(run_dir, GuardConfig(console=False))
    bce = nn.functional.binary_cross_entropy_with_logits
    alarms = []
    for it in range(iterations):
        if it == FLIP_AT and flip:
            with torch.no_grad():
                nets[flip][0].weight.view(-1)[5] *= 2.0 ** 16
        z = torch.randn(64, 4)
        for half in ("D", "G"):
            opts[half].zero_grad(set_to_none=True)
            if half == "D":
                loss = (bce(D(real(it)), torch.ones(64, 1))
                        + bce(D(G(z).detach()), torch.zeros(64, 1)))
            else:
                loss = bce(D(G(z)), torch.ones(64, 1))
            loss.backward()
            verdict = guard.step(loss, nets[half], opts[half])
            alarms += [(it, half, b.rule, b.param) for b in
                       (verdict.alarm.breaches if verdict.alarm else [])]
            if verdict.take_step:
                opts[half].step()
        if it % 8 == 7:
            save({"G": G.state_dict(), "D": D.state_dict()}, run_dir / f"it-{it + 1}.pt",
                 step=it + 1, keep=5, run_dir=run_dir)
    guard.close()
    return alarms, {s.step: s for s in read_ledger(run_dir).saves}


def test_two_models_on_one_guard_are_judged_each_against_its_own_history(tmp_path):
    alarms, saves = train_gan(tmp_path)
    assert alarms == []
    assert all(s.outcome == SaveOutcome.VERIFIED for s in saves.values())


def test_a_flip_in_either_half_is_named_on_its_own_model_and_not_sealed(tmp_path):
    for half in ("G", "D"):
        alarms, saves = train_gan(tmp_path / half, flip=half)
        assert (FLIP_AT, half, "weights-changed", "0.weight") in alarms
        assert not [a for a in alarms if a[2] == "weights-changed" and a[1] != half]
        assert saves[8].outcome == SaveOutcome.VERIFIED
        assert saves[16].outcome == saves[24].outcome == SaveOutcome.UNHEALTHY
        # D was guarded first, G second: the health check says which model it means
        said = "model 2: " if half == "G" else ""
        assert f"weights-changed: {said}weights on 0.weight" in saves[24].detail
        assert resume_choice(tmp_path / half).record.step == 8
