"""The records of the loaders' readings: what the scan asks the jailed dry run to read (`Blob`,
`ArchiveAsk`) and what one reading reports (the `dry-run` operation's `readings` records), read
once from its JSON into typed records: the imports and calls a real unpickler resolved, the
pickles found inside values, the text that reads like code."""

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


@dataclass
class Blob:
    """Bytes a loader may read as pickles: from a file in place (`path`) or held (`data`)."""

    member: str | None
    starts: set[int]
    # the starts a loader begins reading at; from the others (the next of back-to-back pickles,
    # a carved one) a loader reads only when its reading from an entry gets there
    entries: set[int] = field(default_factory=set)
    walker: set[tuple[str, str]] = field(default_factory=set)  # imports the walk saw here
    data: bytes | None = None
    path: str | None = None
    size: int = 0
    persistent: bool = True  # the loader has a persistent_load (torch); plain pickle has not
    # reader kinds: C with peek (open()), C without (io.BytesIO), pure Python (joblib, which
    # reads whole files: a tar member unpacked is one, a zip member is read in place)
    kinds: tuple[str, ...] = ("c", "c-nopeek", "py")
    py_opcodes: int = 0  # the pure-Python reading's opcode budget (`py_budget`)
    # whether a loader reads these bytes as pickles: False for a member the scan reads from
    # an archive no loader opens that way (`ScanContext.unreached`), read out of caution only
    reached: bool = True
    # an archive (from `offset` of the file at `path`, or held): the dry run reads the pickles
    # torch's own zip reader hands out of it (`sandbox.worker.zip_records`)
    zip: bool = False
    offset: int = 0


@dataclass
class ArchiveAsk:
    """A damaged archive whose pickles torch's own zip reader is to hand out: its span in the
    file (None: the whole file), and the imports the scan's own reading of them saw."""

    span: tuple[int, int] | None
    walker: set[tuple[str, str]]
