"""Tiny models and loops the guard's tests train, on the CPU, built in code."""

from __future__ import annotations

import struct

import pytest
import torch
from torch import nn

from inspector.core.vocabulary import SaveOutcome
from inspector.guard.guard import Guard
from inspector.guard.weights import fingerprint
from inspector.run import journal
from inspector.run.checkpoints import read_ledger, resume_choice


@pytest.fixture(params=["inline", "background"])
def weights_reader(request, monkeypatch) -> str:
    """A test twice: the weights read on the training thread, and (as on a machine with a
    spare core) the norms and the check's fingerprint read by the guard's background thread."""
    monkeypatch.setattr(fingerprint, "spare_core", lambda params: request.param == "background")
    return request.param


def flip_float(value: float, bit: int) -> float:
    """One bit of a Python float's 64 flipped: the test's own fault in a hyper-parameter."""
    (word,) = struct.unpack("<Q", struct.pack("<d", value))
    return struct.unpack("<d", struct.pack("<Q", word ^ (1 << bit)))[0]


def tiny_model(seed: int = 0) -> nn.Module:
    """A two-layer MLP; the same weights for the same seed."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def batch(step: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's batch, the same for the same step."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(16, 4, generator=g)
    return x * scale, x.sum(dim=1, keepdim=True)


def closure_for(model: nn.Module, optimizer: torch.optim.Optimizer, data):
    """The step as a closure: zero_grad, forward, backward, the loss."""
    def closure() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        x, y = data
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    return closure


def mse(model: nn.Module, data, step: int) -> torch.Tensor:
    """The plain loop's loss: MSE of the model's output against the batch's target."""
    x, y = data
    return nn.functional.mse_loss(model(x), y)


def run(guard: Guard, model: nn.Module, steps, opt=None, before_step=None, data=batch,
        loss_of=mse, after_step=None):
    """The documented plain loop. `before_step(step)` runs between optimizer steps (where a
    memory fault lands); an optimizer it returns is the one used from then on; `loss_of(model,
    batch, step)` computes the loss; `after_step(step, opt)` runs after the optimizer step
    (where a run saves). The verdicts."""
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.01)
    out = []
    for step in steps:
        if before_step is not None:
            swapped = before_step(step)
            if isinstance(swapped, torch.optim.Optimizer):
                opt = swapped
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, data(step), step)
        loss.backward()
        verdict = guard.step(loss, model, opt, step=step)
        if verdict.take_step:
            opt.step()
        out.append(verdict)
        if after_step is not None:
            after_step(step, opt)
    return out


def alarms(run_dir) -> list[dict]:
    """The guard.alarm records of a run's journal (which must be intact)."""
    read = journal.read(journal.journal_path(run_dir))
    assert read.intact, read.problems
    return [dict(e.record) for e in read.of_kind("guard.alarm")]


def unhealthy_at_step_4(run_dir, said: str) -> dict:
    """The saves of a run that saved every 2 steps with a fault after step 4: step 2 verified,
    step 4 unhealthy for `said`, and resumes land on step 2. The saves by step."""
    saves = {s.step: s for s in read_ledger(run_dir).saves}
    assert saves[2].outcome == SaveOutcome.VERIFIED
    assert saves[4].outcome == SaveOutcome.UNHEALTHY
    assert said in saves[4].detail
    assert resume_choice(run_dir).record.step == 2
    return saves


def guarded_run(run_dir, steps: int = 12, nan_step: int = 6, dup_step: int = 8,
                saves: tuple[int, ...] = (4, 10), faults: tuple = ()):
    """A run folder written by the real guard, order ledger and checkpoint ledger on the CPU:
    a NaN batch at `nan_step` (skipped, re-run: reproducible), step 2's samples again at
    `dup_step` (sample-duplicated), a checkpoint saved at each of `saves`."""
    import math

    from inspector.guard.guard import Guard, GuardConfig
    from inspector.guard.order import OrderLedger
    from inspector.ledger import save

    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    order = OrderLedger(run_dir, rank=0)
    order.record_seeds(0, {"torch": 1234, "python": "ab12"})
    order.record_seeds(1, {"torch": 1235, "python": "cd34"})
    guard = Guard(run_dir, GuardConfig(warmup=3, action="skip", faults=list(faults)),
                  ledger=order)
    for step in range(steps):
        first = 4 * (2 if step == dup_step else step)
        order.record(range(first, first + 4), worker=step % 2)
        x, y = batch(step)
        if step == nan_step:
            x[3, 1] = math.nan
        guard.run_step(closure_for(model, optimizer, (x, y)), model, optimizer)
        if step in saves:
            save(model.state_dict(), run_dir / "ckpt" / f"step-{step}.pt", step=step,
                 run_dir=run_dir)
    guard.close()
    order.close()
    return run_dir


def ddp_rank(rank: int, world: int, store: str, run_dir: str, bad_rank: int, bad_step: int,
             every: int, out: str) -> None:
    """One rank of a DDP run over gloo on the CPU with the guard; on `bad_rank` the top
    exponent bit of one weight flips inside optimizer step `bad_step` (the test's own fault,
    before the guard's post-step fingerprint); the alarms it saw go to `out`.RANK.json."""
    import json

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from inspector.guard.guard import Guard, GuardConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = DistributedDataParallel(tiny_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    weight = model.module[2].weight
    state = {"step": 0}

    def in_the_step(optimizer, args, kwargs):
        if rank == bad_rank and state["step"] == bad_step:
            with torch.no_grad():
                weight.view(-1).view(torch.int32)[1] ^= 1 << 22  # a mantissa bit: x ~1.5
        state["step"] += 1

    opt.register_step_post_hook(in_the_step)
    guard = Guard(run_dir, GuardConfig(replica_every=every, console=False), rank=rank)
    seen = []
    for step in range(3 * every):
        opt.zero_grad()
        x, y = batch(step + 100 * rank)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        verdict = guard.step(loss, model, opt, step=step)
        if verdict.alarm:
            seen += [[step, b.rule, b.param, b.value] for b in verdict.alarm.breaches]
        opt.step()
    guard.close()
    dist.destroy_process_group()
    with open(f"{out}.{rank}.json", "w") as fh:
        json.dump(seen, fh)


def fsdp_rank(rank: int, world: int, store: str, run_dir: str, out: str) -> None:
    """An FSDP2 (`fully_shard`, DTensor parameters) run over gloo with the guard and a replica
    check every 2 steps; the test's own flip lands in rank 0's local shard after step 3."""
    import json

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from inspector.guard.guard import Guard, GuardConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = tiny_model()
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(run_dir, GuardConfig(replica_every=2, console=False), rank=rank)
    seen = []
    for step in range(6):
        opt.zero_grad()
        x, y = batch(step + 100 * rank)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        verdict = guard.step(loss, model, opt, step=step)
        seen += [[step, b.rule, b.param] for b in verdict.alarm.breaches] if verdict.alarm else []
        opt.step()
        if step == 3 and rank == 0:
            with torch.no_grad():
                model[0].weight.to_local().view(-1).view(torch.int32)[1] ^= 1 << 30
    guard.close()
    dist.destroy_process_group()
    with open(f"{out}.{rank}.json", "w") as fh:
        json.dump(seen, fh)
