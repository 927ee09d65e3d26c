"""Compare the sample order of two runs (or one run before and after a resume), rank by rank.

Per rank and epoch, over the steps both runs recorded:

- the first divergent step: the first (epoch, step) whose ids differ, or that only one run has;
- duplicated: occurrences in B beyond the count A has in that whole epoch (at least one);
- skipped: ids A saw in the common steps that B never saw in that epoch;
- reordered: ids both saw, out of A's relative order in B (the count outside the longest run of
  them B keeps in A's order, so a shift from one skipped batch reorders nothing).

Each duplicated or skipped sample is named with its epoch, step, rank and worker (a few
examples; counts are exact). No torch here.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from inspector.run.order_log import StepOrder

EXAMPLES = 5


@dataclass(frozen=True)
class Place:
    """Where a sample was: epoch, step, rank and worker."""

    sample: object
    epoch: int
    step: int
    rank: int
    worker: int


@dataclass
class OrderDiff:
    """What differs between two runs' sample order."""

    first_divergent: Place | None = None
    steps_compared: int = 0
    duplicated: int = 0
    skipped: int = 0
    reordered: int = 0
    duplicated_at: list[Place] = field(default_factory=list)
    skipped_at: list[Place] = field(default_factory=list)
    by_worker: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        """True when both runs saw the same samples in the same order."""
        return self.first_divergent is None


def diff_orders(a: list[StepOrder], b: list[StepOrder]) -> OrderDiff:
    """Compare run A (the reference) with run B."""
    out = OrderDiff()
    ga, gb = _group(a), _group(b)
    for key in sorted(ga.keys() | gb.keys()):
        sa, sb = ga.get(key, []), gb.get(key, [])
        _compare(key, sa, sb, out)
    return out


def _group(steps: list[StepOrder]) -> dict[tuple[int, int], list[StepOrder]]:
    groups: dict[tuple[int, int], list[StepOrder]] = defaultdict(list)
    for s in steps:
        groups[(s.rank, s.epoch)].append(s)
    for v in groups.values():
        v.sort(key=lambda s: s.step)
    return groups


def _compare(key: tuple[int, int], sa: list[StepOrder], sb: list[StepOrder],
             out: OrderDiff) -> None:
    rank, epoch = key
    if not sa or not sb:
        only = (sa or sb)[0]
        _first(out, Place(None, epoch, only.step, rank, only.worker))
        return
    last = min(sa[-1].step, sb[-1].step)
    wa = [s for s in sa if s.step <= last]
    wb = [s for s in sb if s.step <= last]
    out.steps_compared += len(wb)
    a_at = {s.step: s for s in wa}
    for s in wb:
        other = a_at.get(s.step)
        if other is None or other.ids != s.ids:
            _first(out, Place(None, epoch, s.step, rank, s.worker))
            break
    else:
        if len(wa) != len(wb):
            missing = min(set(a_at) - {s.step for s in wb})
            _first(out, Place(None, epoch, missing, rank, a_at[missing].worker))
    full_a = Counter(i for s in sa for i in s.ids)
    full_b = Counter(i for s in sb for i in s.ids)
    seen_b: Counter = Counter()
    for s in wb:
        for i in s.ids:
            seen_b[i] += 1
            if seen_b[i] > max(full_a[i], 1):
                _count(out, "duplicated", Place(i, epoch, s.step, rank, s.worker))
    for s in wa:
        for i in s.ids:
            if not full_b[i]:
                _count(out, "skipped", Place(i, epoch, s.step, rank, s.worker))
    out.reordered += _out_of_order([i for s in wa for i in s.ids], [i for s in wb for i in s.ids])


def _first(out: OrderDiff, place: Place) -> None:
    current = out.first_divergent
    if current is None or (place.epoch, place.step, place.rank) < (
            current.epoch, current.step, current.rank):
        out.first_divergent = place


def _count(out: OrderDiff, what: str, place: Place) -> None:
    setattr(out, what, getattr(out, what) + 1)
    examples = out.duplicated_at if what == "duplicated" else out.skipped_at
    if len(examples) < EXAMPLES:
        examples.append(place)
    worker = out.by_worker.setdefault(f"rank {place.rank} worker {place.worker}", {})
    worker[what] = worker.get(what, 0) + 1


def _out_of_order(a_ids: list, b_ids: list) -> int:
    """Ids both lists hold (first occurrences) that B does not keep in A's relative order."""
    rank_in_a: dict = {}
    for i in a_ids:
        rank_in_a.setdefault(i, len(rank_in_a))
    seq, seen = [], set()
    for i in b_ids:
        if i in rank_in_a and i not in seen:
            seen.add(i)
            seq.append(rank_in_a[i])
    tails: list[int] = []  # longest increasing subsequence, patience sorting
    for x in seq:
        pos = bisect.bisect_left(tails, x)
        if pos == len(tails):
            tails.append(x)
        else:
            tails[pos] = x
    return len(seq) - len(tails)
