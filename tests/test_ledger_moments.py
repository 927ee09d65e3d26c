"""The ledger checks the optimizer moments it seals against what their update can write.

Every gradient history passes, including the ones that reach each bound, for each of torch's
Adam-family optimizers, Adamax, RMSprop, Adadelta and Adagrad, in each state dtype. A flip that
the guard would see only at the next step (through the weight it moves) makes the save
unhealthy at once, with or without a guard, in the plain loop and through real Lightning and
transformers Trainers. Each fault is shown to do its harm under torch's own optimizer step;
SGD's momentum and optimizers with other keys or hyper-parameters are not judged."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from guard_support import batch, flip_float, tiny_model, unhealthy_at_step_4
from torch import nn
from torch.utils.data import DataLoader

from inspector.cli import main
from inspector.core.vocabulary import SaveOutcome
from inspector.ledger import save
from inspector.ledger.health.moments import MARGIN, group_problems, local_state, moment_problems
from inspector.run.checkpoints import resume_choice

OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "adamw-amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-3, amsgrad=True),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=1e-3),
    "radam": lambda ps: torch.optim.RAdam(ps, lr=1e-3),
    "adam-betas-0.95": lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.9, 0.95)),
    "adam-for-loop": lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=False),
}
_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def flip(tensor: torch.Tensor, index: int, bit: int) -> None:
    """The test's own fault: one bit of one element, in place."""
    with torch.no_grad():
        tensor.view(-1).view(_INT[tensor.element_size()])[index] ^= 1 << bit


def first_element(moment: torch.Tensor, bit: int, is_set: bool) -> int:
    """The first element whose `bit` is set (or clear): where flipping it shrinks (or enlarges)
    the value."""
    bits = (moment.view(_INT[moment.element_size()]).long() >> bit) & 1
    return int(torch.nonzero(bits == int(is_set))[0])


def bound(optimizer: torch.optim.Optimizer) -> float:
    """C: the largest |m| / sqrt(v) Adam's update can write for the group's betas."""
    b1, b2 = optimizer.param_groups[0]["betas"]
    return (1 - b1) / math.sqrt((1 - b2) * (1 - b1 * b1 / b2))


def largest_ratio(optimizer: torch.optim.Optimizer) -> float:
    state = next(iter(optimizer.state.values()))
    m, v = state["exp_avg"].double(), state["exp_avg_sq"].double()
    seen = v > 0
    return float((m[seen].abs() / v[seen].sqrt()).max()) if bool(seen.any()) else 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_gradient_history_passes_including_the_one_that_reaches_the_bound(name, dtype):
    weight = nn.Parameter(torch.zeros(4096, dtype=dtype))
    optimizer = OPTIMIZERS[name]([weight])
    b1, b2 = optimizer.param_groups[0]["betas"]
    gen = torch.Generator().manual_seed(0)
    tiny = 1e-30 if dtype == torch.float32 else 1e-7
    worst = 0.0
    for t in range(240):
        scale = 1e-3 * (b2 / b1) ** (t % 80)  # growing by b2/b1 a step: the bound's history
        g = torch.randn(4096, generator=gen) * scale
        g[:512] = scale
        g[512:1024] = tiny  # v underflows before m does
        g[1024:1536] *= 1e3 if t == 100 else 1.0
        g[1536:2048] *= t % 2  # rows that get a gradient every other step
        weight.grad = g.to(dtype)
        optimizer.step()
        worst = max(worst, largest_ratio(optimizer))
        if t % 10 == 9:
            assert moment_problems(optimizer.state_dict()) == [], t
    # the history came within 5% of C, so a margin below 1 would have failed here
    assert 0.95 * bound(optimizer) < worst < MARGIN * bound(optimizer)


def trained(name: str = "adam", steps: int = 6, dtype=torch.float32):
    """A tiny model trained a few steps by `name`; its optimizer and the step's batch."""
    model = tiny_model().to(dtype)
    optimizer = OPTIMIZERS[name](model.parameters())
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        nn.functional.mse_loss(model(x.to(dtype)), y.to(dtype)).backward()
        optimizer.step()
    return model, optimizer


def one_more_step(model, optimizer) -> torch.Tensor:
    """How the first weight moves in one more step of torch's own optimizer."""
    before = model[0].weight.detach().clone()
    optimizer.zero_grad(set_to_none=True)
    x, y = batch(99)
    nn.functional.mse_loss(model(x.to(before.dtype)), y.to(before.dtype)).backward()
    optimizer.step()
    return (model[0].weight.detach() - before).double().view(-1)


FAULTS = {
    # optimizer, state key, dtype, bit, the factor the flip multiplies by, what the check says,
    # and how much more than the clean step the next step moves the element (0: NaN)
    "exp_avg x2^128": ("adam", "exp_avg", torch.float32, 30, 2.0**128, "|exp_avg| above", 1e3),
    "exp_avg x256": ("adam", "exp_avg", torch.float32, 26, 2.0**8, "|exp_avg| above", 1e2),
    "exp_avg_sq x2^-64": ("adam", "exp_avg_sq", torch.float32, 29, 2.0**-64,
                          "|exp_avg| above", 3),
    "exp_avg_sq negated": ("adam", "exp_avg_sq", torch.float32, 31, -1.0,
                           "exp_avg_sq negative", 0),
    "bfloat16 exp_avg x2^128": ("adam", "exp_avg", torch.bfloat16, 14, 2.0**128,
                                "|exp_avg| above", 1e3),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_flipped_moment_is_named_and_does_its_harm_at_the_next_step(fault):
    name, key, dtype, bit, factor, said, harm = FAULTS[fault]
    clean_model, clean = trained(name, dtype=dtype)
    model, optimizer = trained(name, dtype=dtype)
    assert moment_problems(optimizer.state_dict()) == []
    moment = optimizer.state[model[0].weight][key].view(-1)
    index = first_element(moment, bit, is_set=abs(factor) < 1)
    before = float(moment[index])
    flip(moment, index, bit)
    assert float(moment[index]) == before * factor  # the fault is the one named
    problems = moment_problems(optimizer.state_dict())
    assert len(problems) == 1 and problems[0].startswith("Adam state of parameter 0 (8x4)")
    assert said in problems[0] and "in 1 value" in problems[0]
    # the harm, under torch's own step: the clean state moves the element by about lr
    moved, clean_moved = one_more_step(model, optimizer), one_more_step(clean_model, clean)
    assert 0 < abs(float(clean_moved[index])) < 2e-3
    if harm == 0:
        assert not bool(torch.isfinite(moved[index]))
    else:
        assert abs(float(moved[index])) > harm * abs(float(clean_moved[index]))


def test_an_amsgrad_maximum_below_exp_avg_sq_is_named_and_enlarges_the_step():
    """AMSGrad divides by its maximum of v; one flipped below v falls back to v, which has
    decayed since a gradient spike, so the step grows."""
    steps = []
    for fault in (False, True):
        weight = nn.Parameter(torch.zeros(8))
        optimizer = torch.optim.Adam([weight], lr=1e-3, amsgrad=True, betas=(0.5, 0.9))
        for t in range(40):
            weight.grad = torch.full((8,), 1.0 if t == 0 else 1e-3)
            optimizer.step()
        if fault:
            flip(optimizer.state[weight]["max_exp_avg_sq"], 3, 29)
            problems = moment_problems(optimizer.state_dict())
            assert problems and "max_exp_avg_sq below exp_avg_sq in 1 value" in problems[0]
        else:
            assert moment_problems(optimizer.state_dict()) == []
        before = weight.detach().clone()
        weight.grad = torch.full((8,), 1e-3)
        optimizer.step()
        steps.append(float((weight.detach() - before)[3]))
    clean, faulty = steps
    assert abs(faulty) > 3 * abs(clean) > 0


def test_an_infinite_exp_avg_sq_is_named_and_freezes_its_element():
    clean_model, clean = trained()
    model, optimizer = trained()
    optimizer.state[model[0].weight]["exp_avg_sq"].view(-1)[3] = math.inf
    problems = moment_problems(optimizer.state_dict())
    assert problems and "exp_avg_sq infinite in 1 value" in problems[0]
    moved, clean_moved = one_more_step(model, optimizer), one_more_step(clean_model, clean)
    assert float(moved[3]) == 0.0 and float(clean_moved[3]) != 0.0


def test_sgd_momentum_and_optimizers_with_other_keys_are_not_judged_by_adams_rule():
    model = tiny_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        sgd.zero_grad()
        x, y = batch(step)
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    flip(sgd.state[model[0].weight]["momentum_buffer"], 3, 30)
    assert moment_problems(sgd.state_dict()) == []
    _, adam = trained()
    state = adam.state_dict()
    flip(state["state"][0]["exp_avg"], 3, 30)
    assert moment_problems(state)  # the control: Adam's own keys are judged
    state["state"][0]["exp_avg_diff"] = torch.zeros(8, 4)  # an Adan-like state: its rule differs
    assert moment_problems(state) == []
    del state["state"][0]["exp_avg_diff"]
    state["param_groups"][0]["betas"] = (0.9, 0.92, 0.99)
    assert moment_problems(state) == []


OTHER_FAMILIES = {
    "adamax": lambda ps: torch.optim.Adamax(ps, lr=1e-3),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-3),
    "rmsprop-centered-momentum": lambda ps: torch.optim.RMSprop(ps, lr=1e-3, centered=True,
                                                                momentum=0.9),
    "adadelta": lambda ps: torch.optim.Adadelta(ps),
    "adagrad-initial-0.1": lambda ps: torch.optim.Adagrad(ps, lr=1e-2,
                                                          initial_accumulator_value=0.1),
}
CLOSEST = {"adamax": ("exp_avg", "exp_inf", 1.0),
           "rmsprop-centered-momentum": ("grad_avg", "square_avg", 0.5)}
"""The moment, its scale, and the power of the scale: each family's bounded ratio."""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", OTHER_FAMILIES)
def test_other_families_pass_every_gradient_history(name, dtype):
    weight = nn.Parameter(torch.zeros(4096, dtype=dtype))
    optimizer = OTHER_FAMILIES[name]([weight])
    gen = torch.Generator().manual_seed(0)
    tiny = 1e-30 if dtype == torch.float32 else 1e-7
    worst = 0.0
    for t in range(240):
        g = torch.randn(4096, generator=gen) * 1e-3
        g[:512] = 1e-3 * 0.999 ** (t % 80)  # decaying by Adamax's b2: its bound's history
        g[512:1024] = 0.1  # constant: a centred RMSprop's grad_avg^2 tends to square_avg
        g[1024:1536] = tiny
        g[1536:2048] *= 1e3 if t == 100 else 1.0
        g[2048:2560] *= t % 2
        weight.grad = g.to(dtype)
        optimizer.step()
        if name in CLOSEST:
            moment, scale, power = CLOSEST[name]
            state = optimizer.state[weight]
            m, v = state[moment].double(), state[scale].double()
            seen = v > 0
            worst = max(worst, float((m[seen].abs() / v[seen] ** power).max()))
        if t % 10 == 9:
            assert moment_problems(optimizer.state_dict()) == [], t
    if name == "adamax":  # (1 - b1) / (1 - b1 / b2) = 1.0091 for the defaults
        assert 0.95 * 1.0091 < worst < MARGIN * 1.0091
    elif name in CLOSEST:  # grad_avg^2 <= square_avg
        assert 0.9 < worst < MARGIN


FAMILY_FAULTS = {
    # optimizer, state key, bit, the factor the flip multiplies by, what the check says
    "rmsprop square_avg negated": ("rmsprop", "square_avg", 31, -1.0,
                                   "RMSprop", "square_avg negative"),
    "centred rmsprop grad_avg x2^128": ("rmsprop-centered-momentum", "grad_avg", 30, 2.0**128,
                                        "RMSprop", "|grad_avg| above 2 x sqrt(square_avg)"),
    "adamax exp_avg x2^128": ("adamax", "exp_avg", 30, 2.0**128,
                              "Adamax", "|exp_avg| above 2.02 x exp_inf"),
    "adadelta square_avg negated": ("adadelta", "square_avg", 31, -1.0,
                                    "Adadelta", "square_avg negative"),
    "adagrad sum negated": ("adagrad-initial-0.1", "sum", 31, -1.0,
                            "Adagrad", "sum below its start 0.1"),
}


@pytest.mark.parametrize("fault", FAMILY_FAULTS)
def test_a_flip_in_another_family_is_named_and_does_its_harm_at_the_next_step(fault):
    name, key, bit, factor, family, said = FAMILY_FAULTS[fault]
    made = {**OPTIMIZERS, name: OTHER_FAMILIES[name]}
    models = []
    for _ in range(2):
        model = tiny_model()
        optimizer = made[name](model.parameters())
        for step in range(6):
            optimizer.zero_grad(set_to_none=True)
            x, y = batch(step)
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        models.append((model, optimizer))
    (clean_model, clean), (model, optimizer) = models
    assert moment_problems(optimizer.state_dict()) == []
    moment = optimizer.state[model[0].weight][key].view(-1)
    index = first_element(moment, bit, is_set=abs(factor) < 1)
    before = float(moment[index])
    flip(moment, index, bit)
    assert float(moment[index]) == before * factor
    problems = moment_problems(optimizer.state_dict())
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{family} state of parameter 0 (8x4) not written by its update")
    assert f"{said} in 1 value" in problems[0]
    moved, clean_moved = one_more_step(model, optimizer), one_more_step(clean_model, clean)
    assert bool(torch.isfinite(clean_moved[index])) and float(clean_moved[index]) != 0
    bad = moved[index]
    assert not bool(torch.isfinite(bad)) or abs(float(bad)) > 1e3 * abs(float(clean_moved[index]))


@pytest.mark.parametrize(("bit", "said"), [(31, "step -6, not a count"),
                                           (0, "step 6, not a count")])
def test_a_step_count_its_update_cannot_write_is_named(bit, said):
    """A negated step makes Adam's second bias correction negative: torch's next step fails
    on its square root (or, computed elementwise, writes NaN)."""
    clean_model, clean = trained()
    model, optimizer = trained()
    step = optimizer.state[model[0].weight]["step"]
    flip(step.view(1), 0, bit)
    problems = moment_problems(optimizer.state_dict())
    assert len(problems) == 1 and said in problems[0], problems
    assert problems[0].startswith("Adam state of parameter 0 (8x4) not written by its update")
    assert bool(torch.isfinite(one_more_step(clean_model, clean)).all())
    if bit == 31:
        try:
            moved = one_more_step(model, optimizer)
        except RuntimeError as exc:
            assert "Complex" in str(exc)
        else:
            assert not bool(torch.isfinite(moved).all())


def test_a_family_is_known_by_its_keys_and_its_groups_hyper_parameters():
    weight = nn.Parameter(torch.zeros(8))
    optimizer = torch.optim.RMSprop([weight], lr=1e-3)
    weight.grad = torch.ones(8)
    optimizer.step()
    state = optimizer.state_dict()
    state["state"][0]["square_avg"][3] = -1.0
    assert moment_problems(state)  # the control: RMSprop's own keys and group are judged
    state["state"][0]["hessian"] = torch.zeros(8)  # another optimizer's state: its rule differs
    assert moment_problems(state) == []
    del state["state"][0]["hessian"]
    del state["param_groups"][0]["alpha"]  # not RMSprop's hyper-parameters
    assert moment_problems(state) == []


def test_local_state_reads_a_wrapped_optimizer_without_its_state_dict():
    _, optimizer = trained()

    class Wrapper:  # as accelerate's AcceleratedOptimizer holds the torch one
        def __init__(self, inner):
            self.optimizer = inner

        def state_dict(self):
            raise AssertionError("a collective call on a sharded optimizer")

    state = local_state(Wrapper(optimizer))
    expected = optimizer.state_dict()
    assert state["param_groups"][0]["params"] == expected["param_groups"][0]["params"]
    assert all(torch.equal(state["state"][i]["exp_avg"], expected["state"][i]["exp_avg"])
               for i in expected["state"])
    assert local_state(object()) is None


def test_a_plain_ledger_save_after_a_flipped_moment_is_unhealthy_and_never_resumed(tmp_path,
                                                                                   capsys):
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    records = {}
    for step in range(10):  # no guard: the ledger's own check
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if step == 9:
            flip(optimizer.state[model[0].weight]["exp_avg"], 3, 30)
        if step in (5, 9):
            records[step] = save({"model": model.state_dict(),
                                  "optimizer": optimizer.state_dict()},
                                 tmp_path / f"step-{step}.pt", step=step)
    assert records[5].outcome == SaveOutcome.VERIFIED
    assert records[9].outcome == SaveOutcome.UNHEALTHY
    assert "Adam state of optimizer.parameter 0 (8x4)" in records[9].detail
    assert records[9].path == "step-9.pt.unhealthy"
    assert resume_choice(tmp_path).record.step == 5
    capsys.readouterr()
    assert main(["run", "latest", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("step-5.pt") and "Adam state of optimizer.parameter 0" in err


def test_a_ledger_save_after_a_flipped_rmsprop_square_avg_is_unhealthy(tmp_path):
    model = tiny_model()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    for step in range(5):
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    flip(optimizer.state[model[0].weight]["square_avg"], 3, 31)
    record = save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                  tmp_path / "step-4.pt", step=4)
    assert record.outcome == SaveOutcome.UNHEALTHY
    assert ("RMSprop state of optimizer.parameter 0 (8x4) not written by its update: "
            "square_avg negative in 1 value") in record.detail


def test_lightning_checkpoint_after_a_flipped_moment_is_unhealthy(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from test_guard_integrations import Pairs, _tiny_class

    from inspector.ledger.lightning import LedgerCheckpointIO

    class AdamTiny(_tiny_class(pl)):
        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Fault(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 4:  # after optimizer step 4, before its checkpoint
                optimizer = trainer.optimizers[0]
                flip(optimizer.state[pl_module.net[0].weight]["exp_avg"], 3, 30)

    run = tmp_path / "ckpt"
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, plugins=[LedgerCheckpointIO(run_dir=run)],
                         callbacks=[Fault(), ModelCheckpoint(dirpath=run, every_n_train_steps=2,
                                                             save_top_k=-1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(AdamTiny(), DataLoader(Pairs(), batch_size=None, shuffle=False))
    unhealthy_at_step_4(run, "Adam state of optimizer_states.0.parameter 0")


def test_transformers_checkpoint_after_a_flipped_moment_is_unhealthy(tmp_path):
    from test_guard_integrations import HfRows, HfTiny
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    from inspector.ledger.hf import LedgerCallback

    class Fault(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
            if state.global_step == 4:  # after the optimizer step, before the save
                inner = optimizer.optimizer if hasattr(optimizer, "optimizer") else optimizer
                flip(inner.state[model.net[0].weight]["exp_avg"], 3, 30)

    out = tmp_path / "out"
    args = TrainingArguments(output_dir=str(out), max_steps=4, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, logging_strategy="no",
                             disable_tqdm=True, remove_unused_columns=False,
                             learning_rate=1e-3, save_strategy="steps", save_steps=2)
    Trainer(model=HfTiny(), args=args, train_dataset=HfRows(),
            callbacks=[Fault(), LedgerCallback()]).train()
    unhealthy_at_step_4(out, "Adam state of optimizer.parameter 0")
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")



CLEAN_GROUPS = {
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-4),
    "adam-tensor-lr": lambda ps: torch.optim.Adam(ps, lr=torch.tensor(1e-3)),
    "adamw": lambda ps: torch.optim.AdamW(ps),
    "nadam": lambda ps: torch.optim.NAdam(ps),
    "radam": lambda ps: torch.optim.RAdam(ps),
    "adamax": lambda ps: torch.optim.Adamax(ps),
    "rmsprop-centred": lambda ps: torch.optim.RMSprop(ps, momentum=0.5, centered=True),
    "adadelta": lambda ps: torch.optim.Adadelta(ps, rho=1.0),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, initial_accumulator_value=0.1),
}


@pytest.mark.parametrize("name", sorted(CLEAN_GROUPS))
def test_every_optimizer_s_own_hyper_parameters_pass_with_a_scheduler_driving_them(name):
    model = tiny_model()
    optimizer = CLEAN_GROUPS[name](model.parameters())
    cycle = "betas" in optimizer.defaults or "momentum" in optimizer.defaults
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=20,
                                                    cycle_momentum=cycle)
    for step in range(20):  # the learning rate climbs from ~0 and anneals back down
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
        assert group_problems({"optimizer": optimizer.state_dict()}) == []


# each value is one torch's own constructor refuses (shown in the test), a flip away from a
# default: the sign bit, or a beta's top exponent bit (0.999 -> 1.8e308)
REFUSED = [
    (torch.optim.SGD, {"lr": 0.1}, "lr", 63),
    (torch.optim.SGD, {"momentum": 0.9}, "momentum", 63),
    (torch.optim.Adam, {}, "eps", 63), (torch.optim.AdamW, {}, "weight_decay", 63),
    (torch.optim.RMSprop, {}, "alpha", 63),
    (torch.optim.Adagrad, {"lr_decay": 0.1}, "lr_decay", 63),
    (torch.optim.Adagrad, {"initial_accumulator_value": 0.1}, "initial_accumulator_value", 63),
    (torch.optim.NAdam, {}, "momentum_decay", 63), (torch.optim.Adadelta, {}, "rho", 63),
    (torch.optim.Adam, {}, ("betas", 1), 62), (torch.optim.Adamax, {}, ("betas", 0), 63),
]


@pytest.mark.parametrize("cls, kwargs, key, bit", REFUSED,
                         ids=[f"{c.__name__}-{k if isinstance(k, str) else k[0] + str(k[1])}"
                              for c, _, k, _ in REFUSED])
def test_a_flipped_hyper_parameter_torch_refuses_is_named(cls, kwargs, key, bit):
    model = tiny_model()
    optimizer = cls(model.parameters(), **kwargs)
    state = optimizer.state_dict()
    group = state["param_groups"][0]
    name, index = (key, None) if isinstance(key, str) else key
    before = group[name] if index is None else group[name][index]
    after = flip_float(float(before), bit)
    if index is None:
        group[name] = after
    else:
        group[name] = tuple(after if i == index else b for i, b in enumerate(group[name]))
    refused = {name: group[name]}
    with pytest.raises(ValueError, match="Invalid"):
        cls(tiny_model().parameters(), **{**kwargs, **refused})
    (line,) = group_problems({"optimizer": state})
    assert line == (f"optimizer.param group 0: {name} {after:g}, out of the bounds its "
                    "optimizer admits")


def test_a_save_after_a_negated_learning_rate_is_unhealthy_and_it_climbs_the_loss(tmp_path):
    def train(optimizer, model, steps):
        losses = []
        for step in range(steps):
            optimizer.zero_grad(set_to_none=True)
            x, y = batch(step % 2)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        return losses

    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train(optimizer, model, 5)
    good = save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                tmp_path / "step-4.pt", step=4)
    optimizer.param_groups[0]["lr"] = flip_float(optimizer.param_groups[0]["lr"], 63)
    bad = save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               tmp_path / "step-5.pt", step=5)
    assert good.outcome == SaveOutcome.VERIFIED
    assert bad.outcome == SaveOutcome.UNHEALTHY
    assert "optimizer.param group 0: lr -0.05, out of the bounds its optimizer admits" in bad.detail
    assert resume_choice(tmp_path).record.step == 4
    # the harm, under torch's own step from the state that would have been sealed: every value
    # stays finite and the loss climbs where the clean state's falls
    resumed = tiny_model()
    resumed.load_state_dict(model.state_dict())
    ascent = torch.optim.SGD(resumed.parameters(), lr=0.05)
    ascent.load_state_dict(optimizer.state_dict())
    climbing = train(ascent, resumed, 10)
    clean = torch.optim.SGD(model.parameters(), lr=0.05)
    falling = train(clean, model, 10)
    assert all(math.isfinite(v) for v in climbing)
    assert climbing[-1] > climbing[0] and falling[-1] < falling[0]


def test_a_name_another_optimizer_uses_more_widely_keeps_the_wider_bound():
    # ASAM's radius `rho` is 2.0 (Adadelta's `rho` is at most 1); a tensor lr is read too
    state = {"state": {}, "param_groups": [
        {"lr": 0.1, "rho": 2.0, "adaptive": True, "momentum": 0.9, "params": [0]},
        {"lr": torch.tensor(-1e-3), "params": [1]}]}
    assert group_problems({"optimizer": state}) == [
        "optimizer.param group 1: lr -0.001, out of the bounds its optimizer admits"]


BETA2_FLIPPED = flip_float(0.999, 53)  # 0.24975: exponent bit 53, admitted by torch
NO_BOUND = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.9, BETA2_FLIPPED)),
    "adam-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.9, BETA2_FLIPPED),
                                                amsgrad=True),
    "adamax": lambda ps: torch.optim.Adamax(ps, lr=1e-3, betas=(0.9, 0.5)),
}
"""Optimizers torch admits whose betas leave |m| without a bound (b1^2 >= b2; b1 >= b2)."""
NO_BOUND_FAULTS = {
    # optimizer, state key, the value written into one element, what the check says
    "exp_avg Inf": ("adam", "exp_avg", math.inf, "exp_avg infinite in 1 value"),
    "exp_avg_sq negative": ("adam", "exp_avg_sq", -1.0, "exp_avg_sq negative in 1 value"),
    "amsgrad max below": ("adam-amsgrad", "max_exp_avg_sq", -1.0,
                          "max_exp_avg_sq below exp_avg_sq in 1 value"),
    "adamax exp_avg Inf": ("adamax", "exp_avg", -math.inf, "exp_avg infinite in 1 value"),
    "adamax exp_inf negative": ("adamax", "exp_inf", -1.0, "exp_inf negative in 1 value"),
}


def trained_with(factory, steps: int = 6):
    """A tiny model trained a few steps by the optimizer `factory` builds."""
    model = tiny_model()
    optimizer = factory(model.parameters())
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("fault", NO_BOUND_FAULTS)
def test_betas_without_a_bound_still_get_every_bound_free_check(fault):
    name, key, value, said = NO_BOUND_FAULTS[fault]
    _, clean = trained_with(NO_BOUND[name])
    assert moment_problems(clean.state_dict()) == []
    model, optimizer = trained_with(NO_BOUND[name])
    optimizer.state[model[0].weight][key].view(-1)[3] = value
    problems = moment_problems(optimizer.state_dict())
    assert len(problems) == 1 and said in problems[0], problems

