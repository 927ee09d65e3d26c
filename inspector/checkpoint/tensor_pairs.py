"""Which tensor of one checkpoint is compared with which of another, across shards.

Keys are matched by name wherever each side put them. A key one side does not store may be a
tied weight that side keeps once under another name (transformers saves `lm_head.weight` in
the embedding's storage in a `.bin`, and drops it from safetensors): when the side that has
the key stores it in the same bytes as another key (same shard, same storage, dtype and
shape), and the other side stores that twin, the key is compared with the twin there and the
pair says so (`stored_as`). The pairs come ordered by shard on each side, so a comparison
that keeps one shard per side open opens each as rarely as possible. The plain values (not
tensors) of both sides are paired by key too (`object_changes`): the jailed worker and the
host's check of its answer make the diff's `objects` with this one function.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from inspector.core.vocabulary import TensorStatus

A, B = "a", "b"


@dataclass(frozen=True)
class Stored:
    """One key as one side stores it: its shard's number, dtype, shape and storage."""

    key: str
    shard: int
    dtype: str
    shape: tuple[int, ...]
    storage: Hashable | None = None
    """Equal values within one shard: the same bytes (shared storage); None: unknown."""
    alias_of: str | None = None
    """The key whose bytes the file itself says this name reads (a converter's alias); such
    an alias has that key's `storage`."""

    def twin_key(self) -> tuple:
        """What two keys of one side have in common when they are one tensor."""
        return (self.shard, self.storage, self.dtype, self.shape)


@dataclass
class Pair:
    """A key, where each side stores it (None: not at all), and which side reads a twin."""

    key: str
    a: Stored | None
    b: Stored | None
    tied: str | None = None
    """`a` or `b`: that side does not store `key`; its twin (`a.key`/`b.key`) was used."""


def pair_keys(a: Iterable[Stored], b: Iterable[Stored]) -> list[Pair]:
    """Every key of either side paired with its counterpart, in shard order of A, then B."""
    in_a, in_b = _by_key(a), _by_key(b)
    pairs = [Pair(k, s, in_b.get(k)) for k, s in in_a.items()]
    pairs += [Pair(k, None, s) for k, s in in_b.items() if k not in in_a]
    twins_a, twins_b = _twins(in_a.values()), _twins(in_b.values())
    for pair in pairs:
        if pair.b is None:
            pair.b = _counterpart(pair.a, twins_a, in_b)
            pair.tied = B if pair.b is not None else None
        elif pair.a is None:
            pair.a = _counterpart(pair.b, twins_b, in_a)
            pair.tied = A if pair.a is not None else None
    # stable: within a pair of shards, keys keep the order the files list them in
    return sorted(pairs, key=lambda p: (
        p.a is None, p.a.shard if p.a else 0, p.b.shard if p.b else -1))


def _by_key(stored: Iterable[Stored]) -> dict[str, Stored]:
    out: dict[str, Stored] = {}
    for s in stored:
        if s.key in out:
            raise ValueError(f"{s.key}: stored in shards {out[s.key].shard} and {s.shard}")
        out[s.key] = s
    return out


def _twins(stored: Iterable[Stored]) -> dict[str, list[str]]:
    """Each key of one side with every key it shares its bytes with (itself included)."""
    groups: dict[tuple, list[str]] = {}
    out: dict[str, list[str]] = {}
    for s in stored:
        # a zero-size tensor holds no bytes, so it shares none: two of them in a safetensors
        # file have one data offset and stride, yet neither is the other's tied weight
        if s.storage is not None and math.prod(s.shape) > 0:
            out[s.key] = groups.setdefault(s.twin_key(), [])
            out[s.key].append(s.key)
    return out


def _counterpart(
    own: Stored, twins: dict[str, list[str]], theirs: dict[str, Stored]
) -> Stored | None:
    """The other side's copy of a key this side keeps in the same bytes as `own`, if any."""
    for key in twins.get(own.key, ()):
        found = theirs.get(key) if key != own.key else None
        if found is not None and (found.dtype, found.shape) == (own.dtype, own.shape):
            return found
    return None


def object_changes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Non-tensor leaves (`key`, `type`, `repr` records) that differ (by type and bounded repr)
    or exist on one side only: the diff contract's `objects`."""
    in_b = {o["key"]: o for o in b}
    changes = []
    for obj in a:
        other = in_b.pop(obj["key"], None)
        if other is None:
            changes.append({"key": obj["key"], "status": TensorStatus.ONLY_IN_A,
                            "a": obj["repr"], "b": None})
        elif (obj["type"], obj["repr"]) != (other["type"], other["repr"]):
            changes.append({"key": obj["key"], "status": TensorStatus.CHANGED,
                            "a": obj["repr"], "b": other["repr"]})
    changes += [{"key": k, "status": TensorStatus.ONLY_IN_B, "a": None, "b": o["repr"]}
                for k, o in in_b.items()]
    return changes
