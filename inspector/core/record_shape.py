"""Whether a JSON object has the shape of a typed record: every field the record declares holds
the type its annotation names (a word, a whole number, a number, a list of records...), and
every field without a default is present.

What another process sends (the jailed worker's replies) is held to this before any of it is
read, so a value of another type is a refused answer, never a traceback or a view that prints
whatever came: `JsonRecord.from_json` keeps values as they are, and the checks and views after
it take the annotations at their word. Torch-free; reads the annotations, never the values'
own code.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from functools import cache
from typing import Any

from inspector.core.json_record import NUMBER, JsonRecord
from inspector.core.strict_json import NON_FINITE

_SHOWN = 3
"""Problems named per list before the rest are counted as one."""


def shape_problems(cls: type[JsonRecord], data: Any, where: str = "") -> list[str]:
    """Where `data` departs from the shape of `cls` (empty when it conforms)."""
    if not isinstance(data, dict):
        return [f"{where or 'the reply'} is {_kind(data)}, not an object"]
    problems = []
    prefix = f"{where}." if where else ""
    for name, hint, number, required in _fields(cls):
        if name not in data:
            problems += [f"{prefix}{name} is missing"] if required else []
            continue
        problems += _problems(hint, data[name], f"{prefix}{name}", number)
    return problems


@cache
def _fields(cls: type[JsonRecord]) -> tuple[tuple[str, Any, bool, bool], ...]:
    """(name, annotation, a number that may be non-finite, required) of each JSON field."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in JsonRecord._OWN or f.metadata.get("transient"):
            continue
        required = f.default is dataclasses.MISSING and \
            f.default_factory is dataclasses.MISSING
        out.append((f.name, hints[f.name], f.metadata.get("load") is NUMBER["load"], required))
    return tuple(out)


def _problems(hint: Any, value: Any, where: str, number: bool = False) -> list[str]:
    """Where one value departs from its annotation (an annotation not modelled here, such as
    `Any`, admits everything)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        found = [_problems(a, value, where, number) for a in args if a is not type(None)]
        return [] if any(not f for f in found) else found[0]
    if origin is list or origin is tuple:
        if not isinstance(value, list):
            return [f"{where} is {_kind(value)}, not a list"]
        inner = args[0] if args else Any
        return _first([p for i, v in enumerate(value)
                       for p in _problems(inner, v, f"{where}[{i}]")])
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where} is {_kind(value)}, not an object"]
        inner = args[1] if len(args) == 2 else Any
        return _first([p for k, v in value.items() for p in _problems(inner, v, f"{where}.{k}")])
    return _leaf_problems(hint, value, where, number)


def _leaf_problems(hint: Any, value: Any, where: str, number: bool) -> list[str]:
    if not isinstance(hint, type):
        return []
    if issubclass(hint, JsonRecord):
        return shape_problems(hint, value, where)
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or \
            (number and isinstance(value, str) and value in NON_FINITE)
    elif hint is str or issubclass(hint, Enum):
        ok = isinstance(value, str)
    elif hint is list or hint is dict:
        ok = isinstance(value, hint)
    else:
        return []
    return [] if ok else [f"{where} is {_kind(value)}, not {_NAMES.get(hint, 'a word')}"]


_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
          list: "a list", dict: "an object"}


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false",
            int: "a whole number", float: "a number", type(None): "null"}.get(
        type(value), type(value).__name__)


def _first(problems: list[str]) -> list[str]:
    more = len(problems) - _SHOWN
    return problems[:_SHOWN] + ([f"and {more} more"] if more > 0 else [])
