"""Dotted keys for the leaves of nested containers; no torch import, so core code can share it.

The sandbox's torch-based loader and the torch-free tensor layout (`layout.torch_save`) must
name every tensor identically, so both flatten through these functions.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

MAX_DEPTH = 64

RUNNING_VARIANCE = "running_var"
"""The leaf a normalisation layer (BatchNorm, InstanceNorm) keeps its running variance under."""


def is_running_variance(key: str) -> bool:
    """Whether the dotted `key` names a running variance: never negative, being a running mean
    of variances; one below -eps turns that channel's every eval output into NaN."""
    return key.rsplit(".", 1)[-1] == RUNNING_VARIANCE


def flatten(obj: object) -> Iterator[tuple[str, object]]:
    """Yield (dotted key, leaf) for nested dicts, lists, tuples and argparse.Namespace."""
    yield from _flatten(obj, "", 0, set())


def _flatten(obj: object, prefix: str, depth: int, seen: set[int]) -> Iterator[tuple[str, object]]:
    children = _children(obj)
    if children is None or not children or depth >= MAX_DEPTH or id(obj) in seen:
        yield (prefix or "<root>"), obj
        return
    seen.add(id(obj))
    for name, child in children:
        yield from _flatten(child, f"{prefix}.{name}" if prefix else str(name), depth + 1, seen)
    seen.discard(id(obj))


def _children(obj: object) -> list[tuple[object, object]] | None:
    if isinstance(obj, dict):
        return list(obj.items())
    if type(obj) in (list, tuple):
        return list(enumerate(obj))
    if isinstance(obj, argparse.Namespace):
        return list(vars(obj).items())
    return None


def colliding_keys(obj: object) -> list[str]:
    """The dotted keys two leaves share once flattened (a literal "a.b" and {"a": {"b": ...}}),
    which `unique_keys` tells apart by renaming the later one."""
    counts = Counter(key for key, _ in flatten(obj))
    return sorted(key for key, n in counts.items() if n > 1)


def unique_keys(items: Iterator[tuple[str, object]]) -> list[tuple[str, object]]:
    """Disambiguate keys that collide after flattening (e.g. "a.b" and {"a": {"b": ...}})."""
    out, used = [], set()
    for key, value in items:
        unique, n = key, 1
        while unique in used:
            n += 1
            unique = f"{key}#{n}"
        used.add(unique)
        out.append((unique, value))
    return out


def is_optimizer_state(obj: dict) -> bool:
    """Whether `obj` is shaped as an optimizer's `state_dict()`."""
    return isinstance(obj.get("state"), dict) and isinstance(obj.get("param_groups"), list)


def dicts_in(obj: Any, test: Callable[[dict], bool], where: str = "", depth: int = 0,
             limit: int = 4) -> Iterator[tuple[str, dict]]:
    """Every dict in `obj` that `test` accepts (in dicts, lists and tuples, `limit` levels
    deep, not inside an accepted one), with where it is (`optimizer_states.0.`)."""
    if isinstance(obj, dict):
        if test(obj):
            yield where, obj
            return
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return
    if depth < limit:
        for key, value in items:
            yield from dicts_in(value, test, f"{where}{key}.", depth + 1, limit)
