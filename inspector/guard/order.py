"""The data-order ledger: which samples each step got, from which worker, with which seeds.

    loader = track(DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4), run_dir)

`track` rebuilds a map-style DataLoader (or torchdata's `StatefulDataLoader`, whose
`state_dict` / `load_state_dict` the tracked loader passes through) around its dataset, batch
sampler, collate function and worker settings, so that each worker hands back, beside the
user's own batch, the indices it loaded, its worker id and (once) its seeds. The loop sees
exactly the batches it saw before. Per step the ledger writes one line (`order_log`), checks for
a sample seen twice in the epoch, and, after a resume, checks the next K steps against the
order the uninterrupted run had (`expect`). Workers whose torch, Python or NumPy seeds coincide
are named. Each finding is a `guard.alarm` record with action `warn`.

Resuming at step S (`OrderLedger(run, start_step=S)`, `resume_at`, or a tracked loader's
`load_state_dict`) works either way. A sampler resumed at S (sliced, or a stateful loader)
gives step S's batch first. The usual idiom instead restarts the epoch and skips
(`for i, b in enumerate(loader): if i < S: continue`): batches drawn first in the session that
replay this epoch's recorded steps exactly, in order, are a fast-forward, neither recorded nor
counted as duplicates. When a guard is linked (`Guard(..., ledger=)`, whose `step` calls
`trained()`), a replayed batch that is trained is a repeat (`sample-duplicated`); with
`batches_per_step` given (1 without gradient accumulation), batches drawn beyond a step's own
and never trained are a skip (`sample-skipped`). Without it nothing is called a skip, since
an accumulating loop draws several batches per step. Either way, after a resume at S the
session's first batch that an earlier session recorded at step S+K of this epoch means the
sampler resumed K steps ahead (`sample-skipped`, `steps`, `ahead`), and at the epoch's end the
samples any session's line drew in it that no kept step drew are named (`sample-skipped`,
`never_drawn`), from the ledger file alone. A sampler that draws with replacement (`track`
reads `replacement` off it) draws a sample twice and leaves others out by design: neither is
called a repeat or a skip.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from inspector.core.errors import CodedError
from inspector.guard.alarm_record import append_alarm
from inspector.run import journal
from inspector.run.order_log import (
    GENESIS,
    LEDGER_KIND,
    LedgerWriter,
    StepOrder,
    ledger_path,
    read_ledger,
    rolling_hash,
)

MAIN_PROCESS = -1
UNTRAINED_KEPT = 64
"""How many recorded steps drawn since the last trained one are kept (a run with no linked guard
never calls `trained`, so the record must stay bounded)."""

# Filled in each worker by `_SeedInit`, sent with that worker's first batch only.
_worker_seeds: dict | None = None


class OrderLedger:
    """One rank's data-order ledger for one process (a session)."""

    def __init__(self, run_dir: str | os.PathLike[str], rank: int | None = None,
                 start_step: int = 0, epoch: int = 0, flush_every: int = 64,
                 batches_per_step: int | None = None, replacement: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.replacement = replacement
        """The sampler draws with replacement (a weighted sampler): a sample drawn twice in an
        epoch is its way, and no epoch promises to draw every sample (`track` reads it off the
        sampler)."""
        self.batches_per_step = batches_per_step
        """Batches drawn per optimizer step (gradient accumulation), when the caller knows it:
        then more drawn between two trained steps are a skip. None: no skip check."""
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.session = uuid.uuid4().hex[:12]
        self.step = start_step
        self.epoch = epoch
        self.last: StepOrder | None = None
        self.last_batch: Any = None
        """The batch the tracked loader yielded last (a reference): what a linked guard checks
        sample by sample on a non-finite alarm."""
        self.seeds: dict[tuple[int, int], dict] = {}
        self._hash = GENESIS
        self._seen: set = set()
        self._expected: dict[int, tuple] = {}
        self.resume_mismatch: int | None = None
        self._replay: list[StepOrder] = []
        self._replayed = 0
        self._last_replayed: StepOrder | None = None
        self._untrained: deque[StepOrder] = deque(maxlen=UNTRAINED_KEPT)
        self._later: dict[tuple, int] = {}
        """After a resume at S: the batches earlier sessions recorded at this epoch's steps S
        and on, by their ids: the session's first batch found there at a later step skipped
        the steps between."""
        self._drawn: set = set()
        """After a resume: every sample any session drew in this epoch (the ledger file's
        lines, the steps later sessions replaced included), which the epoch's end compares
        with the samples its steps kept."""
        self.skip: set = set()
        """Sample ids the tracked loader leaves out of every batch (a scene's bad samples)."""
        path = ledger_path(self.run_dir, self.rank)
        self.path = path
        if start_step:
            self.resume_at(epoch, start_step)
        self._writer = LedgerWriter(path, self.session, self.rank, time.time(), flush_every)
        journal.append(journal.journal_path(self.run_dir), LEDGER_KIND,
                       {"path": str(path.relative_to(self.run_dir)), "rank": self.rank,
                        "session": self.session, "start_step": start_step, "epoch": epoch,
                        "time": time.time()})

    def resume_at(self, epoch: int, step: int) -> None:
        """Continue at (epoch, step) of a resumed run: the samples that epoch's earlier steps
        took (in this rank's ledger) count against duplicates."""
        self.epoch, self.step = epoch, step
        self._seen = set()
        self._replay, self._replayed = [], 0
        self._later, self._drawn = {}, set()
        if self.path.exists():
            steps = [s for s in read_ledger(self.path).steps if s.epoch == epoch]
            earlier = [s for s in steps if s.step < step]
            self._seen.update(i for s in earlier for i in s.ids)
            self._replay = earlier
            self._later = {s.ids: s.step for s in steps if s.step >= step and len(s.ids) > 1}
            self._drawn = set() if self.replacement else drawn_in(self.path, epoch, self.rank)

    def skip_samples(self, ids: Sequence) -> None:
        """Leave these samples out of every later batch of the tracked loader (workers started
        after this call see it)."""
        self.skip.update(_hashable(i) for i in ids)

    def set_epoch(self, epoch: int) -> None:
        """Start an epoch (the one before it ended): duplicates are counted within one."""
        self.end_epoch()
        self.epoch = epoch
        self._seen = set()
        self._replay, self._replayed = [], 0
        self._later = {}

    def end_epoch(self) -> None:
        """The epoch's last batch was drawn: after a resume, the samples some session drew in
        it that none of the steps it kept drew (nor `skip_samples` left out) were skipped
        (`sample-skipped`, with `never_drawn`); a sampler that draws with replacement promises
        no such thing."""
        missing = [i for i in self._drawn if i not in self._seen and i not in self.skip]
        self._drawn = set()
        if missing and not self.replacement:
            self._alarm("sample-skipped", len(missing), None, samples=sorted(
                missing, key=repr)[:8], epoch=self.epoch, never_drawn=True)

    def expect(self, batches: Sequence[Sequence], start_step: int | None = None) -> None:
        """After a resume: the ids the uninterrupted run got at the next len(batches) steps."""
        first = self.step if start_step is None else start_step
        self._expected = {first + i: tuple(ids) for i, ids in enumerate(batches)}

    def record(self, ids: Sequence, worker: int = MAIN_PROCESS) -> StepOrder:
        """Record the step's sample ids, check them, and advance the step; a batch that
        replays the resumed epoch's recorded steps in order is a fast-forward (module doc)."""
        ids = tuple(ids.tolist() if isinstance(ids, torch.Tensor) else ids)
        replayed = self._fast_forward(ids)
        if replayed is not None:
            return replayed
        place = (self.epoch, self.step, self.rank, worker)
        self._hash = rolling_hash(self._hash, ids, place)
        rec = StepOrder(*place, ids, self._hash, self.session)
        self._writer.step(rec)
        self._check_ahead(rec)
        # a sample drawn twice inside this batch is a repeat too, not only one of an earlier batch
        seen, dup = self._seen, []
        for i in ids:
            if i in seen:
                dup.append(i)
            else:
                seen.add(i)
        if dup and not self.replacement:
            self._alarm("sample-duplicated", len(dup), None, samples=list(dup[:8]),
                        worker=worker, epoch=self.epoch)
        self._check_resume(rec)
        self.last = rec
        self._untrained.append(rec)
        self.step += 1
        return rec

    def trained(self) -> None:
        """The last batch drawn was trained on (a linked guard calls this at each step): a
        replayed one is a repeat; with `batches_per_step` known, recorded steps drawn before
        the step's own batches and never trained were skipped."""
        if self._last_replayed is not None:
            rec, self._last_replayed = self._last_replayed, None
            self._replay = []
            self._alarm("sample-duplicated", len(rec.ids), None, samples=list(rec.ids[:8]),
                        epoch=rec.epoch, replays_step=rec.step)
            return
        drawn = list(self._untrained)
        self._untrained.clear()
        per = self.batches_per_step
        skipped = drawn[:len(drawn) - per] if per else []
        if skipped:
            ids = [i for s in skipped for i in s.ids]
            self._alarm("sample-skipped", len(ids), None, samples=ids[:8], epoch=self.epoch,
                        steps=[s.step for s in skipped])

    def _fast_forward(self, ids: tuple) -> StepOrder | None:
        """The recorded step this batch replays, while the session's first batches replay the
        epoch's recorded steps in order; None (and no more fast-forward) otherwise."""
        if self._replayed < len(self._replay) and self._replay[self._replayed].ids == ids:
            rec = self._replay[self._replayed]
            self._replayed += 1
            self._last_replayed = rec
            return rec
        self._replay, self._last_replayed = [], None
        return None

    def record_seeds(self, worker: int, seeds: dict) -> None:
        """Record one worker's seeds; name the workers of this epoch that share one."""
        self._writer.seeds(self.epoch, worker, seeds)
        for (epoch, other), theirs in self.seeds.items():
            if epoch != self.epoch or other == worker:
                continue
            shared = [k for k in seeds if k in theirs and seeds[k] == theirs[k]]
            if shared:
                self._alarm("worker-seed-shared", shared, None, workers=[other, worker],
                            epoch=self.epoch)
        self.seeds[(self.epoch, worker)] = seeds

    def state_dict(self) -> dict:
        """Where the ledger stands, for the scene's data-loader state."""
        return {"epoch": self.epoch, "step": self.step, "rank": self.rank,
                "session": self.session, "hash": self._hash}

    def close(self) -> None:
        """Flush and fsync the ledger file."""
        self._writer.close()

    def _check_ahead(self, rec: StepOrder) -> None:
        """The session's first batch after a resume: one an earlier session recorded K steps
        later in this epoch means the sampler resumed K steps ahead (`sample-skipped`, the
        skipped steps' samples as that session recorded them)."""
        later, self._later = self._later, {}
        at = later.get(rec.ids)
        if at is None or at <= rec.step:
            return
        by_step = {step: ids for ids, step in later.items()}
        ids = [i for step in range(rec.step, at) for i in by_step.get(step, ())]
        self._alarm("sample-skipped", len(ids), None, samples=ids[:8], epoch=self.epoch,
                    steps=list(range(rec.step, at)), ahead=at - rec.step)

    def _check_resume(self, rec: StepOrder) -> None:
        want = self._expected.pop(rec.step, None)
        if want is None or self.resume_mismatch is not None:
            return
        if want != rec.ids:
            self.resume_mismatch = rec.step
            self._expected.clear()
            self._alarm("resume-order", list(rec.ids[:8]), list(want[:8]), epoch=rec.epoch,
                        worker=rec.worker)

    def _alarm(self, rule: str, value: Any, threshold: Any, **extra: Any) -> None:
        append_alarm(self.run_dir, step=self.step, rule=rule, value=value,
                     threshold=threshold, action="warn", rank=self.rank, **extra)


def drawn_in(path: Path, epoch: int, rank: int) -> set:
    """Every sample id any sound session's line of `path` records for this epoch and rank, the
    steps a later session recorded again included (what the file says was drawn; `read_ledger`
    checks each session's chain)."""
    return {i for s in read_ledger(path).lines if s.epoch == epoch and s.rank == rank
            for i in s.ids}


def expected_from_ledger(path: str | os.PathLike[str], epoch: int, start_step: int,
                         k: int) -> list[tuple]:
    """The ids an earlier (uninterrupted) run's ledger holds for K steps from `start_step`."""
    steps = [s for s in read_ledger(path).steps if s.epoch == epoch and s.step >= start_step]
    return [s.ids for s in steps[:k]]


def expected_from_sampler(batch_sampler: Any, skip: int, k: int) -> list[tuple]:
    """The ids a fresh, identically seeded batch sampler gives for K batches after `skip`."""
    out: list[tuple] = []
    for n, batch in enumerate(batch_sampler):
        if n >= skip + k:
            break
        if n >= skip:
            out.append(tuple(int(i) for i in batch))
    return out


class TrackedLoader:
    """A DataLoader that records every batch in an `OrderLedger`; iterate it as the original."""

    def __init__(self, loader: DataLoader, ledger: OrderLedger) -> None:
        self.loader = loader
        self.ledger = ledger
        self._started = False

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict:
        """The wrapped loader's state (a StatefulDataLoader's; None for a DataLoader) and
        the ledger's position, to save in a checkpoint."""
        inner = getattr(self.loader, "state_dict", None)
        return {"loader": inner() if inner is not None else None,
                "ledger": self.ledger.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Resume from `state_dict()`: the loader where it stood, the ledger at that step."""
        if state.get("loader") is not None:
            self.loader.load_state_dict(state["loader"])
        self.ledger.resume_at(int(state["ledger"]["epoch"]), int(state["ledger"]["step"]))

    def __iter__(self) -> Iterator[Any]:
        """Each pass after the first is the next epoch."""
        if self._started:
            self.ledger.set_epoch(self.ledger.epoch + 1)
        self._started = True
        for ids, worker, seeds, batch in self.loader:
            if seeds is not None:
                self.ledger.record_seeds(worker, seeds)
            self.ledger.record(ids, worker)
            self.ledger.last_batch = batch
            yield batch
        self.ledger.end_epoch()


def track(loader: DataLoader, run_dir: str | os.PathLike[str] | None = None, *,
          ledger: OrderLedger | None = None,
          id_fn: Callable[[int], Any] | None = None) -> TrackedLoader:
    """Wrap a map-style DataLoader so every batch is recorded in the run's order ledger."""
    if ledger is None:
        if run_dir is None:
            raise CodedError("no-ledger", "track() needs a run folder or an OrderLedger")
        ledger = OrderLedger(run_dir)
    if loader.batch_sampler is None:
        raise CodedError("not-map-style", "track() needs a map-style dataset with batches "
                         "(batch_size set); record an iterable dataset's ids with "
                         "OrderLedger.record")
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    ledger.replacement = ledger.replacement or bool(getattr(sampler, "replacement", False))
    workers = loader.num_workers
    # The same class again: torchdata's StatefulDataLoader keeps its state_dict/load_state_dict.
    extra = ({"snapshot_every_n_steps": loader.snapshot_every_n_steps}
             if hasattr(loader, "snapshot_every_n_steps") else {})
    rebuilt = type(loader)(
        _IdDataset(loader.dataset, id_fn), batch_sampler=loader.batch_sampler,
        num_workers=workers, collate_fn=_IdCollate(loader.collate_fn, ledger.skip),
        pin_memory=loader.pin_memory, timeout=loader.timeout,
        worker_init_fn=_SeedInit(loader.worker_init_fn),
        multiprocessing_context=loader.multiprocessing_context, generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if workers else None,
        persistent_workers=loader.persistent_workers if workers else False, **extra)
    return TrackedLoader(rebuilt, ledger)


class _IdDataset(Dataset):
    """The user's dataset, each item paired with its sample id (its index unless `id_fn`)."""

    def __init__(self, dataset: Any, id_fn: Callable[[int], Any] | None) -> None:
        self.dataset = dataset
        self.id_fn = id_fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        key = self.id_fn(index) if self.id_fn is not None else int(index)
        return key, self.dataset[index]


class _IdCollate:
    """Runs in the worker: the user's collate on the items, with ids, worker id and seeds."""

    def __init__(self, collate: Callable[[list], Any], skip: set) -> None:
        self.collate = collate
        self.skip = skip

    def __call__(self, pairs: list[tuple[Any, Any]]) -> tuple:
        global _worker_seeds
        if self.skip:
            pairs = [p for p in pairs if _hashable(p[0]) not in self.skip]
        info = get_worker_info()
        worker = MAIN_PROCESS if info is None else info.id
        seeds, _worker_seeds = _worker_seeds, None
        return [p[0] for p in pairs], worker, seeds, self.collate([p[1] for p in pairs])


class _SeedInit:
    """Runs once in each worker: the user's worker_init_fn, then note the worker's seeds."""

    def __init__(self, init: Callable[[int], None] | None) -> None:
        self.init = init

    def __call__(self, worker_id: int) -> None:
        global _worker_seeds
        if self.init is not None:
            self.init(worker_id)
        _worker_seeds = worker_seeds()


def worker_seeds() -> dict[str, Any]:
    """This process's torch seed and fingerprints of its Python and NumPy generator states."""
    out: dict[str, Any] = {"torch": torch.initial_seed(),
                           "python": _fingerprint(repr(random.getstate()))}
    try:
        import numpy as np
    except ImportError:
        return out
    out["numpy"] = _fingerprint(np.random.get_state()[1].tobytes())
    return out


def _hashable(sample_id: Any) -> Any:
    """A sample id as a set member (a composite id read back from JSON is a list)."""
    return tuple(sample_id) if isinstance(sample_id, list) else sample_id


def _fingerprint(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=8).hexdigest()
