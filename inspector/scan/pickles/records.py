"""What a walk records: the imports, calls, storage references and problems of one pickle
stream (`PickleScan`), and the bounds that keep a walk finite (`Limits`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class Limits:
    """Bounds that keep a hostile stream from hanging or exhausting the scanner."""

    max_opcodes: int = 50_000_000
    max_memo: int = 10_000_000
    max_depth: int = 100_000
    max_stack: int = 10_000_000


@dataclass(slots=True)
class GlobalRef:
    """One import: `module.name` as the unpickler would resolve it (treat as read-only)."""

    module: str
    name: str
    opcode: str
    offset: int
    key: str = field(default="", compare=False)  # dotted `module.name`, as torch's list spells it

    def __post_init__(self) -> None:
        self.key = f"{self.module}.{self.name}"


class Held(NamedTuple):
    """What a pickle's state put into one attribute of an instance (`name`; "" for a key
    computed while loading, which may be any name): an import (`ref`, its dotted name), an
    instance (`cls`: its class's module and name; `attrs`: what it holds in turn), or, with
    neither, a value made while loading whose class cannot be known. A tuple: every method
    the load runs is looked up by it, and tuples hash and compare in C."""

    name: str
    ref: str = ""
    cls: tuple[str, str] | None = None
    attrs: tuple[Held, ...] = ()


@dataclass(slots=True)
class Call:
    """A call the unpickler would make: callable (None when not a plain import) and its text."""

    func: GlobalRef | None
    opcode: str
    offset: int
    strings: list[str]
    args: str = ""  # the arguments as pseudo-Python, e.g. `"curl x | sh", 1`
    # made by an allowed callable with its argument (`calls.CALLS_ARGUMENTS`): what it does,
    # e.g. "torch._tensor._rebuild_from_type_v2 calls its argument func"; `args` are its own
    via: str = ""
    # what the pickle's BUILD states put into the instance's attributes (imports, instances):
    # its method's `self.<attribute>.m()` runs that class's `m`, `self.<attribute>(...)` calls
    # what is stored there
    attrs: tuple[Held, ...] = ()
    # the methods the load runs on an instance of `func` where the opcode's own do not say
    # (`opcodes.HASHED`, `opcodes.HANDED`), and how it meets the instance (`role`)
    runs: tuple[str, ...] = ()
    role: str = ""


class StorageRef(NamedTuple):
    """A persistent id `('storage', storage_type, key, location, numel)`."""

    storage_type: str
    key: str
    location: str
    numel: int
    offset: int


@dataclass(slots=True)
class Issue:
    """A structural problem: `code` names it, `blocks_weights_only` if torch would refuse."""

    code: str
    message: str
    offset: int
    dangerous: bool = False


@dataclass
class PickleScan:
    """Everything one pickle stream imports, calls and references."""

    start: int
    end: int = 0
    protocol: int = 0
    stopped: bool = False
    globals: list[GlobalRef] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    storages: list[StorageRef] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    wo_blockers: list[str] = field(default_factory=list)
    error: str | None = None
    opcodes: int = 0
    count: int = 1  # pickles walked: more than one only with `through`
    # a FRAME ended inside an opcode or past STOP: a reader without peek() reads otherwise
    frame_misaligned: bool = False
    # with `unbuffered`: where such a reader's next pickle starts (the end of what it read)
    next_start: int = 0
    # (start, end) of bytes joblib reads as a NumPy array's data (`joblib_arrays`), stepped over
    raw_spans: list[tuple[int, int]] = field(default_factory=list)
