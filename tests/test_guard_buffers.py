"""Buffers are weights too: BatchNorm's running statistics are saved in every checkpoint and
used by every evaluation, but no optimizer steps them and training-mode forwards never read
them, so a flip there moves neither the loss nor the gradients. The guard reads each
floating-point buffer's largest |value| and norm at every step, and the ledger's health check
asks the same; each fault is injected by the test through its own integer view of the bytes."""

from __future__ import annotations

import pytest
import torch
from guard_support import batch, run, weights_reader  # noqa: F401
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard, GuardConfig
from inspector.ledger import save
from inspector.run.checkpoints import resume_choice

pytestmark = pytest.mark.usefixtures("weights_reader")  # inline and in the background


def bn_model(seed: int = 0) -> nn.Module:
    """Linear, BatchNorm1d, Tanh, Linear: running_mean and running_var are buffers."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))


def flip(tensor: torch.Tensor, index: int, bit: int) -> float:
    """Flip one bit of one float32 element in place (the test's own fault); the new value."""
    with torch.no_grad():
        tensor.view(-1).view(torch.int32)[index] ^= 1 << bit
    return float(tensor.view(-1)[index])


def train(run_dir, steps, fault=None, saves=(), scale=1.0):
    """The documented plain loop over `bn_model` with Adam, with ledger saves after chosen
    steps; `fault(model, step)` runs after step `step`'s optimizer step, before its save."""
    model = bn_model()
    guard = Guard(run_dir, GuardConfig())
    records = []

    def between(step):
        if step == 0:
            return
        if fault is not None:
            fault(model, step - 1)
        if step - 1 in saves:
            records.append(save(model.state_dict(), run_dir / f"step-{step - 1}.pt",
                                step=step - 1))

    verdicts = run(guard, model, range(steps + 1), torch.optim.Adam(model.parameters(), lr=1e-2),
                   between, lambda step: batch(step, scale))[:steps]
    return guard, model, verdicts, records


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_batchnorm_running_statistics_raise_nothing_in_a_clean_run(tmp_path, scale, capfd):
    # inputs x30: the running variance climbs from 1 to ~900 over the first steps
    guard, _, verdicts, _ = train(tmp_path, 150, scale=scale)
    assert not [v for v in verdicts if v.alarm]
    assert guard.health() == []
    assert "inspector.guard" not in capfd.readouterr().err


@pytest.mark.parametrize("buffer", ["running_var", "running_mean"])
def test_an_exponent_flip_in_a_running_statistic_is_named_at_the_next_step(tmp_path, buffer):
    seen = {}

    def fault(model, step):
        if step == 20:
            stat = getattr(model[1], buffer)
            seen["before"] = float(stat[2])
            seen["after"] = flip(stat, 2, 30)

    _, _, verdicts, _ = train(tmp_path, 23, fault)
    assert abs(seen["after"] / seen["before"]) > 2.0 ** 64  # an exponent bit, still finite
    assert all(v.loss < 1e6 for v in verdicts[21:])  # training-mode forwards never read it
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 21
    assert ("weight-largest", f"1.{buffer}") in {(b.rule, b.param) for b in hit.alarm.breaches}


def test_a_sign_flip_in_a_running_variance_is_named_at_the_next_step(tmp_path):
    seen = {}

    def fault(model, step):
        if step == 20:
            var = model[1].running_var
            seen["before"] = (float(var.norm()), float(var.abs().max()))
            seen["value"] = flip(var, 2, 31)
            seen["after"] = (float(var.norm()), float(var.abs().max()))
            # the harm: every eval output of that channel is NaN, the others are numbers
            model.eval()
            with torch.no_grad():
                hidden = model[1](model[0](batch(0)[0]))
            model.train()
            seen["nan"] = torch.isnan(hidden).all(dim=0).tolist()

    guard, model, verdicts, _ = train(tmp_path, 23, fault)
    assert seen["value"] < 0 and seen["after"] == seen["before"]  # norm and |max| keep it
    assert seen["nan"] == [i == 2 for i in range(8)]
    assert all(v.loss < 1e6 for v in verdicts[21:])  # training normalises by the batch's own
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 21
    # the value is the variance after step 21's forward moved it by 10% towards the batch's
    (breach,) = hit.alarm.breaches
    assert (breach.rule, breach.param, breach.threshold) == ("variance-negative",
                                                             "1.running_var", 0.0)
    assert seen["value"] < breach.value < 0
    # the ledger asks the guard's health before a save: it names the same
    with torch.no_grad():
        var = model[1].running_var
        var.abs_()
        var[5] = -var[5]
    # (and, since no forward wrote the statistics after the step, that they changed)
    assert guard.health() == [
        f"weights-changed on 1.running_var (value {float(var.norm()):.4g})",
        f"variance-negative on 1.running_var (value {float(var[5]):.4g}, bound 0)"]


def test_a_checkpoint_saved_after_a_running_var_flip_is_unhealthy_and_never_resumed(tmp_path,
                                                                                   capsys):
    def fault(model, step):
        if step == 9:
            flip(model[1].running_var, 0, 30)

    _, _, _, (good, bad) = train(tmp_path, 10, fault, saves=(5, 9))
    assert good.outcome == SaveOutcome.VERIFIED
    assert bad.outcome == SaveOutcome.UNHEALTHY and "weight-largest on 1.running_var" in \
        bad.detail, bad.detail
    choice = resume_choice(tmp_path)
    assert choice.record is not None and choice.record.step == 5
    assert "not sealed" in capsys.readouterr().err


class Scaled(nn.Module):
    """A float64 buffer the forward reads and never writes (a fixed input scale)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.register_buffer("scale", torch.full((4,), 0.5, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(torch.tanh(x * self.scale).float())


def test_a_float64_buffer_flipped_past_float32s_range_is_named(tmp_path):
    model = Scaled()

    def fault(step):
        if step == 5:
            with torch.no_grad():
                model.scale.view(torch.int64)[1] ^= 1 << 62  # 0.5 -> ~9e307
            assert 1e300 < float(model.scale[1]) < float("inf")

    verdicts = run(Guard(tmp_path, GuardConfig()), model, range(8), before_step=fault)
    hits = [(v.step, b.rule, b.param) for v in verdicts if v.alarm for b in v.alarm.breaches]
    assert (5, "weight-largest", "scale") in hits, hits


class Masked(nn.Module):
    """A float buffer that holds -inf by design (a causal mask added to scores)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)
        self.register_buffer("mask", torch.full((4, 4), float("-inf")).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.proj(x).unsqueeze(1) * x.unsqueeze(2) + self.mask
        return self.out(scores.softmax(-1).sum(1))


def test_a_buffer_that_holds_minus_inf_by_design_raises_nothing(tmp_path, capfd):
    guard = Guard(tmp_path, GuardConfig())
    assert not [v for v in run(guard, Masked(), range(40)) if v.alarm]
    assert guard.health() == []
    assert "inspector.guard" not in capfd.readouterr().err


@pytest.mark.parametrize("fault", ["+inf", "nan"])
def test_a_running_var_turned_non_finite_is_named(tmp_path, fault):
    word = {"+inf": 0x7F800000, "nan": 0x7FC00000}[fault]

    def corrupt(model, step):
        if step == 12:
            with torch.no_grad():
                model[1].running_var.view(torch.int32)[3] = word

    _, _, verdicts, _ = train(tmp_path, 14, corrupt)
    hit = next(v for v in verdicts if v.alarm)
    rule = "weight-largest" if fault == "+inf" else "weight-nonfinite"
    assert hit.step == 13
    assert (rule, "1.running_var") in {(b.rule, b.param) for b in hit.alarm.breaches}


class Counting(nn.Module):
    """Float buffers a forward accumulates into from zero once `collecting`: a sample count
    and a sum of squares (a running normaliser's state), which grow without bound by design."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("sumsq", torch.zeros(4))
        self.collecting = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.collecting:
            with torch.no_grad():
                self.count += x.shape[0]
                self.sumsq += (x * x).sum(0)
        scale = (self.sumsq / self.count).sqrt() if self.count > 0 else torch.ones(4)
        return self.net(x / scale)


def test_buffers_that_accumulate_from_zero_raise_nothing(tmp_path, capfd):
    model = Counting()

    def collect(step):
        model.collecting = step >= 5  # zero for five steps, then 16 samples a step

    def data(step):
        x, y = batch(step, scale=1.0 + step)  # the inputs' scale grows too
        return x, y / (1.0 + step)

    guard = Guard(tmp_path, GuardConfig())
    assert not [v for v in run(guard, model, range(60), before_step=collect, data=data)
                if v.alarm]
    assert float(model.count) == 55 * 16 and guard.health() == []
    assert "inspector.guard" not in capfd.readouterr().err


class Opaque(torch.Tensor):
    """A tensor subclass with no norm (as a library's own tensor type may lack one)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if "norm" in getattr(func, "__name__", ""):
            raise NotImplementedError("no norm for Opaque")
        return super().__torch_function__(func, types, args, kwargs or {})


class Graph(nn.Module):
    """A sparse float buffer (a graph's adjacency), an empty one, a float8 one and one without
    a norm, beside a dense one."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 1)
        self.register_buffer("adjacency", (torch.eye(16) + torch.eye(16).roll(1, 0)).to_sparse())
        self.register_buffer("degree", torch.full((16, 1), 2.0))
        self.register_buffer("placeholder", torch.empty(0))  # an empty one, as caches start
        self.register_buffer("scale8", torch.ones(4).to(torch.float8_e4m3fn))  # no norm kernel
        self.register_buffer("opaque", torch.ones(3).as_subclass(Opaque))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.adjacency, self.lin(x)) / self.degree


def test_buffers_it_cannot_reduce_never_stop_training_and_a_dense_one_is_watched(tmp_path,
                                                                                 capfd):
    model = Graph()

    def fault(step):
        if step == 6:
            with torch.no_grad():
                model.degree.view(torch.int32)[0] ^= 1 << 29  # 2.0 -> 2^65

    verdicts = run(Guard(tmp_path, GuardConfig()), model, range(8), before_step=fault)
    hits = [(v.step, b.rule, b.param) for v in verdicts if v.alarm for b in v.alarm.breaches]
    assert hits and all(param == "degree" for _, _, param in hits), hits
    assert (6, "weight-largest", "degree") in hits
    err = capfd.readouterr().err
    assert "buffers not watched, their values cannot be reduced: opaque (NotImplementedError)" \
        in err, err
