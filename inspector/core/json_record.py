"""JsonRecord: a dataclass read from and written back to one JSON object without losing a key.

The typed results (`checkpoint.results`), the health verdict (`checkpoint.health`) and the
verify result (`integrity.verify`) are JsonRecords: `to_json(from_json(d)) == d`, a key this
version does not know is kept in `extra` and written back, and a known key the JSON did not
carry stays absent.
Field metadata says how a field is read and written (`NUMBER`, `word`, `typed`, `typed_list`).
Its own module so that `checkpoint.health` (which `checkpoint.results` imports through
`checkpoint.architecture`) can be one. Torch-free.

`shape_problems(cls, data)` says where a JSON object departs from a record's annotations (every
field the record declares holds the type it names, every field without a default present): what
another process sends (the jailed worker's replies) is held to it before any of it is read, since
`from_json` keeps values as they come and the checks and views after it take the annotations at
their word.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from functools import cache
from typing import Any, ClassVar, TypeVar

from inspector.core.strict_json import NON_FINITE, strict_float

R = TypeVar("R", bound="JsonRecord")


def _number(value: Any) -> Any:
    """A strict-JSON number back as a float ("nan" -> nan); anything else as it is."""
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


def _each(load: Callable[[Any], Any]) -> Callable[[list], list]:
    return lambda items: [load(i) for i in items]


def _json(value: Any) -> Any:
    return value.to_json()


def records(items: Iterable[JsonRecord]) -> list[dict[str, Any]]:
    """The contract's records of typed items."""
    return [i.to_json() for i in items]


NUMBER = {"load": _number, "dump": strict_float}
"""Field metadata of a number that may be non-finite."""
TRANSIENT = {"transient": True}
"""Field metadata of what a record holds in memory and never writes (nor reads)."""
OMIT_NONE = {"omit_none": True}
"""Field metadata of an optional part the JSON leaves out while it is None."""


def word(vocabulary: type[StrEnum]) -> dict[str, Callable]:
    """Field metadata of a word of a `core.vocabulary` enum; a word a newer version added
    stays a plain str, so its result is still readable."""
    known = {member.value: member for member in vocabulary}
    return {"load": lambda value: known.get(value, value)}


def typed(cls: type) -> dict[str, Callable]:
    """Field metadata of a nested record (`from_json`/`to_json`)."""
    return {"load": cls.from_json, "dump": _json}


def typed_list(cls: type) -> dict[str, Callable]:
    """Field metadata of a list of nested records."""
    return {"load": _each(cls.from_json), "dump": records}


@dataclass
class JsonRecord:
    """A dataclass read from and written back to one JSON object without losing a key."""

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    """Keys this version does not know, written back as they came."""
    absent: frozenset[str] = field(default=frozenset(), kw_only=True, repr=False)
    """Known keys the JSON did not have; `to_json` leaves them out again."""

    _OWN: ClassVar[frozenset[str]] = frozenset({"extra", "absent"})

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        """The record of a JSON object; unknown keys go to `extra`."""
        spec = _spec(cls)
        values = {}
        for name, load, _dump in spec:
            if name in data:
                value = data[name]
                values[name] = load(value) if load is not None and value is not None else value
        if len(values) == len(data):  # the usual case: every key known, none absent
            return cls(**values) if len(values) == len(spec) else cls(
                **values, absent=frozenset(n for n, _l, _d in spec if n not in values))
        return cls(**values, extra={k: v for k, v in data.items() if k not in values},
                   absent=frozenset(n for n, _l, _d in spec if n not in data))

    def to_json(self) -> dict[str, Any]:
        """The JSON object this record was read from (strict: no NaN tokens)."""
        out: dict[str, Any] = {}
        absent = self.absent
        omit = _omit_none(type(self))
        for name, _load, dump in _spec(type(self)):
            if name in absent:
                continue
            value = getattr(self, name)
            if value is None and name in omit:
                continue
            out[name] = dump(value) if dump is not None and value is not None else value
        out.update(self.extra)
        return out


@cache
def _spec(cls: type) -> tuple[tuple[str, Callable | None, Callable | None], ...]:
    """(name, load, dump) of each JSON field of a record class, in declaration order."""
    return tuple((f.name, f.metadata.get("load"), f.metadata.get("dump"))
                 for f in fields(cls)
                 if f.name not in JsonRecord._OWN and not f.metadata.get("transient"))


@cache
def _omit_none(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.metadata.get("omit_none"))


def as_result(cls: type[R], value: R | dict[str, Any] | None) -> R | None:
    """`value` as `cls`: a contract's dict is read once; a typed result or None is kept."""
    if value is None or isinstance(value, cls):
        return value
    return cls.from_json(value)


# --- shape: whether a JSON object is shaped as a record (what another process sends) ---

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
        out.append((f.name, hints[f.name], f.metadata.get("load") is _number, required))
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
