"""A corruption the guard named stays in the weights after the step, so it stays in the guard's
health check until `accept_weights`: the ledger does not seal a save made after it, and `run
latest` takes the one before. And the watch follows the tensors the model computes with: a
load with `assign=True`, weights untied, a parameter no optimizer holds. Every fault is the
test's own (its integer view of the weight's bytes, its own assignment), shown to do harm
against a clean twin run the same way."""

from __future__ import annotations

import torch
from guard_support import batch, mse, run, tiny_model
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger, resume_choice

FLIP_STEP = 15


def times_16(tensor: torch.Tensor) -> int:
    """Flip exponent bit 25 of the largest float32 element where it is clear: x16, finite."""
    with torch.no_grad():
        words = tensor.detach().view(-1).view(torch.int32)
        clear = ((words >> 25) & 1) == 0
        index = int(torch.where(clear, tensor.detach().abs().view(-1), -1.0).argmax())
        words[index] ^= 1 << 25
    return index


def flipped_harm(model: nn.Module, clean: nn.Module) -> None:
    """The harm the flip did, against the clean twin: the flipped weight is still ~16x its
    twin's at the end (the steps since moved it little) and the model fits worse."""
    index = int((model[0].weight - clean[0].weight).abs().argmax())
    hurt, twin = (float(m[0].weight.view(-1)[index]) for m in (model, clean))
    assert abs(hurt) > 8 * abs(twin)
    assert eval_loss(model) > eval_loss(clean)


def eval_loss(model: nn.Module) -> float:
    """The loss over steps 100..119's batches, which no run trains on."""
    with torch.no_grad():
        return sum(float(nn.functional.mse_loss(model(x), y))
                   for x, y in map(batch, range(100, 120))) / 20


def train(run_dir, flip=False, assign=False, keep_optimizer=False, steps=24):
    """The documented plain loop with Adam and a save every 4 steps (after the optimizer
    step); at step 10 the weights are reloaded (`assign`: the tensors replaced) and accepted,
    with a fresh optimizer unless `keep_optimizer`; with `flip`, one exponent bit of
    0.weight flips between steps 14 and 15. The model, the verdicts, the saves by step."""
    model = tiny_model()
    guard = Guard(run_dir, GuardConfig(console=False))

    def between(step):
        if flip and step == FLIP_STEP:
            times_16(model[0].weight)
        if step != 10:
            return None
        model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()},
                              assign=assign)
        guard.accept_weights(model)  # as docs/guard.md says after a load
        return None if keep_optimizer else torch.optim.Adam(model.parameters(), lr=1e-2)

    def saving(step, opt):
        if step % 4 == 3:
            save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                 run_dir / "ckpt" / f"step-{step + 1}.pt", step=step + 1, keep=2,
                 run_dir=run_dir)

    verdicts = run(guard, model, range(steps), torch.optim.Adam(model.parameters(), lr=1e-2),
                   between, after_step=saving)
    guard.close()
    return model, verdicts, {s.step: s for s in read_ledger(run_dir).saves}


def rules_at(verdicts, step: int) -> set[str]:
    v = verdicts[step]
    return {b.rule for b in v.alarm.breaches} if v.alarm else set()


def test_a_flip_the_guard_named_under_warn_is_never_sealed_nor_resumed(tmp_path):
    clean_model, clean, clean_saves = train(tmp_path / "clean")
    model, hurt, saves = train(tmp_path / "flipped", flip=True)
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    flipped_harm(model, clean_model)
    assert "weights-changed" in rules_at(hurt, FLIP_STEP)
    assert hurt[FLIP_STEP].take_step  # warn: the step was taken
    # the rules learned the flipped weight as the new normal; the alarm stays held
    assert not any(v.alarm for v in hurt[FLIP_STEP + 2:])
    assert saves[12].outcome == SaveOutcome.VERIFIED
    for step in (16, 20, 24):
        assert saves[step].outcome == SaveOutcome.UNHEALTHY
        assert "weights-changed" in saves[step].detail and "0.weight" in saves[step].detail
    assert resume_choice(tmp_path / "flipped").record.step == 12


def test_accept_weights_ends_the_hold(tmp_path):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(tmp_path, GuardConfig(console=False))
    for step in range(6):
        if step == 3:
            times_16(model[0].weight)
        opt.zero_grad()
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        guard.step(loss, model, opt, step=step)
        opt.step()
    assert any("weights-changed" in line and "held" in line for line in guard.health())
    guard.accept_weights(model)
    assert guard.health() == []
    guard.close()


def test_a_flip_after_an_assign_load_is_named_and_not_sealed(tmp_path):
    clean_model, clean, clean_saves = train(tmp_path / "clean", assign=True)
    model, hurt, saves = train(tmp_path / "flipped", flip=True, assign=True)
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    flipped_harm(model, clean_model)
    assert "weights-changed" in rules_at(hurt, FLIP_STEP)
    assert hurt[FLIP_STEP].alarm.params[0] == "0.weight"
    assert saves[16].outcome == SaveOutcome.UNHEALTHY
    assert resume_choice(tmp_path / "flipped").record.step == 12


def test_a_kept_optimizer_after_an_assign_load_names_the_parameters_it_no_longer_holds(
        tmp_path):
    clean_model, _, _ = train(tmp_path / "clean", assign=True)
    model, hurt, _ = train(tmp_path / "kept", assign=True, keep_optimizer=True)
    # the harm: the old optimizer steps tensors the model no longer has; the model never learns
    assert eval_loss(model) > 1.5 * eval_loss(clean_model)
    orphans = [b for v in hurt if v.alarm for b in v.alarm.breaches
               if b.rule == "param-orphaned"]
    assert {b.param for b in orphans} == {"0.weight", "0.bias", "2.weight", "2.bias"}
    # named once, at the check after the first optimizer step since the load
    assert all(v.step == 11 for v in hurt if v.alarm)


class Tied(nn.Module):
    """An embedding and an output head that share one weight."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(16, 8)
        self.hidden = nn.Linear(8, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.hidden(self.emb(ids))))


def tied_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2000 + step)
    ids = torch.randint(0, 16, (32,), generator=g)
    return ids, (ids * 3 + 1) % 16


def cross_entropy(model: nn.Module, data, step: int) -> torch.Tensor:
    ids, target = data
    return nn.functional.cross_entropy(model(ids), target)


def train_tied(run_dir, untie: bool):
    """The plain loop on `Tied`; with `untie`, the head gets a copy of the shared weight as a
    parameter of its own at step 6 (the test's own fault), which no optimizer holds."""
    model = Tied()
    guard = Guard(run_dir, GuardConfig(console=False))

    def untying(step):
        if untie and step == 6:
            model.head.weight = nn.Parameter(model.emb.weight.detach().clone())

    def saving(step, opt):
        if step % 4 == 3:
            save(model.state_dict(), run_dir / f"step-{step + 1}.pt", step=step + 1,
                 run_dir=run_dir)

    verdicts = run(guard, model, range(16), torch.optim.Adam(model.parameters(), lr=1e-2),
                   untying, tied_batch, cross_entropy, saving)
    guard.close()
    with torch.no_grad():
        final = float(cross_entropy(model, tied_batch(999), 999))
    return final, verdicts, {s.step: s for s in read_ledger(run_dir).saves}


def test_untied_weights_are_named_and_the_saves_after_them_are_not_sealed(tmp_path):
    clean_loss, clean, clean_saves = train_tied(tmp_path / "clean", untie=False)
    loss, hurt, saves = train_tied(tmp_path / "untied", untie=True)
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    assert loss > 1.02 * clean_loss  # the head stopped learning
    named = {(b.rule, b.param) for v in hurt[6:8] if v.alarm for b in v.alarm.breaches}
    assert ("weights-replaced", "head.weight") in named
    assert ("param-orphaned", "head.weight") in named  # at the check after the next step
    assert saves[4].outcome == SaveOutcome.VERIFIED
    assert saves[8].outcome == saves[16].outcome == SaveOutcome.UNHEALTHY
    assert "head.weight" in saves[8].detail
    assert resume_choice(tmp_path / "untied").record.step == 4


def fit_lightning(run, flip: bool):
    """Lightning with the guard's callback and the ledger's checkpoint IO, a checkpoint every
    2 steps; with `flip`, the test's own callback flips a x16 exponent bit of net.0.weight
    before step 3's forward. The model and the saves by step."""
    import warnings

    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from test_guard_integrations import Pairs, _tiny_class
    from torch.utils.data import DataLoader

    from inspector.guard.lightning_callback import GuardCallback
    from inspector.ledger.lightning import LedgerCheckpointIO

    class Fault(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if flip and trainer.global_step == 3:
                times_16(pl_module.net[0].weight)

    model = _tiny_class(pl)()
    trainer = pl.Trainer(max_steps=8, accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=run, plugins=[LedgerCheckpointIO(run_dir=run)],
                         callbacks=[Fault(), GuardCallback(run, GuardConfig(console=False)),
                                    ModelCheckpoint(dirpath=run, every_n_train_steps=2,
                                                    save_top_k=-1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, DataLoader(Pairs(), batch_size=None, shuffle=False))
    return model, {s.step: s for s in read_ledger(run).saves}


def test_lightning_a_flip_the_guard_named_is_not_sealed_after_it(tmp_path):
    clean, clean_saves = fit_lightning(tmp_path / "clean", flip=False)
    model, saves = fit_lightning(tmp_path / "flipped", flip=True)
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    index = int((model.net[0].weight - clean.net[0].weight).abs().argmax())
    hurt, twin = (float(m.net[0].weight.view(-1)[index]) for m in (model, clean))
    assert abs(hurt) > 8 * abs(twin)  # the harm: the flipped weight trains on
    assert saves[2].outcome == SaveOutcome.VERIFIED
    assert all(saves[s].outcome == SaveOutcome.UNHEALTHY for s in (4, 6, 8))
    assert "weights-changed" in saves[4].detail
    assert resume_choice(tmp_path / "flipped").record.step == 2


def train_frozen(run_dir, freeze_at=None, every_other=False, steps=40):
    """The plain loop with Adam; at `freeze_at` the test turns 0.weight's requires_grad off
    (its own fault); with `every_other`, 2.bias is cut from the graph at odd steps (a head
    some batches skip, meant). The model and the verdicts."""
    model = tiny_model()
    guard = Guard(run_dir, GuardConfig(console=False))

    def freezing(step):
        if step == freeze_at:
            model[0].weight.requires_grad_(False)

    def loss_of(model, data, step):
        x, y = data
        if every_other and step % 2:  # the same function, 2.bias outside the graph
            out = nn.functional.linear(model[1](model[0](x)), model[2].weight,
                                       model[2].bias.detach())
            return nn.functional.mse_loss(out, y)
        return mse(model, data, step)

    verdicts = run(guard, model, range(steps), torch.optim.Adam(model.parameters(), lr=1e-2),
                   freezing, loss_of=loss_of)
    guard.close()
    return model, verdicts


def test_a_parameter_that_stops_getting_gradients_is_named_once(tmp_path):
    _, skipping = train_frozen(tmp_path / "skipping", every_other=True)
    assert not [v for v in skipping if v.alarm]  # a gap of one step is meant
    clean, clean_verdicts = train_frozen(tmp_path / "clean")
    model, verdicts = train_frozen(tmp_path / "frozen", freeze_at=10)
    assert not [v for v in clean_verdicts if v.alarm]
    assert eval_loss(model) > 1.1 * eval_loss(clean)  # the harm: it stopped learning
    named = [(v.step, b.rule, b.param) for v in verdicts if v.alarm for b in v.alarm.breaches]
    assert named == [(29, "grad-stopped", "0.weight")]


def train_scaled(run_dir, scale_at=None, steps=26):
    """The plain loop with Adam, a save after every step from 10 on; with `scale_at`, the
    test's own optimizer hook doubles 0.weight inside that optimizer step (after the
    optimizer's write, before the guard's post-step fingerprint): only `update-size` sees it.
    The verdicts and the saves by step."""
    model = tiny_model()
    taken = {"steps": 0}

    def inside_the_step(optimizer, args, kwargs):
        taken["steps"] += 1
        if taken["steps"] == scale_at:
            with torch.no_grad():
                model[0].weight.mul_(2.0)

    def saving(step, opt):
        if step >= 10:
            save(model.state_dict(), run_dir / f"step-{step + 1}.pt", step=step + 1,
                 keep=30, run_dir=run_dir)

    hook = register_optimizer_step_post_hook(inside_the_step)  # before the guard's own
    try:
        guard = Guard(run_dir, GuardConfig(console=False))
        verdicts = run(guard, model, range(steps),
                       torch.optim.Adam(model.parameters(), lr=1e-2), after_step=saving)
        guard.close()
    finally:
        hook.remove()
    return verdicts, {s.step: s for s in read_ledger(run_dir).saves}

def test_a_statistical_weight_alarm_fails_the_saves_of_the_recent_window_only(tmp_path):
    clean, clean_saves = train_scaled(tmp_path / "clean")
    hurt, saves = train_scaled(tmp_path / "scaled", scale_at=12)
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    # optimizer step 12 is taken after guard.step 11; guard.step 12 reads the doubled norm
    assert [(v.step, {b.rule for b in v.alarm.breaches}) for v in hurt if v.alarm] == [
        (12, {"update-size"})]
    assert saves[12].outcome == SaveOutcome.VERIFIED  # saved before the step doubled it
    assert saves[13].outcome == SaveOutcome.UNHEALTHY
    assert "update-size on 0.weight at step 12" in saves[13].detail
    # a heuristic, not held until accept_weights: the recent-alarm window (10 steps) ends
    assert saves[22].outcome == SaveOutcome.UNHEALTHY
    assert all(saves[s].outcome == SaveOutcome.VERIFIED for s in (23, 24, 25, 26))
