"""The ledger asks every live guard connected to a save (`run.health_gate`): one whose run
folder is the save's or above it (a ledger whose run folder defaults to the checkpoint's folder,
`RUN/ckpt`, beside a guard of `RUN`), or one that watches the saved model, wherever it writes;
a guard connected by neither is said on stderr, never passed over in silence."""

from __future__ import annotations

import torch
from guard_support import run, tiny_model

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger


def train(run_dir, target, fault: bool, run_folder=None, saved=None):
    """Eight guarded steps, with a memory fault between steps 5 and 6 (one weight's sign bit,
    the test's own) when `fault`, and a save of the model's state at step 7 (`saved(model)`:
    another state) to `target`; the save's record and the verdicts."""
    model = tiny_model()
    guard = Guard(run_dir, GuardConfig(console=False))

    def flip_sign(step):
        if step == 6 and fault:
            with torch.no_grad():
                model[0].weight.view(-1).view(torch.int32)[3] ^= -(1 << 31)

    def keep(step, opt):
        if step == 7:
            state = model.state_dict() if saved is None else saved(model)
            kept.append(save(state, target, step=step, run_dir=run_folder))

    kept: list = []
    verdicts = run(guard, model, range(8), before_step=flip_sign, after_step=keep)
    guard.close()
    return kept[0], verdicts


def test_a_save_into_a_folder_inside_the_guards_run_asks_the_guard(tmp_path):
    bad, verdicts = train(tmp_path / "bad", tmp_path / "bad" / "ckpt" / "s.pt", fault=True)
    good, _ = train(tmp_path / "good", tmp_path / "good" / "ckpt" / "s.pt", fault=False)
    assert verdicts[6].alarm is not None
    assert verdicts[6].alarm.breaches[0].rule == "weights-changed"
    assert good.outcome == SaveOutcome.VERIFIED
    assert bad.outcome == SaveOutcome.UNHEALTHY and "weights-changed" in bad.detail
    assert [s.outcome for s in read_ledger(tmp_path / "bad" / "ckpt").saves] == [
        SaveOutcome.UNHEALTHY]


def test_a_save_of_the_watched_model_elsewhere_asks_the_guard(tmp_path):
    bad, _ = train(tmp_path / "guard", tmp_path / "elsewhere" / "s.pt", fault=True,
                   run_folder=tmp_path / "elsewhere")
    good, _ = train(tmp_path / "guard2", tmp_path / "elsewhere2" / "s.pt", fault=False,
                    run_folder=tmp_path / "elsewhere2")
    assert good.outcome == SaveOutcome.VERIFIED
    assert bad.outcome == SaveOutcome.UNHEALTHY and "weights-changed" in bad.detail


def test_a_guard_the_save_does_not_reach_is_said(tmp_path, capsys):
    """A copy of the weights (not the watched tensors) saved to another folder: the guard is
    not asked, and stderr says so once."""
    def copy(model):
        return {k: v.clone() for k, v in model.state_dict().items()}

    record, _ = train(tmp_path / "guard", tmp_path / "other" / "s.pt", fault=True,
                      run_folder=tmp_path / "other", saved=copy)
    said = [line for line in capsys.readouterr().err.splitlines() if "was not asked" in line]
    assert record.outcome == SaveOutcome.VERIFIED
    assert len(said) == 1 and str(tmp_path / "guard") in said[0]
