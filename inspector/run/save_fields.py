"""A `ledger.save` line's fields, each read as the ledger writes it or refused.

`run.checkpoints.SaveRecord.from_entry` reads every field through these, so a line of any
shape (a forged or unsealed one, or one of an unauthenticated journal, which anyone can
append) is a bad record at once, never a value that raises later, deep in a check, a digest
or a print. Every refusal is a TypeError or ValueError that names the field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from inspector.core.vocabulary import SaveOutcome
from inspector.integrity.manifest import FileEntry, file_entry


def typed(rec: Mapping[str, Any], key: str, kinds: type | tuple[type, ...],
          required: bool = False) -> Any:
    """A record's field when it has the type a save writes (None when absent or null and not
    `required`); else TypeError (KeyError when a required one is absent). A bool is taken
    only where `kinds` names bool: JSON's true is no number."""
    if key not in rec and required:
        raise KeyError(key)
    value = rec.get(key)
    if value is None and not required:
        return None
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        raise TypeError(f"its {key} is {type(value).__name__} {value!r:.40}, not what a save "
                        "writes")
    return value


def file_name(name: str, what: str) -> str:
    """`name` when a file name can hold it: no NUL byte, and no lone surrogate that does not
    stand for a byte (JSON's `\\ud800`), which no system call takes; else ValueError."""
    if "\0" in name:
        raise ValueError(f"{what} holds a NUL byte, which no file name can")
    try:
        os.fsencode(name)
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} holds {name[exc.start]!r}, which no file name can") from exc
    return name


def count(rec: Mapping[str, Any], key: str) -> int:
    """A required whole number of at least zero (a size)."""
    value = typed(rec, key, int, required=True)
    if value < 0:
        raise ValueError(f"its {key} is {value}, below zero")
    return int(value)


def finite(rec: Mapping[str, Any], key: str) -> float | int | None:
    """A number that is finite, or None: a save writes no NaN or infinity (JSON readers
    take the `NaN` and `Infinity` tokens and a number too large for a float as one)."""
    value = typed(rec, key, (int, float))
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"its {key} is {value}, not a finite number")
    return value


def texts(rec: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A list of strings (none when absent or null)."""
    value = typed(rec, key, list) or []
    if not all(isinstance(item, str) for item in value):
        raise TypeError(f"its {key} is not a list of strings")
    return tuple(value)


def outcome(rec: Mapping[str, Any]) -> SaveOutcome:
    """The save's outcome; a word this version does not know reads as not proven."""
    word = typed(rec, "outcome", str)
    try:
        return SaveOutcome(word)
    except ValueError:
        return SaveOutcome.UNVERIFIED


def saved_files(rec: Mapping[str, Any], where: str) -> tuple[FileEntry, ...]:
    """The `files` a save lists, each a JSON manifest record with its size and SHA-256 (a
    save measures both for every file it writes; a check without them would pass on sizes
    alone, and a folder's SHA-256 is made of them) and text where text is written."""
    raw = typed(rec, "files", list) or []
    files = tuple(file_entry(f, f"{where}: files[{i}]") for i, f in enumerate(raw))
    for i, entry in enumerate(files):
        if entry.sha256 is None or entry.size is None:
            raise ValueError(f"files[{i}] ({entry.path}) has no SHA-256 or no size; a save "
                             "records both")
        _text_or_none(f"files[{i}].format", entry.format)
        for tensor in entry.tensors or ():
            for name in ("dtype", "digest", "digest_algorithm"):
                _text_or_none(f"files[{i}] tensor {tensor.key!r:.40} {name}",
                              getattr(tensor, name))
    return files


def _text_or_none(what: str, value: object) -> None:
    """TypeError unless `value` is a string or None."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"its {what} is {type(value).__name__} {value!r:.40}, not text")
