"""A save right after the guard named the loss or the gradients is not sealed: the weights saved
are the ones that computed it. The fault here is one no weight rule sees: the test's own
optimizer hook rolls the rows of a weight inside the step (norm and largest |w| unchanged, the
post-step fingerprint taken after it), and only the loss shows it; a skipped non-finite step
changed nothing and does not count."""

from __future__ import annotations

import torch
from guard_support import batch, mse, run, tiny_model
from torch.optim.optimizer import register_optimizer_step_post_hook

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import read_ledger, resume_choice

FAULT_STEP = 150


def train(run_dir, roll=False, nan_step=None):
    """160 steps of the plain loop, saves after steps 149 and 155; with `roll`, the rows of
    the first weight roll by one inside optimizer step `FAULT_STEP`."""
    model = tiny_model()
    taken = {"steps": 0}

    def inside_the_step(optimizer, args, kwargs):
        taken["steps"] += 1
        if roll and taken["steps"] == FAULT_STEP + 1:
            with torch.no_grad():
                weight = model[0].weight
                taken["before"] = (float(weight.norm()), float(weight.abs().max()))
                weight.copy_(weight.roll(1, 0))
                taken["after"] = (float(weight.norm()), float(weight.abs().max()))

    hook = register_optimizer_step_post_hook(inside_the_step)  # before the guard's own
    try:
        guard = Guard(run_dir, GuardConfig())

        def between(step):
            if step in (149, 155):
                save(model.state_dict(), run_dir / f"step-{step}.pt", step=step)

        def data(step):
            x, y = batch(step)
            return (x * float("nan"), y) if step == nan_step else (x, y)

        verdicts = run(guard, model, range(160), torch.optim.Adam(model.parameters(), lr=1e-2),
                       between, data)
    finally:
        hook.remove()
    return model, verdicts, taken, {s.step: s for s in read_ledger(run_dir).saves}


def test_a_save_after_loss_alarms_is_unhealthy_and_never_resumed(tmp_path):
    _, clean, _, clean_saves = train(tmp_path / "clean")
    _, hurt, taken, saves = train(tmp_path / "rolled", roll=True)
    # the harm, under torch: the same norm and largest |w|, a loss many times the clean twin's
    (norm0, top0), (norm1, top1) = taken["before"], taken["after"]
    assert top1 == top0 and abs(norm1 - norm0) < 1e-6 * norm0  # summed in another order
    assert min(v.loss for v in hurt[151:156]) > 5 * max(v.loss for v in clean[151:156])
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    named = {b.rule for v in hurt[151:156] if v.alarm for b in v.alarm.breaches}
    assert named and all(rule.startswith("loss") for rule in named)
    assert saves[149].outcome == SaveOutcome.VERIFIED
    assert saves[155].outcome == SaveOutcome.UNHEALTHY
    assert "on the loss at step 154" in saves[155].detail
    assert resume_choice(tmp_path / "rolled").record.step == 149


def test_a_skipped_nonfinite_step_does_not_fail_the_next_save(tmp_path):
    _, verdicts, _, saves = train(tmp_path, nan_step=152)
    alarmed = [v for v in verdicts if v.alarm]
    assert [(v.step, v.alarm.action) for v in alarmed] == [(152, "skip")]
    assert saves[155].outcome == SaveOutcome.VERIFIED


def train_distilled(run_dir, inf_at=None, steps=20):
    """A student learning from a frozen teacher outside the guarded model (saved beside it,
    as a resumable distillation run keeps it); with `inf_at`, one teacher weight turns +Inf
    before that step (the test's own write): every later loss is NaN and every step skipped.
    The verdicts and the saves by step."""
    student = tiny_model()
    # another architecture: no tensor of it mirrors the student's (the ledger's EMA check)
    teacher = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(),
                                  torch.nn.Linear(16, 1)).requires_grad_(False)
    guard = Guard(run_dir, GuardConfig(console=False))

    def poisoning(step):
        if step == inf_at:
            with torch.no_grad():
                teacher[2].weight[0, 0] = float("inf")

    def distilled(model, data, step):
        x, _ = data
        return mse(model, data, step) + torch.nn.functional.mse_loss(model(x), teacher(x))

    def saving(step, opt):
        if step % 4 == 3:
            save({"student": student.state_dict(), "teacher": teacher.state_dict()},
                 run_dir / f"step-{step + 1}.pt", step=step + 1, keep=5, run_dir=run_dir)

    verdicts = run(guard, student, range(steps),
                   torch.optim.Adam(student.parameters(), lr=1e-2), poisoning,
                   loss_of=distilled, after_step=saving)
    guard.close()
    return verdicts, {s.step: s for s in read_ledger(run_dir).saves}


def test_a_state_that_computes_no_finite_loss_step_after_step_is_not_sealed(tmp_path):
    clean, clean_saves = train_distilled(tmp_path / "clean")
    hurt, saves = train_distilled(tmp_path / "inf", inf_at=9)
    assert not [v for v in clean if v.alarm]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in clean_saves.values())
    assert all(not v.take_step for v in hurt[9:])  # nothing reaches the student's weights
    assert saves[8].outcome == SaveOutcome.VERIFIED
    # saved after steps 9-11: three skipped in a row
    assert saves[12].outcome == saves[16].outcome == saves[20].outcome == SaveOutcome.UNHEALTHY
    assert "the last 3 steps were all skipped for a non-finite loss" in saves[12].detail
    assert resume_choice(tmp_path / "inf").record.step == 8
