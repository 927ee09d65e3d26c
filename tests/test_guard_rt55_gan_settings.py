"""Two optimizers of one shape are two optimizers: a GAN's generator and discriminator, each with
its own Adam (the documented 'Several models' usage), may differ in a setting no schedule
writes (beta2 0.99 against 0.999). Each optimizer has its own baseline (by identity in the
guard's process, by its key in the saved state at a save), so neither is compared with the
other's, while a flipped setting of either is still named. Each fault is the test's own."""

from __future__ import annotations

import pytest
import torch
from guard_support import alarms, flip_float
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger
from inspector.run.optimizer_settings import saved_problems


def players(beta2_g: float):
    """D and G (four tensors each: one param-group shape) with their own Adams."""
    torch.manual_seed(0)
    d = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    g = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, beta2_g))
    return d, g, opt_d, opt_g


def gan(run_dir, beta2_g, steps=8, fault=None, saves=(3, 7), loaded=None):
    """The alternating loop with one guard, saving both players and both optimizers;
    `fault(opt_d, opt_g, step)` runs before each step; `loaded`: a state to start from."""
    d, g, opt_d, opt_g = players(beta2_g)
    if loaded is not None:
        for obj, key in ((d, "D"), (g, "G"), (opt_d, "optD"), (opt_g, "optG")):
            obj.load_state_dict(loaded[key])
    guard = Guard(run_dir, GuardConfig(console=False))
    bce = nn.BCEWithLogitsLoss()
    gen = torch.Generator().manual_seed(1)
    state = None
    for step in range(steps):
        if fault is not None:
            fault(opt_d, opt_g, step)
        real, z = torch.randn(16, 2, generator=gen) + 2, torch.randn(16, 4, generator=gen)
        loss_d = bce(d(real), torch.ones(16, 1)) + bce(d(g(z).detach()), torch.zeros(16, 1))
        opt_d.zero_grad()
        loss_d.backward()
        if guard.step(loss_d, d, opt_d).take_step:
            opt_d.step()
        loss_g = bce(d(g(z)), torch.ones(16, 1))
        opt_g.zero_grad()
        loss_g.backward()
        if guard.step(loss_g, g, opt_g).take_step:
            opt_g.step()
        if step in saves:
            state = {"D": d.state_dict(), "G": g.state_dict(), "optD": opt_d.state_dict(),
                     "optG": opt_g.state_dict()}
            save(state, run_dir / f"step-{step}.pt", step=step, run_dir=run_dir)
    guard.close()
    return state


def outcomes(run_dir) -> dict[int, SaveOutcome]:
    return {s.step: s.outcome for s in read_ledger(run_dir).saves}


@pytest.mark.parametrize("beta2_g", [0.999, 0.99])
def test_two_adams_of_one_shape_with_their_own_beta2_raise_nothing(tmp_path, beta2_g):
    gan(tmp_path, beta2_g)
    assert alarms(tmp_path) == []
    assert outcomes(tmp_path) == {3: SaveOutcome.VERIFIED, 7: SaveOutcome.VERIFIED}


@pytest.mark.parametrize("who", ["D", "G"])
def test_a_flipped_eps_of_either_optimizer_is_named_and_never_sealed(tmp_path, who):
    def fault(opt_d, opt_g, step):
        if step == 5:
            group = (opt_d if who == "D" else opt_g).param_groups[0]
            group["eps"] = flip_float(group["eps"], 55)  # 1e-8 -> 2.56e-6: finite, in bounds

    gan(tmp_path, 0.99, fault=fault)
    hits = [(a["step"], a["rule"], a.get("param")) for a in alarms(tmp_path)]
    assert hits and {h[1:] for h in hits} == {("optimizer-setting", "param_groups.0.eps")}
    assert min(h[0] for h in hits) == 10  # two guard.steps a loop step: loop step 5
    assert outcomes(tmp_path) == {3: SaveOutcome.VERIFIED, 7: SaveOutcome.UNHEALTHY}


def test_a_restart_compares_each_optimizer_with_its_own_first_values(tmp_path):
    state = gan(tmp_path, 0.99, saves=(7,))
    gan(tmp_path, 0.99, steps=3, saves=(2,), loaded=state)  # a clean restart
    assert alarms(tmp_path) == []
    state["optG"]["param_groups"][0]["eps"] = flip_float(1e-8, 55)  # flipped in the file
    gan(tmp_path, 0.99, steps=3, saves=(), loaded=state)
    hits = {(a["rule"], a.get("param")) for a in alarms(tmp_path)}
    assert hits == {("optimizer-setting", "param_groups.0.eps")}


def test_a_save_knows_each_optimizer_by_its_key_without_a_guard(tmp_path):
    _, _, opt_d, opt_g = players(0.99)
    groups = {"optD.": opt_d.state_dict()["param_groups"],
              "optG.": opt_g.state_dict()["param_groups"]}
    for _ in range(2):  # the first save journals each as its own baseline, the next matches
        assert [saved_problems(g, tmp_path, key) for key, g in groups.items()] == [[], []]
    flipped = [dict(groups["optG."][0], betas=(0.5, flip_float(0.99, 53)))]
    [line] = saved_problems(flipped, tmp_path, "optG.")
    assert "betas.1" in line and "0.99" in line
    assert saved_problems(groups["optD."], tmp_path, "optD.") == []


def test_a_gan_saved_with_the_ledger_alone_keeps_each_optimizers_baseline(tmp_path):
    """No guard in the process: the ledger's own check before each seal knows each optimizer
    by its key in the saved state (`optD.`, `optG.`), so two Adams of one shape with their
    own beta2 seal clean, and a flipped setting of one is still never sealed."""
    d, g, opt_d, opt_g = players(0.99)

    def state():
        return {"D": d.state_dict(), "G": g.state_dict(), "optD": opt_d.state_dict(),
                "optG": opt_g.state_dict()}

    for step in (1, 2):
        save(state(), tmp_path / f"step-{step}.pt", step=step, run_dir=tmp_path)
    opt_g.param_groups[0]["eps"] = flip_float(1e-8, 55)
    save(state(), tmp_path / "step-3.pt", step=3, run_dir=tmp_path)
    assert outcomes(tmp_path) == {1: SaveOutcome.VERIFIED, 2: SaveOutcome.VERIFIED,
                                  3: SaveOutcome.UNHEALTHY}
