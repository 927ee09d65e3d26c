"""A fault-injection campaign against the guard on a real (tiny) CPU training loop. Every fault
is injected by the test itself, through its own integer view of the tensor's bytes (never the
guard's `BitFlip`), and must be caught at the step it can first be seen, named with the tensor."""

from __future__ import annotations

import math

import pytest
import torch
from guard_support import alarms, batch, run, tiny_model, weights_reader  # noqa: F401
from torch import nn

from inspector.guard.guard import Guard, GuardConfig

pytestmark = pytest.mark.usefixtures("weights_reader")  # every fault inline and in the background


def flip(tensor: torch.Tensor, index: int, bit: int) -> float:
    """Flip one bit of one float32 element in place; the element's new value."""
    with torch.no_grad():
        words = tensor.detach().view(-1).view(torch.int32)
        mask = (1 << bit) - (1 << 32 if bit == 31 else 0)
        words[index] ^= mask
    return float(tensor.detach().view(-1)[index])


def index_with_bit(tensor: torch.Tensor, bit: int, state: int) -> int:
    """The first element whose `bit` is `state` (0 or 1)."""
    words = tensor.detach().view(-1).view(torch.int32)
    hits = (((words >> bit) & 1) == state).nonzero().flatten()
    return int(hits[0])


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adam, zero biases, lr 1e-2"])
def test_a_clean_run_of_200_steps_raises_nothing(tmp_path, optimizer, capfd):
    model = tiny_model()
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    elif optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:  # tensors that start at zero and grow fast: the bounds' floors must let them
        with torch.no_grad():
            model[0].bias.zero_()
            model[2].bias.zero_()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    guard = Guard(tmp_path, GuardConfig())
    verdicts = run(guard, model, range(200), opt=opt)
    assert not [v for v in verdicts if v.alarm]
    assert guard.health() == []
    assert "inspector.guard" not in capfd.readouterr().err


def test_an_exponent_flip_between_steps_is_named_at_the_next_step_though_tanh_hides_it(
        tmp_path):
    model = tiny_model()
    weight = model[0].weight
    index = int(weight.detach().abs().view(-1).argmin())
    seen = {}

    def fault(step):
        if step == 30:
            seen["before"] = float(weight.detach().view(-1)[index])
            seen["after"] = flip(weight, index, 30)  # the top exponent bit: x 2^128

    guard = Guard(tmp_path, GuardConfig())
    verdicts = run(guard, model, range(33), before_step=fault)
    assert abs(seen["after"]) > 1e30 and abs(seen["before"]) < 1
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 30
    rules = {(b.rule, b.param) for b in hit.alarm.breaches}
    assert ("weights-changed", "0.weight") in rules and ("update-size", "0.weight") in rules
    assert math.isfinite(hit.loss)  # the tanh saturates: the loss alone would not say it
    record = alarms(tmp_path)[0]
    assert record["rule"] == "weights-changed" and record["param"] == "0.weight"
    assert record["attribution"] == "device" and "note" in record["device"]  # no GPU here
    assert "0.weight" in record["params"]


def test_a_times_256_flip_between_steps_is_named_though_no_bound_is_passed(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 256), nn.Tanh(), nn.Linear(256, 1))
    weight = model[0].weight
    guard = Guard(tmp_path, GuardConfig())
    seen = {}

    def fault(step):
        if step == 12:
            index = index_with_bit(weight, 26, 0)  # exponent + 8
            before = float(weight.detach().view(-1)[index])
            seen["ratio"] = flip(weight, index, 26) / before

    verdicts = run(guard, model, range(14), before_step=fault)
    assert seen["ratio"] == 256.0
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 12
    # the flipped value is still below the tensor's largest |w|: no bound is passed, but the
    # fingerprint (and here the norm's jump) name the tensor
    found = {(b.rule, b.param) for b in hit.alarm.breaches}
    assert ("weights-changed", "0.weight") in found
    assert not any(rule == "weight-largest" for rule, _ in found)
    assert {param for _, param in found} == {"0.weight"}


def test_a_flip_between_steps_is_named_though_another_models_optimizer_steps_first(tmp_path):
    """A second model's optimizer (a GAN's other half, an EMA copy) writes none of the watched
    weights: its step must not take the flipped bytes as the expected ones."""
    model, other = tiny_model(), tiny_model(1)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.01)
    weight = model[2].weight

    def fault(step):
        if step == 15:
            flip(weight, 0, 30)
        other_opt.zero_grad(set_to_none=True)
        other(batch(step)[0]).sum().backward()
        other_opt.step()

    guard = Guard(tmp_path, GuardConfig())
    hit = next(v for v in run(guard, model, range(17), before_step=fault) if v.alarm)
    assert hit.step == 15
    assert ("weights-changed", "2.weight") in {(b.rule, b.param) for b in hit.alarm.breaches}


@pytest.mark.parametrize("param", ["0.weight", "0.bias", "2.weight", "2.bias"])
def test_an_exponent_flip_inside_the_optimizer_step_is_caught_within_one_step(tmp_path, param):
    """A fault in the optimizer's own arithmetic lands before the fingerprint is taken, so only
    the finite-corruption rules can see it: the largest |w| of the tensor jumps."""
    model = tiny_model()
    weight = dict(model.named_parameters())[param]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(tmp_path, GuardConfig())
    state = {"step": 0}

    def in_the_step(optimizer, args, kwargs):  # runs before the guard's global post-hook
        if state["step"] == 20:
            flip(weight, int(weight.detach().abs().view(-1).argmin()), 30)
        state["step"] += 1

    opt.register_step_post_hook(in_the_step)
    verdicts = run(guard, model, range(23), opt=opt)
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 21  # the first check after the faulty step 20
    found = {(b.rule, b.param) for b in hit.alarm.breaches}
    assert ("update-size", param) in found  # the norm, read every step
    assert not any(b.rule == "weights-changed" for b in hit.alarm.breaches)


def test_with_the_largest_read_every_step_an_in_step_flip_passes_its_bound(tmp_path):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(tmp_path, GuardConfig(largest_every=1))
    state = {"step": 0}

    def in_the_step(optimizer, args, kwargs):
        if state["step"] == 20:
            flip(model[0].weight, 0, 30)
        state["step"] += 1

    opt.register_step_post_hook(in_the_step)
    hit = next(v for v in run(guard, model, range(23), opt=opt) if v.alarm)
    assert hit.step == 21
    assert ("weight-largest", "0.weight") in {(b.rule, b.param) for b in hit.alarm.breaches}


def test_a_x300_loss_spike_at_step_40_is_caught_in_the_warm_up(tmp_path):
    def data(step):
        x, y = batch(step)
        return x, y * (math.sqrt(300.0) * 3 if step == 40 else 1.0)

    model = tiny_model()
    guard = Guard(tmp_path, GuardConfig())  # warm-up 100, the default
    verdicts = run(guard, model, range(42), data=data)
    baseline = verdicts[39].loss
    hit = [v for v in verdicts if v.alarm]
    assert hit and hit[0].step == 40 and hit[0].loss > 300 * baseline
    assert "loss-spike-median" in {b.rule for b in hit[0].alarm.breaches}


def test_a_nan_sample_under_default_warn_never_reaches_the_weights_and_says_so(tmp_path, capfd):
    def data(step):
        x, y = batch(step)
        if step >= 50:
            x[5, 2] = math.nan  # a bad sample that keeps coming
        return x, y

    model = tiny_model()
    guard = Guard(tmp_path, GuardConfig())
    verdicts = run(guard, model, range(200), data=data)
    guard.close()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert sum(not v.take_step for v in verdicts) == 150
    err = capfd.readouterr().err.splitlines()
    ours = [line for line in err if line.startswith("inspector.guard")]
    assert any("step 50: loss-nonfinite" in line for line in ours)
    assert any("has fired 100 times" in line for line in ours)
    assert any("fired 150 times in all" in line for line in ours)
    assert len(ours) <= 10  # rate-limited: not one line per alarm
    assert len(alarms(tmp_path)) >= 150  # the journal still holds each one


@pytest.mark.parametrize("scale", [0.2, 20.0])
def test_a_deliberate_edit_is_accepted_without_an_alarm(tmp_path, scale):
    model = tiny_model()
    guard = Guard(tmp_path, GuardConfig(largest_every=1))

    def edit(step):
        if step == 5:
            with torch.no_grad():
                model[0].weight.mul_(scale)  # shrink (as clipping does) or grow, on purpose
            guard.accept_weights(model)

    verdicts = run(guard, model, range(8), before_step=edit)
    assert not [v for v in verdicts if v.alarm]


def test_a_journal_line_cut_by_power_loss_is_accepted_by_guard_ledger_and_run_latest(tmp_path,
                                                                                    capsys):
    from inspector.cli import main
    from inspector.ledger import save
    from inspector.run import journal

    model = tiny_model()
    guard = Guard(tmp_path, GuardConfig())
    run(guard, model, range(3))
    save(model.state_dict(), tmp_path / "step-2.pt", step=2)
    guard.close()
    path = journal.journal_path(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[-1][:40])  # an append cut short
    assert [p.kind for p in journal.read(path).problems] == ["truncated"]

    guard = Guard(tmp_path, GuardConfig())  # the restarted job starts
    run(guard, model, range(3, 6))
    record = save(model.state_dict(), tmp_path / "step-5.pt", step=5)
    guard.close()
    assert record.verified
    assert main(["run", "latest", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("step-5.pt")
    read = journal.read(path)
    assert [p.kind for p in read.problems] == ["truncated"]  # kept as evidence, chain goes on


def test_a_flip_in_a_gradient_is_named_at_its_step(tmp_path):
    model = tiny_model()
    state = {"step": 0}

    def flip_grad(grad):  # the test's own fault in the backward pass, at step 30 only
        if state["step"] == 30:
            grad = grad.clone()
            flip(grad, 2, 30)
        return grad

    model[2].weight.register_hook(flip_grad)
    guard = Guard(tmp_path, GuardConfig())

    def count(step):
        state["step"] = step

    verdicts = run(guard, model, range(33), before_step=count)
    hit = next(v for v in verdicts if v.alarm)
    assert hit.step == 30 and hit.alarm.worst[0][0] == "2.weight"
    assert not hit.take_step  # its norm overflowed: skipped, so the weights never saw it
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_flip_in_an_activation_is_caught_at_its_step(tmp_path):
    model = tiny_model()
    state = {"step": 0}

    def flip_activation(module, inputs, output):  # the test's own fault in the forward pass
        if state["step"] == 30:
            output = output.clone()
            flip(output, 5, 30)  # the top exponent bit of one hidden unit's output: x 2^128
            return output
        return None

    model[1].register_forward_hook(flip_activation)  # after the tanh, so nothing saturates it
    guard = Guard(tmp_path, GuardConfig())

    def count(step):
        state["step"] = step

    verdicts = run(guard, model, range(33), before_step=count)
    hit = [v for v in verdicts if v.alarm]
    assert hit and hit[0].step == 30
    assert not hit[0].take_step and all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_fingerprint_moves_for_any_one_bit_flipped_anywhere_in_a_tensor_read_in_pieces(
        dtype):
    """Every bit of the elements at a tensor's ends and at the seams between the pieces a
    reading cuts it into (an odd-sized tail read as narrower words), flipped one at a time."""
    from inspector.guard.weights.fingerprint import PIECE_BYTES, fingerprint

    size = torch.empty((), dtype=dtype).element_size()
    per_piece = PIECE_BYTES // size
    t = torch.randn(2 * per_piece + 3, generator=torch.Generator().manual_seed(1)).to(dtype)
    words = t.view(torch.uint8)
    before = fingerprint([t]).per_tensor()[0]
    for index in (0, per_piece - 1, per_piece, 2 * per_piece, t.numel() - 1):
        for bit in range(8 * size):
            at = index * size + bit // 8
            words[at] ^= 1 << (bit % 8)
            assert fingerprint([t]).per_tensor()[0] != before, (index, bit)
            words[at] ^= 1 << (bit % 8)
    assert fingerprint([t]).per_tensor()[0] == before


def test_a_reading_in_pieces_gives_the_whole_tensors_norm_largest_and_fingerprint(tmp_path):
    from inspector.guard.weights.fingerprint import PIECE_BYTES, WeightWatch, fingerprint

    model = nn.Linear(PIECE_BYTES // 4 // 7 + 1, 7)  # 7 rows: pieces cut across rows
    with torch.no_grad():
        model.weight.view(-1)[-1] = -40.0  # the largest |w|, in the last piece, negative
    watch = WeightWatch(model)
    watch.accept()
    reading = watch.reading(largest=True)
    values = watch.values(reading, reading.vector().tolist())
    assert values.changed == [False, False]
    for i, p in enumerate(watch.params):
        whole = p.detach()
        assert values.norms[i] == pytest.approx(float(torch.linalg.vector_norm(whole)), rel=1e-5)
        assert values.largest[i] == float(whole.abs().max())
    assert values.largest[0] == 40.0
    flip(model.weight, model.weight.numel() - 1, 0)  # the lowest mantissa bit, last element
    again = watch.reading()
    assert watch.values(again, again.vector().tolist()).changed == [True, False]
    # the check's fingerprint, read in pieces, is the whole tensors' and is expected from now
    assert torch.equal(fingerprint(watch.params).flat, watch.expected.flat)
