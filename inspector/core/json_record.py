"""JsonRecord: a dataclass read from and written back to one JSON object without losing a key.

The typed results (`checkpoint.results`), the health verdict (`checkpoint.health`) and the
verify result (`integrity.verify`) are JsonRecords: `to_json(from_json(d)) == d`, a key this
version does not know is kept in `extra` and written back, and a known key the JSON did not
carry stays absent.
Field metadata says how a field is read and written (`NUMBER`, `word`, `typed`, `typed_list`).
Its own module so that `checkpoint.health` (which `checkpoint.results` imports through
`checkpoint.architecture`) can be one. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from enum import StrEnum
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
