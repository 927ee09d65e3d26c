"""The data-order ledger with real DataLoaders and worker processes: what it records, shared
worker seeds, a worker restart that duplicates and skips samples, a resume that fast-forwards
wrongly, and `order-diff` naming each."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
import torch
from guard_support import alarms
from torch.utils.data import DataLoader, Dataset

from inspector.cli import main
from inspector.guard.order import OrderLedger, expected_from_ledger, track
from inspector.run.order_log import ledger_path, read_ledger

N, BS = 40, 4


class Squares(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([float(i), float(i * i)])


class ResumableBatchSampler:
    """A seeded shuffle in batches that starts at batch `start` (what a resumable sampler
    restores); `pulled` counts batches the DataLoader took, prefetched ones included."""

    def __init__(self, seed: int = 7, start: int = 0):
        self.seed, self.start, self.pulled = seed, start, 0

    def __iter__(self):
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(self.seed)).tolist()
        for b in range(self.start, N // BS):
            self.pulled += 1
            yield perm[b * BS:(b + 1) * BS]

    def __len__(self):
        return N // BS - self.start


def loader(sampler, workers=2, **kw):
    return DataLoader(Squares(), batch_sampler=sampler, num_workers=workers, **kw)


def full_run(run_dir):
    ld = track(loader(ResumableBatchSampler()), run_dir)
    batches = list(ld)
    ld.ledger.close()
    return batches


def interrupted_run(run_dir, resume_at_batch, crash_after=5, k=3, reference=None):
    """Train `crash_after` steps, lose the workers, resume at step `crash_after` with the
    sampler restarted at `resume_at_batch`; the second session's ledger."""
    sampler = ResumableBatchSampler()
    first = track(loader(sampler), run_dir)
    it = iter(first)
    for _ in range(crash_after):
        next(it)
    pulled = sampler.pulled
    del it  # the workers go away mid-epoch
    first.ledger.close()
    ledger = OrderLedger(run_dir, start_step=crash_after)
    if reference is not None:
        ledger.expect(expected_from_ledger(ledger_path(reference, 0), 0, crash_after, k))
    start = pulled if resume_at_batch == "pulled" else resume_at_batch
    second = track(loader(ResumableBatchSampler(start=start)), ledger=ledger)
    list(itertools.islice(second, N // BS - crash_after))  # the loop's step budget per epoch
    ledger.close()
    ledger.pulled_before_crash = pulled
    return ledger


def order_diff(capsys, a, b, *extra):
    code = main(["run", "order-diff", str(a), str(b), *extra])
    return code, capsys.readouterr().out


def test_the_ledger_records_each_step_and_the_loop_sees_its_own_batches(tmp_path):
    plain = list(loader(ResumableBatchSampler()))
    tracked = full_run(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(plain, tracked, strict=True))
    read = read_ledger(ledger_path(tmp_path, 0))
    assert not read.problems
    assert [s.step for s in read.steps] == list(range(10))
    assert {s.worker for s in read.steps} == {0, 1}
    assert [list(s.ids) for s in read.steps] == [
        [int(v) for v in b[:, 0].tolist()] for b in plain]
    assert len({s.hash for s in read.steps}) == 10
    assert sorted(s["w"] for s in read.seeds) == [0, 1]
    assert read.seeds[0]["seeds"]["torch"] != read.seeds[1]["seeds"]["torch"]
    assert alarms(tmp_path) == []


def _same_seeds(worker_id):
    random.seed(0)
    np.random.seed(0)


def test_workers_that_share_a_seed_are_named(tmp_path):
    ld = track(loader(ResumableBatchSampler(), worker_init_fn=_same_seeds), tmp_path)
    list(ld)
    ld.ledger.close()
    [record] = alarms(tmp_path)
    assert record["rule"] == "worker-seed-shared"
    assert sorted(record["value"]) == ["numpy", "python"] and record["workers"] == [0, 1]


def test_a_worker_restart_that_duplicates_and_skips_samples(tmp_path, capsys):
    full_run(tmp_path / "a")
    # the restarted workers begin one batch early: step 5 gets batch 4 again
    interrupted_run(tmp_path / "b", resume_at_batch=4)
    [record] = alarms(tmp_path / "b")
    assert record["rule"] == "sample-duplicated" and record["step"] == 5
    assert record["value"] == BS
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 1
    assert "first divergent step: epoch 0 step 5 rank 0" in out
    assert "duplicated 4, skipped 4, reordered 0" in out
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b", "--json")
    result = json.loads(out)
    assert (result["duplicated"], result["skipped"]) == (4, 4)
    a_steps = read_ledger(ledger_path(tmp_path / "a", 0)).steps
    assert {p["sample"] for p in result["duplicated_at"]} == set(a_steps[4].ids)
    assert {p["step"] for p in result["duplicated_at"]} == {5}
    assert {p["sample"] for p in result["skipped_at"]} == set(a_steps[9].ids)
    assert {p["worker"] for p in result["skipped_at"]} == {a_steps[9].worker}
    assert sum(c.get("duplicated", 0) for c in result["by_worker"].values()) == 4


def test_a_resume_that_fast_forwards_wrongly_is_caught_at_its_first_step(tmp_path, capsys):
    full_run(tmp_path / "a")
    # the sampler's own counter includes the batches the workers had prefetched
    ledger = interrupted_run(tmp_path / "b", "pulled", reference=tmp_path / "a")
    assert ledger.resume_mismatch == 5
    [record] = alarms(tmp_path / "b")
    assert record["rule"] == "resume-order" and record["step"] == 5
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 1 and "first divergent step: epoch 0 step 5" in out
    lost = ledger.pulled_before_crash - 5  # prefetched by the workers, never trained on
    assert lost > 1
    # B's epoch ended after N/BS - lost steps; order-diff counts only steps both recorded
    # (B might still be running), so of the lost batches it counts the one at step 5
    assert f"duplicated 0, skipped {BS}, reordered 0 ({5 + 1} steps compared)" in out
    assert len(read_ledger(ledger_path(tmp_path / "b", 0)).steps) == N // BS - lost


def test_a_correct_resume_matches_the_uninterrupted_order(tmp_path, capsys):
    full_run(tmp_path / "a")
    ledger = interrupted_run(tmp_path / "b", resume_at_batch=5, reference=tmp_path / "a")
    assert ledger.resume_mismatch is None
    assert alarms(tmp_path / "b") == []
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 0 and out.startswith("same order: 10 steps compared")


def test_a_reordered_epoch_is_counted(tmp_path, capsys):
    full_run(tmp_path / "a")
    ld = track(loader(ResumableBatchSampler(seed=8)), tmp_path / "b")
    list(ld)
    ld.ledger.close()
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b", "--json")
    result = json.loads(out)
    assert code == 1 and result["first_divergent"]["step"] == 0
    assert result["duplicated"] == result["skipped"] == 0 and result["reordered"] > 0


def test_a_ledger_cut_short_is_read_up_to_its_damage(tmp_path, capsys):
    full_run(tmp_path / "a")
    path = ledger_path(tmp_path / "a", 0)
    path.write_bytes(path.read_bytes()[:-20])
    read = read_ledger(path)
    assert len(read.steps) == 9 and len(read.problems) == 1 and "cut short" in read.problems[0]
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "a")
    assert code == 0 and "warning:" in out


def test_no_ledger_is_exit_2(tmp_path, capsys):
    assert main(["run", "order-diff", str(tmp_path), str(tmp_path)]) == 2
    assert "no data-order ledger" in capsys.readouterr().err


def test_an_iterable_dataset_is_refused_with_a_next_step():
    from inspector.core.errors import CodedError

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from range(3)

    with pytest.raises(CodedError, match=r"OrderLedger\.record"):
        track(DataLoader(Stream(), batch_size=None), ledger=object())


def test_order_diff_runs_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys, inspector.cli.run.order_diff; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_a_stateful_dataloader_resumes_into_the_uninterrupted_order(tmp_path, capsys):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make(run_dir):
        g = torch.Generator().manual_seed(3)
        return track(StatefulDataLoader(Squares(), batch_size=BS, shuffle=True, num_workers=2,
                                        generator=g), run_dir)

    a = make(tmp_path / "a")
    list(a)
    a.ledger.close()
    first = make(tmp_path / "b")
    it = iter(first)
    for _ in range(5):
        next(it)
    saved = first.state_dict()
    del it
    first.ledger.close()
    resumed = make(tmp_path / "b")
    resumed.load_state_dict(saved)
    assert resumed.ledger.step == 5
    resumed.ledger.expect(expected_from_ledger(ledger_path(tmp_path / "a", 0), 0, 5, 3))
    list(resumed)
    resumed.ledger.close()
    assert resumed.ledger.resume_mismatch is None
    assert alarms(tmp_path / "b") == []
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 0, out


@pytest.mark.parametrize("line", [
    '{"e": 0, "s": 0, "r": 0, "w": -1, "ids": [{"a": 1}], "h": "x", "t": "s"}',
    '{"e": 0, "s": 0, "r": 0, "w": -1, "ids": ' + "[" * 50_000 + "]" * 50_000 + ', "h": "x"}',
    '{"e": 0, "s": 0, "r": 0, "w": -1, "ids": [[[1]]], "h": "x", "t": "s"}',
])
def test_order_diff_of_hostile_lines_is_named_never_a_traceback(tmp_path, capsys, line):
    from inspector.cli import main
    for name in ("a", "b"):
        folder = tmp_path / name / "order"
        folder.mkdir(parents=True)
        (folder / "rank-00000.jsonl").write_text(line + "\n")
    code = main(["run", "order-diff", str(tmp_path / "a"), str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code in (0, 1, 2) and "Traceback" not in err


def resumed_with_the_skip_idiom(run_dir, skip, crash_after=5, per_step=1):
    """Train `crash_after` steps with a linked guard, crash, resume at step `crash_after` by
    restarting the epoch and skipping the first `skip` batches (the usual idiom)."""
    from torch import nn

    from inspector.guard.guard import Guard, GuardConfig

    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def session(ledger, skip_first):
        guard = Guard(run_dir, GuardConfig(console=False), ledger=ledger)
        ld = track(loader(ResumableBatchSampler(), workers=0), ledger=ledger)
        for i, b in enumerate(ld):
            if i < skip_first:
                continue
            if ledger.step > N // BS or (skip_first == 0 and i == crash_after):
                break
            opt.zero_grad()
            loss = model(b / N ** 2).pow(2).mean()
            loss.backward()
            if guard.step(loss, model, opt).take_step:
                opt.step()
        guard.close()
        ledger.close()

    session(OrderLedger(run_dir, batches_per_step=per_step), 0)  # steps 0..4, then it dies
    session(OrderLedger(run_dir, start_step=crash_after, batches_per_step=per_step), skip)


def test_the_skip_the_first_s_batches_idiom_is_a_fast_forward_not_a_repeat(tmp_path, capsys):
    full_run(tmp_path / "a")
    resumed_with_the_skip_idiom(tmp_path / "b", skip=5)
    assert alarms(tmp_path / "b") == []
    code, out = order_diff(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 0 and out.startswith("same order: 10 steps compared")


def test_skipping_too_few_after_a_resume_is_a_repeat(tmp_path):
    resumed_with_the_skip_idiom(tmp_path, skip=3)
    rules = [(a["rule"], a.get("replays_step")) for a in alarms(tmp_path)]
    assert rules[0] == ("sample-duplicated", 3)


def test_skipping_too_many_after_a_resume_is_a_skip(tmp_path):
    resumed_with_the_skip_idiom(tmp_path, skip=7)
    [record] = [a for a in alarms(tmp_path) if a["rule"] == "sample-skipped"]
    assert record["steps"] == [5, 6] and record["value"] == 2 * BS


def test_without_batches_per_step_nothing_is_called_a_skip(tmp_path):
    resumed_with_the_skip_idiom(tmp_path, skip=7, per_step=None)
    assert not [a for a in alarms(tmp_path) if a["rule"] == "sample-skipped"]


class OneBadSample(Squares):
    """Sample 13's input is NaN: the bad sample a halt must name."""

    def __getitem__(self, i):
        row = super().__getitem__(i)
        return row * math.nan if i == 13 else row / N ** 2


def test_a_halt_names_the_bad_sample_and_a_resume_skips_exactly_it(tmp_path):
    from torch import nn

    from inspector.guard.guard import Guard, GuardConfig, GuardHalt
    from inspector.guard.scene import read_scene

    def session(ledger, skip_first, scene=None):
        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        guard = Guard(tmp_path, GuardConfig(action="halt", console=False), ledger=ledger)
        if scene is not None:
            guard.resume(scene, model, opt)
        ld = track(DataLoader(OneBadSample(), batch_sampler=ResumableBatchSampler()),
                   ledger=ledger)
        trained = []
        for i, b in enumerate(ld):
            if i < skip_first:
                continue
            opt.zero_grad()
            model(b).pow(2).mean().backward()
            guard.step(model(b).pow(2).mean(), model, opt)  # the documented line: no batch
            opt.step()
            trained.append(ledger.last.ids)
        return trained

    with pytest.raises(GuardHalt) as halted:
        session(OrderLedger(tmp_path), 0)
    scene = read_scene(halted.value.scene)
    assert scene.bad_samples == [13] and 13 in scene.sample_ids
    assert alarms(tmp_path)[0]["bad_samples"] == [13]
    ledger = OrderLedger(tmp_path, start_step=scene.step)
    trained = session(ledger, scene.step, scene=halted.value.scene)  # no second halt
    ids = [i for step in trained for i in step]
    assert 13 not in ids and set(scene.sample_ids) - {13} <= set(ids)


def test_bad_samples_reads_input_rows_and_per_sample_losses():
    from inspector.guard.numerics import bad_samples

    x = torch.ones(4, 3)
    x[2, 1] = math.inf
    assert bad_samples((x, torch.zeros(4)), ["a", "b", "c", "d"]) == ["c"]
    losses = torch.tensor([0.1, math.nan, 0.2, 0.3])
    assert bad_samples({"x": torch.ones(4, 3)}, [7, 8, 9, 10], lambda: losses) == [8]
    assert bad_samples(x, None) == [2]


def test_a_sample_drawn_twice_inside_one_batch_is_a_repeat(tmp_path):
    def first_batches(run_dir, order):
        loader = track(DataLoader(Squares(), batch_size=BS, sampler=order), run_dir)
        batches = [x[:, 0].long().tolist() for x in itertools.islice(loader, 3)]
        loader.ledger.close()
        return batches

    clean = first_batches(tmp_path / "clean", list(range(N)))
    order = list(range(N))
    order[6] = 5  # the test's own fault: index 5 drawn again in its own batch, 6 never
    hurt = first_batches(tmp_path / "hurt", order)
    assert sorted(clean[1]) == [4, 5, 6, 7] and sorted(hurt[1]) == [4, 5, 5, 7]
    assert alarms(tmp_path / "clean") == []
    [record] = alarms(tmp_path / "hurt")
    assert record["rule"] == "sample-duplicated" and record["step"] == 1
    assert record["samples"] == [5] and record["value"] == 1
