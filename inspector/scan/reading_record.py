"""What one reading of the jailed dry run reports (the `dry-run` operation's `readings`
records), read once from its JSON into typed records: the imports and calls a real unpickler
resolved, the pickles found inside values, the text that reads like code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inspector.core.json_record import JsonRecord, typed_list


@dataclass
class NestedPickle(JsonRecord):
    """A pickle held in a loaded value (raw, hex or base64), read the same way."""

    key: str = ""
    encoding: str = ""
    stage: int = 1
    imports: list[list[Any]] = field(default_factory=list)
    """[module, name, count] of each import it resolved."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """{target, op, count, texts, code} of each call it made."""
    error: str | None = None


@dataclass
class StreamReading(JsonRecord):
    """One reader's reading of one blob from one start: what it resolved and where it ended."""

    index: int = 0
    kind: str = ""
    start: int = 0
    pickles: int = 0
    end: int | None = None
    error: str | None = None
    cut: bool = False
    apart: bool = False
    """A reading no loader makes: its imports are kept apart from the file's."""
    member: str | None = None
    imports: list[list[Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    nested: list[NestedPickle] = field(default_factory=list, metadata=typed_list(NestedPickle))
    code_values: list[dict[str, Any]] = field(default_factory=list)
