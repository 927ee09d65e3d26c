"""A resume whose sampler starts K batches ahead skips K steps' samples: the session's first
batch is one an earlier session recorded K steps later, and at the epoch's end the samples no
kept step drew are named, both from the ledger file. Samplers that legitimately draw a subset
(a DistributedSampler's shard, drop_last) or draw with replacement raise nothing. Each fault is
the test's own slice of the sampler, beside the right slice."""

from __future__ import annotations

import pytest
import torch
from guard_support import alarms
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, WeightedRandomSampler

from inspector.guard.guard import Guard, GuardConfig
from inspector.guard.order import OrderLedger, track

N, B, CRASH, RESUME = 48, 4, 8, 5


def dataset(n: int = N) -> TensorDataset:
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(1))
    return TensorDataset(x, x.sum(1, keepdim=True))


def session(run_dir, order, start, steps=None, **loader_kw):
    """One process: a linked guard and ledger (one batch a step), the loader over `order`
    (a list of indices, or a sampler), trained for `steps` steps or to the epoch's end."""
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ledger = OrderLedger(run_dir, start_step=start, epoch=0, batches_per_step=1)
    guard = Guard(run_dir, GuardConfig(console=False), ledger=ledger)
    loader = track(DataLoader(dataset(loader_kw.pop("n", N)), sampler=order, **loader_kw),
                   ledger=ledger)
    for i, (x, y) in enumerate(loader):
        if i == steps:
            break
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if guard.step(loss, model, opt).take_step:
            opt.step()
    guard.close()
    ledger.close()


def resumed(run_dir, slice_at, order=None, **kw):
    """Session 1 trains CRASH steps of epoch 0 and dies; session 2 resumes at step RESUME with
    the sampler sliced at batch `slice_at` (RESUME is right)."""
    order = order or torch.randperm(N, generator=torch.Generator().manual_seed(7)).tolist()
    session(run_dir, order, 0, steps=CRASH, batch_size=B, **kw)
    session(run_dir, order[slice_at * B:], RESUME, batch_size=B, **kw)
    return order


def rules(run_dir) -> list[tuple]:
    return [(a["rule"], a.get("steps"), a.get("never_drawn"), a["value"])
            for a in alarms(run_dir)]


def test_a_resume_that_slices_the_sampler_right_raises_nothing(tmp_path):
    resumed(tmp_path, RESUME)
    assert rules(tmp_path) == []


def test_a_resume_that_starts_two_batches_ahead_is_named_at_once_and_at_the_epochs_end(
        tmp_path):
    order = resumed(tmp_path, RESUME + 2)
    found = alarms(tmp_path)
    assert rules(tmp_path) == [("sample-skipped", [5, 6], None, 2 * B),
                               ("sample-skipped", None, True, 2 * B)]
    lost = set(order[RESUME * B:(RESUME + 2) * B])
    assert set(found[0]["samples"]) == lost and found[0]["step"] == RESUME
    assert set(found[1]["samples"]) == lost


def test_a_resume_that_starts_behind_is_a_repeat_and_skips_nothing(tmp_path):
    resumed(tmp_path, RESUME - 2)
    assert {r[0] for r in rules(tmp_path)} == {"sample-duplicated"}


def test_drop_last_resumed_right_raises_nothing(tmp_path):
    resumed(tmp_path, RESUME, order=torch.randperm(N + 3).tolist(), drop_last=True, n=N + 3)
    assert rules(tmp_path) == []


def test_a_distributed_samplers_shard_resumed_right_raises_nothing(tmp_path):
    shard = list(DistributedSampler(range(2 * N), num_replicas=2, rank=1, shuffle=True,
                                    seed=3))
    resumed(tmp_path, RESUME, order=shard, n=2 * N)
    assert rules(tmp_path) == []


@pytest.mark.parametrize("resumed_from", [None, 3])
def test_a_sampler_with_replacement_raises_nothing(tmp_path, resumed_from):
    def weighted(seed):
        return WeightedRandomSampler([1.0] * (N // 2) + [4.0] * (N // 2), N,
                                     generator=torch.Generator().manual_seed(seed))

    assert len({i for i in weighted(0)}) < N  # it repeats samples by design
    session(tmp_path, weighted(0), 0, steps=CRASH if resumed_from else None, batch_size=B)
    if resumed_from:  # a restart draws anew: the first session's draws are no promise
        session(tmp_path, weighted(1), resumed_from, steps=N // B - resumed_from,
                batch_size=B)
        session(tmp_path, weighted(2), resumed_from, batch_size=B)
    assert rules(tmp_path) == []
