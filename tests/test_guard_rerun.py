"""Re-run attribution on the CPU: the alarmed step re-run from the state before it, on the same
batch. A fault only in the first run is `transient` (with the GPU's health attached, or one line
saying there is none); a bad batch is `reproducible`."""

from __future__ import annotations

import math

import pynvml
import torch
from fake_pynvml import FakeGpu, FakeNvml, install
from guard_support import alarms, batch, closure_for, tiny_model
from torch import nn

from inspector.gpu import device_state
from inspector.guard.guard import Guard, GuardConfig
from inspector.guard.inject import BitFlip

WARMUP = 3


def run(guard: Guard, model: nn.Module, steps: int, data=batch):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return [guard.run_step(closure_for(model, opt, data(step)), model, opt)
            for step in range(steps)]


def test_a_fault_in_the_first_run_only_is_transient_and_the_clean_rerun_is_kept(tmp_path):
    flip = BitFlip(step=4, param="0.weight", index=5, bit=30, runs="first")
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, faults=[flip]))
    model = tiny_model()
    verdicts = run(guard, model, 6)
    [alarm] = [v.alarm for v in verdicts if v.alarm]
    assert alarm.step == 4 and alarm.attribution == "transient"
    assert math.isfinite(alarm.rerun["grad_norm"])
    # warn applied the re-run's (clean) gradients: the weights stayed finite
    assert all(torch.isfinite(p).all() for p in model.parameters())
    [record] = alarms(tmp_path)
    assert record["attribution"] == "transient"
    note = record["device"]["note"]
    assert note.startswith("no GPU health attached:") and "\n" not in note


def test_a_bad_batch_is_reproducible(tmp_path):
    def data(step):
        x, y = batch(step)
        if step == 4:
            x[0, 0] = math.inf
        return x, y

    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, action="skip"))
    verdicts = run(guard, tiny_model(), 6, data)
    [alarm] = [v.alarm for v in verdicts if v.alarm]
    assert alarm.step == 4 and alarm.attribution == "reproducible"
    assert alarm.device is None
    assert alarms(tmp_path)[0]["attribution"] == "reproducible"


def test_the_rerun_replays_the_steps_random_draws(tmp_path):
    """Dropout draws a new mask every forward: only a restored RNG state makes the re-run of a
    real spike give the same loss, bit for bit."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.Dropout(0.5), nn.Linear(32, 1))

    def data(step):
        x, y = batch(step)
        return x, y * (40.0 if step == 5 else 1.0)

    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP))
    [alarm] = [v.alarm for v in run(guard, model, 6, data) if v.alarm]
    assert alarm.breaches[0].rule == "loss-spike-max"
    assert alarm.attribution == "reproducible"


def test_a_fault_in_every_run_looks_reproducible_on_one_device(tmp_path):
    flip = BitFlip(step=4, param="2.weight", index=0, bit=30, runs="every")
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, faults=[flip], action="skip"))
    [alarm] = [v.alarm for v in run(guard, tiny_model(), 5) if v.alarm]
    assert alarm.attribution == "reproducible"


def test_a_transient_alarm_carries_the_gpus_ecc_state(tmp_path, monkeypatch):
    gpu = FakeGpu(0, ecc={(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): 2})
    install(monkeypatch, FakeNvml([gpu]))
    flip = BitFlip(step=4, param="0.bias", index=1, bit=30)
    guard = Guard(tmp_path, GuardConfig(warmup=WARMUP, faults=[flip]))
    run(guard, tiny_model(), 5)
    [record] = alarms(tmp_path)
    [state] = record["device"]["gpus"]
    assert record["attribution"] == "transient"
    assert state["name"] == gpu.name and state["ecc_uncorrected_volatile"] == 2


def test_the_xid_watch_collects_events_from_the_start(monkeypatch):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0)]))
    watch = device_state.XidWatch()
    fake.inject_xid(0, 79)
    for _ in range(3000):  # the listener thread picks it up within one wait; 30 s at most
        if watch.events:
            break
        watch._stop.wait(0.01)
    watch.close()
    state = device_state.device_state(watch)
    assert [(x["gpu"], x["xid"]) for x in state["xids"]] == [(0, 79)]
