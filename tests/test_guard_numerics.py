"""The numerics guard on a real (tiny) training loop on the CPU: one test per rule, each action,
a halted run resumed from its scene, and bad journals and scenes refused."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from guard_support import alarms, batch, tiny_model
from torch import nn

from inspector.core.errors import CodedError
from inspector.guard import scene as scene_module
from inspector.guard.guard import EXIT_HALTED, Guard, GuardConfig, GuardHalt
from inspector.guard.inject import BitFlip, flip_bit
from inspector.guard.scene import load_scene, read_scene
from inspector.run import journal

WARMUP = 4


def train(guard: Guard, model: nn.Module, steps: range, data=batch, **step_kw):
    """Run the plain loop `guard.step(loss, model)` over `steps`; the verdicts."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    verdicts = []
    for step in steps:
        opt.zero_grad(set_to_none=True)
        x, y = data(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        v = guard.step(loss, model, opt, step=step, batch=(x, y), **step_kw)
        if v.take_step:
            opt.step()
        verdicts.append(v)
    return verdicts


def nan_at(k):
    def data(step):
        x, y = batch(step)
        if step == k:
            x[3, 1] = math.nan
        return x, y
    return data


def test_nan_loss_is_caught_at_its_step_and_warn_skips_that_step_and_goes_on(tmp_path, capfd):
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP))
    model = tiny_model()
    verdicts = train(guard, model, range(8), data=nan_at(6))
    # under warn a non-finite step is still skipped, so NaN never reaches the weights
    assert [v.step for v in verdicts if v.alarm] == [6]
    assert [v.step for v in verdicts if not v.take_step] == [6]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    [record] = alarms(tmp_path)
    assert record["rule"] == "loss-nonfinite" and record["value"] == "nan"
    assert record["action"] == "skip" and record["step"] == 6 and record["rank"] == 0
    err = capfd.readouterr().err
    assert "step 6: loss-nonfinite" in err and "optimizer step was skipped" in err
    assert record["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert record["attribution"] is None  # no closure: nothing to re-run
    json.dumps(record, allow_nan=False)


def test_inf_gradient_names_the_first_parameter_that_went_non_finite(tmp_path):
    model = tiny_model()
    hook = model[2].bias.register_hook(lambda g: torch.full_like(g, math.inf))
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP))
    [v] = train(guard, model, range(1))
    hook.remove()
    assert math.isfinite(v.loss) and v.grad_norm == math.inf
    assert v.alarm.breaches[0].rule == "grad_norm-nonfinite"
    assert v.alarm.params == ["2.bias"]
    assert v.alarm.worst[0] == ("2.bias", math.inf)


def test_loss_spike_fires_both_spike_rules_after_the_warm_up(tmp_path):
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP))

    def data(step):
        x, y = batch(step)
        return x, y * {1: 3.0, 9: 30.0}.get(step, 1.0)  # targets far off: the loss jumps

    verdicts = train(guard, tiny_model(), range(11), data=data)
    alarmed = {v.step: [b.rule for b in v.alarm.breaches] for v in verdicts if v.alarm}
    assert min(alarmed) == 9, "a x3 step in the warm-up raises nothing"
    assert {"loss-spike-max", "loss-spike-ema", "loss-spike-median"} <= set(alarmed[9])


def test_grad_norm_spike_fires_without_a_loss_spike(tmp_path):
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP))
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rules = []
    for step in range(8):
        opt.zero_grad()
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        (loss * (1000.0 if step == 7 else 1.0)).backward()  # the gradient, not the loss, jumps
        v = guard.step(loss, model, opt, step=step)
        rules.append([b.rule for b in v.alarm.breaches] if v.alarm else [])
        opt.step()
    assert rules[:7] == [[]] * 7
    assert rules[7] == ["grad_norm-spike-max", "grad_norm-spike-median"]


def test_a_bit_flipped_in_a_gradient_at_step_k_is_caught_at_step_k(tmp_path):
    flip = BitFlip(step=5, param="2.weight", index=3, bit=30)
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, faults=[flip]))
    verdicts = train(guard, tiny_model(), range(8))
    v = next(v for v in verdicts if v.alarm)
    assert v.step == 5
    assert v.alarm.worst[0][0] == "2.weight"
    assert alarms(tmp_path)[0]["step"] == 5


def test_flip_bit_flips_exactly_one_bit_of_one_element():
    t = torch.tensor([1.0, 2.0, -3.0], dtype=torch.float32)
    before = t.clone().view(torch.int32)
    flip_bit(t, 2, 31)  # the sign bit
    assert t.tolist() == [1.0, 2.0, 3.0]
    diff = before ^ t.view(torch.int32)
    assert diff.tolist() == [0, 0, -(1 << 31)]
    h = torch.tensor([1.0], dtype=torch.bfloat16)
    flip_bit(h, 0, 0)
    assert h.item() != 1.0
    with pytest.raises(CodedError):
        flip_bit(h, 0, 16)


def test_skip_drops_the_step_so_the_weights_do_not_move(tmp_path):
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, action="skip"))
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train(guard, model, range(3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = batch(3)
    x[0, 0] = math.nan
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    v = guard.step(loss, model, opt, step=3)
    opt.step()  # even called, it has no gradients to apply
    assert not v.take_step and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], val) for k, val in model.state_dict().items())
    assert alarms(tmp_path)[0]["action"] == "skip"


def _halt_run(tmp_path, halt_at=6):
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, action="halt"))
    model = tiny_model()
    with pytest.raises(GuardHalt) as caught:
        train(guard, model, range(10), data=nan_at(halt_at), sample_ids=[7, 8, 9],
              data_state={"epoch": 0, "step": halt_at})
    return model, caught.value


def test_halt_writes_its_scene_and_exits_with_the_documented_code(tmp_path):
    model, halt = _halt_run(tmp_path)
    assert halt.code == EXIT_HALTED == 17
    scene = read_scene(halt.scene)
    assert halt.scene.parent == tmp_path / "scenes" and halt.scene.name == "step-00000006"
    assert {"model.pt", "optimizer.pt", "rng.pt"} == set(scene.files)
    assert scene.step == 6 and scene.sample_ids == [7, 8, 9]
    assert scene.data_state == {"epoch": 0, "step": 6}
    assert len(scene.input_hash) == 64
    assert scene.worst_grads[0][1] == "nan"
    assert scene.alarms[0]["rule"] == "loss-nonfinite"
    assert scene.rules_state["loss-spike-max"]["seen"] == 6
    saved = torch.load(halt.scene / "model.pt", weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    [record] = alarms(tmp_path)
    assert record["action"] == "halt" and record["scene"] == str(halt.scene)
    from inspector.run.blocklog import read_lines
    from inspector.run.metrics import metrics_path

    lines, _ = read_lines(metrics_path(tmp_path, 0))  # flushed before the halt, not closed
    assert [r["s"] for r in lines] == list(range(7)) and lines[-1]["a"] == "loss-nonfinite"


def test_a_halted_process_exits_17(tmp_path):
    script = textwrap.dedent(f"""
        import math, sys, torch
        sys.path.insert(0, {str(sys.path[0])!r})
        from inspector.guard.guard import Guard, GuardConfig
        model = torch.nn.Linear(2, 1)
        guard = Guard({str(tmp_path)!r}, GuardConfig(action="halt"))
        loss = model(torch.tensor([[math.inf, 1.0]])).sum()
        loss.backward()
        guard.step(loss, model)
        print("not reached")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == EXIT_HALTED, done.stderr
    assert "not reached" not in done.stdout
    assert (tmp_path / "scenes" / "step-00000000" / "scene.json").is_file()


def test_a_halted_run_resumes_from_its_scene(tmp_path):
    halted_model, halt = _halt_run(tmp_path)
    model = tiny_model(seed=99)  # a fresh process builds the model anew
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, action="halt"))
    scene = guard.resume(halt.scene, model, opt)
    assert scene.step == 6 and guard.step_index == 6
    assert all(torch.equal(halted_model.state_dict()[k], v) for k, v in model.state_dict().items())
    assert guard.rules.state_dict() == {k: v for k, v in scene.rules_state.items()
                                        if k != "weights"}
    verdicts = train(guard, model, range(6, 10))  # the bad batch left out: runs on cleanly
    assert not any(v.alarm for v in verdicts)
    assert len(alarms(tmp_path)) == 1


def test_a_second_halt_at_the_same_step_never_overwrites_the_first_scene(tmp_path):
    _, first = _halt_run(tmp_path)
    before = (first.scene / "scene.json").read_bytes()
    _, second = _halt_run(tmp_path)
    assert second.scene.name == "step-00000006-2"
    assert (first.scene / "scene.json").read_bytes() == before


def test_a_damaged_scene_is_refused_and_the_model_is_left_alone(tmp_path):
    _, halt = _halt_run(tmp_path)
    data = bytearray((halt.scene / "model.pt").read_bytes())
    data[len(data) // 2] ^= 0x01
    (halt.scene / "model.pt").write_bytes(bytes(data))
    model = tiny_model(seed=5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CodedError) as caught:
        load_scene(halt.scene, model)
    assert caught.value.code == "scene-damaged" and "model.pt" in caught.value.message
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_scene_file_replaced_after_its_check_is_never_the_one_loaded(tmp_path, monkeypatch):
    """The file is swapped between the SHA-256 check and torch.load (as another process
    could): the weights loaded are the checked ones."""
    halted_model, halt = _halt_run(tmp_path)
    other = tmp_path / "other.pt"
    torch.save(tiny_model(seed=7).state_dict(), other)
    real_load = torch.load

    def swap_then_load(source, *args, **kwargs):
        if not (tmp_path / "swapped").exists():
            os.replace(other, halt.scene / "model.pt")
            (tmp_path / "swapped").touch()
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(torch, "load", swap_then_load)
    model = tiny_model(seed=5)
    load_scene(halt.scene, model, restore_rngs=False)
    assert (tmp_path / "swapped").exists()
    assert all(torch.equal(halted_model.state_dict()[k], v)
               for k, v in model.state_dict().items())


def test_a_scene_whose_record_leaves_out_a_file_it_loads_is_refused(tmp_path):
    _, halt = _halt_run(tmp_path)
    body = json.loads((halt.scene / "scene.json").read_text())
    del body["files"]["model.pt"]
    body.pop("seal")
    body["seal"] = scene_module._seal(body)
    (halt.scene / "scene.json").write_text(json.dumps(body))
    model = tiny_model(seed=5)
    with pytest.raises(CodedError) as caught:
        load_scene(halt.scene, model)
    assert caught.value.code == "scene-damaged" and "model.pt" in caught.value.message


def test_an_edited_scene_record_is_refused(tmp_path):
    _, halt = _halt_run(tmp_path)
    body = json.loads((halt.scene / "scene.json").read_text())
    body["sample_ids"] = [1, 2, 3]
    (halt.scene / "scene.json").write_text(json.dumps(body))
    with pytest.raises(CodedError) as caught:
        read_scene(halt.scene)
    assert caught.value.code == "scene-damaged" and "seal" in caught.value.message
    (halt.scene / "scene.json").write_text("{not json")
    with pytest.raises(CodedError, match="cannot be read"):
        read_scene(halt.scene)


def test_a_scene_from_another_model_is_refused(tmp_path):
    _, halt = _halt_run(tmp_path)
    other = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    guard = Guard(tmp_path / "other-run")
    with pytest.raises(CodedError) as caught:
        guard.resume(halt.scene, other)
    assert caught.value.code == "scene-other-model"
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    assert guard.step_index == 0


def test_a_damaged_journal_is_refused_and_left_as_it_was(tmp_path):
    path = journal.journal_path(tmp_path)
    journal.append(path, "ledger.save", {"step": 1})
    journal.append(path, "ledger.save", {"step": 2})
    raw = path.read_bytes().replace(b'"step": 1', b'"step": 9')
    path.write_bytes(raw)
    with pytest.raises(CodedError) as caught:
        Guard(tmp_path)
    assert caught.value.code == "journal-damaged" and "line 1" in caught.value.message
    assert path.read_bytes() == raw


def test_a_halt_takes_sample_ids_and_loader_state_from_the_order_ledger(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    from inspector.guard.order import track

    x, y = batch(0)
    x[9, 2] = math.nan
    loader = track(DataLoader(TensorDataset(x, y), batch_size=4), tmp_path)
    model = tiny_model()
    guard = Guard(tmp_path, GuardConfig(action="halt"), ledger=loader.ledger)
    with pytest.raises(GuardHalt) as caught:
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            guard.step(loss, model, batch=(xb, yb))
    scene = read_scene(caught.value.scene)
    assert scene.step == 2 and scene.sample_ids == [8, 9, 10, 11]
    assert scene.data_state["step"] == 3 and scene.data_state["epoch"] == 0


def test_an_unknown_action_is_refused(tmp_path):
    with pytest.raises(CodedError, match="warn, skip, halt"):
        Guard(tmp_path, GuardConfig(action="stop"))


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@CUDA
def test_on_a_gpu_the_check_syncs_once_and_a_flipped_gradient_is_caught(tmp_path):
    import warnings

    flip = BitFlip(step=3, param="2.weight", index=1, bit=30)
    guard = Guard(tmp_path, GuardConfig(warmup=2, faults=[flip]))
    model = tiny_model().cuda()
    x, y = (t.cuda() for t in batch(0))
    syncs = []
    for step in range(4):
        model.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                v = guard.step(loss, model, step=step)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        syncs.append(sum("synchroniz" in str(w.message) for w in seen))
    assert syncs[:3] == [1, 1, 1]
    assert v.alarm is not None and v.alarm.worst[0][0] == "2.weight"
    guard.close()


def test_every_step_leaves_one_metrics_line_and_the_journal_names_the_file(tmp_path):
    from inspector.run.blocklog import read_lines
    from inspector.run.metrics import metrics_path

    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP))
    verdicts = train(guard, tiny_model(), range(6), data=nan_at(4))
    guard.close()
    lines, problems = read_lines(metrics_path(tmp_path, 0))
    assert not problems
    assert [(r["s"], r["a"]) for r in lines] == [(0, None), (1, None), (2, None), (3, None),
                                                 (4, "loss-nonfinite"), (5, None)]
    assert lines[0]["loss"] == verdicts[0].loss and lines[4]["loss"] == "nan"
    entries = journal.read(journal.journal_path(tmp_path)).of_kind("guard.metrics")
    assert [e.record["path"] for e in entries] == ["guard/rank-00000.jsonl"]


def test_a_journal_whose_last_line_was_cut_is_kept_and_the_guard_goes_on(tmp_path):
    path = journal.journal_path(tmp_path)
    journal.append(path, "ledger.save", {"step": 1})
    journal.append(path, "ledger.save", {"step": 2})
    cut = path.read_bytes()[:-9]  # power lost in the middle of the last append
    path.write_bytes(cut)
    Guard(tmp_path)  # accepted, as the ledger and `run latest` accept it
    journal.append(path, "ledger.save", {"step": 3})
    again = journal.read(path)
    assert path.read_bytes().startswith(cut)
    assert [(p.line, p.kind) for p in again.problems] == [(2, "truncated")]
    assert [e.record["step"] for e in again.sound] == [1, 3]
    Guard(tmp_path)  # and again at the next restart
