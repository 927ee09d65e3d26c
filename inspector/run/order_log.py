"""The data-order ledger's file: one JSON line per step per rank, cheap enough for every step.

`RUN_DIR/order/rank-NNNNN.jsonl`, one file per rank, appended by one process at a time, in
blocks (`blocklog`: a crash can cost the last block, never the journal). The journal holds one
`order.ledger` record per session naming the file. Lines:

- `{"kind": "session", "session": S, "rank": R, "time": T}` opens each process's part;
- `{"e": EPOCH, "s": STEP, "r": RANK, "w": WORKER, "ids": [...], "h": HASH, "t": S, "v": 2}`,
  one per step: the batch's sample ids, the worker that loaded it (-1: the main process) and a
  rolling BLAKE2b of the session so far: of every line's place (epoch, step, rank, worker) and
  ids;
- `{"kind": "seeds", "e": EPOCH, "w": WORKER, "seeds": {...}, "t": S}`, once per worker.

A step recorded by two sessions (a run resumed from a checkpoint before its last steps) counts
as the later session's: the model that trained on, trained on that order. No torch here: the CLI
reads these files.

`read_ledger` is the one reader, and it trusts no line's `h`: it recomputes each session's chain
(`rolling_hash` of the session's step line before it, in file order, and the line's own place
and ids). A session whose chain breaks anywhere (ids or a step, epoch, rank or worker number
rewritten, a line dropped, moved or forged between two others) is not what its guard wrote:
none of its lines is a step, and each break is a `ChainBreak`, named among the problems. The
place is what orders a run's steps, so it is hashed as the ids are (a line of version 2, `v`;
hashed in a domain of its own, so no version-1 line, whose hash covers the ids alone, reads as
one); a line of version 2 whose numbers are not integers is no step line. Lines written before
version 2 (no `v`) are still read, but their numbers are their word alone. A crash costs a
session only its last lines, which breaks nothing. The chain has no key and no anchor outside
the file: a session rewritten from some line to its end, every hash recomputed, reads as sound;
only an edit that leaves a later line of its session standing shows.
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.run.blocklog import BlockWriter, read_lines

ORDER_DIR = "order"
LEDGER_KIND = "order.ledger"
GENESIS = "0" * 32
VERSION = 2
"""The version of the step lines written now: their hash covers their place (module doc)."""
_PLACED = b"ckpt-order-v2"
"""BLAKE2b's personalisation of a version-2 hash: no version-1 hash input (prev and ids, which
a forger may pick) gives the same digest as a placed line's."""


@dataclass(frozen=True)
class StepOrder:
    """The samples one rank got at one step, and which worker loaded them."""

    epoch: int
    step: int
    rank: int
    worker: int
    ids: tuple
    hash: str
    session: str


@dataclass(frozen=True)
class ChainBreak:
    """A step line whose `h` is not the rolling hash of its session's line before it and its
    own ids: the session is not what its guard wrote."""

    session: str
    epoch: int
    step: int
    rank: int

    def text(self, path: str | os.PathLike[str]) -> str:
        """The problem's line: where the chain breaks and what is left out for it."""
        return (f"{path}: session {self.session}'s line for epoch {self.epoch} step {self.step} "
                f"rank {self.rank} is not the rolling hash of the line before it and its ids "
                "(a line rewritten, dropped or added): none of that session's lines is used")


@dataclass
class LedgerRead:
    """One ledger file as a run finally saw it: steps in order (sound sessions' only), every
    sound step line in file order (`lines`, the steps a later session replaced included), seeds,
    unreadable lines and chain breaks (each named among the problems too)."""

    path: Path
    steps: list[StepOrder] = field(default_factory=list)
    lines: list[StepOrder] = field(default_factory=list)
    seeds: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    breaks: list[ChainBreak] = field(default_factory=list)


def ledger_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """Where one rank's ledger lives in a run folder."""
    return Path(run_dir) / ORDER_DIR / f"rank-{rank:05d}.jsonl"


def rolling_hash(prev: str, ids: Sequence, place: Sequence[int] | None = None) -> str:
    """The next link: BLAKE2b-128 of the previous hash, this step's place (epoch, step, rank,
    worker; None on a version-1 line, whose hash covers no number) and its ids."""
    if place is None:
        digest = hashlib.blake2b(prev.encode("ascii"), digest_size=16)
    else:
        digest = hashlib.blake2b(prev.encode("ascii"), digest_size=16, person=_PLACED)
        digest.update(array("q", [int(n) for n in place]).tobytes())
    if all(type(i) is int for i in ids):
        digest.update(array("q", ids).tobytes())
    else:
        digest.update(json.dumps(list(ids), default=str).encode())
    return digest.hexdigest()


class LedgerWriter:
    """Appends one session's lines to one ledger file, in blocks (`blocklog`)."""

    def __init__(self, path: Path, session: str, rank: int, time_s: float,
                 flush_every: int = 64) -> None:
        self.path = path
        self.session = session
        self._out = BlockWriter(path, flush_every)
        self._out.write({"kind": "session", "session": session, "rank": rank, "time": time_s})

    def step(self, record: StepOrder) -> None:
        """Write one step's line (flushed with its block)."""
        epoch, step, rank, worker = place_of(record)
        self._out.write({"e": epoch, "s": step, "r": rank, "w": worker, "ids": list(record.ids),
                         "h": record.hash, "t": record.session, "v": VERSION})

    def seeds(self, epoch: int, worker: int, seeds: dict) -> None:
        """Write one worker's seeds."""
        self._out.write({"kind": "seeds", "e": epoch, "w": worker, "seeds": seeds,
                         "t": self.session})

    def close(self) -> None:
        """Flush, fsync and close."""
        self._out.close()


def place_of(record: StepOrder) -> tuple[int, int, int, int]:
    """A step's place as its line and its hash hold it: epoch, step, rank, worker, as ints."""
    return int(record.epoch), int(record.step), int(record.rank), int(record.worker)


def read_ledger(path: str | os.PathLike[str]) -> LedgerRead:
    """Read one ledger file, each session's chain recomputed (module doc); a later session's
    record of a step replaces an earlier one's."""
    records, problems = read_lines(path)
    out = LedgerRead(Path(path), problems=problems)
    chains: dict[str, str] = {}
    parsed: list[StepOrder] = []
    for obj in records:
        if obj.get("kind") == "seeds":
            out.seeds.append(obj)
        elif obj.get("kind") != "session":
            rec = _step_line(obj)
            if rec is None:
                out.problems.append(f"{path}: a step line lacks a field or holds an id that "
                                    f"is no sample id: {obj!r:.80}")
                continue
            place = place_of(rec) if obj.get("v") == VERSION else None
            if not _links(chains, rec.session, obj["ids"], rec.hash, place):
                out.breaks.append(ChainBreak(rec.session, rec.epoch, rec.step, rec.rank))
            parsed.append(rec)
    broken = {b.session for b in out.breaks}
    out.problems += [b.text(path) for b in out.breaks]
    out.lines = [rec for rec in parsed if rec.session not in broken]
    by_step = {(rec.rank, rec.epoch, rec.step): rec for rec in out.lines}
    out.steps = [by_step[k] for k in sorted(by_step)]
    return out


def _step_line(obj: dict) -> StepOrder | None:
    """A step line's record, or None where a field is missing or of a type the writer never
    writes (the hash and the session are strings, the ids a list, a version-2 line's numbers
    integers: its hash covers them as such, and `int` would make 1.9 or "1" a step)."""
    h, session, ids = obj.get("h"), obj.get("t"), obj.get("ids")
    if not (isinstance(h, str) and isinstance(session, str) and isinstance(ids, list)):
        return None
    if "v" in obj and not (obj["v"] == VERSION and type(obj["v"]) is int
                           and all(type(obj.get(k)) is int for k in "esrw")):
        return None
    try:
        return StepOrder(int(obj["e"]), int(obj["s"]), int(obj["r"]), int(obj["w"]),
                         tuple(_sample_id(i) for i in ids), h, session)
    except (KeyError, TypeError, ValueError):
        return None


def _links(chains: dict[str, str], session: str, ids: list, written: str,
           place: tuple[int, int, int, int] | None) -> bool:
    """Whether `written` is the rolling hash of the session's line before (its written `h`,
    so a break is named where it is), the line's place (version 2) and these ids, as read from
    the file; the session's chain moves on to `written` either way."""
    prev = chains.get(session, GENESIS)
    chains[session] = written
    try:
        return rolling_hash(prev, ids, place) == written
    except (OverflowError, ValueError, TypeError):  # an id no writer could have hashed
        return False


def _sample_id(value: object) -> object:
    """A sample id as the tracked loader writes one (a number or a string, or a list of them
    for a composite key, made a tuple so it can be counted); TypeError for anything else."""
    if isinstance(value, (int, float, str)) or value is None:
        return value
    if isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value):
        return tuple(value)
    raise TypeError("not a sample id")


def find_ledgers(path: str | os.PathLike[str]) -> list[Path]:
    """The ledger files a path names: itself, a run folder's `order/*.jsonl`, or a folder's."""
    p = Path(path)
    if p.is_file():
        return [p]
    for folder in (p / ORDER_DIR, p):
        found = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
        found = [f for f in found if f.name != "journal.jsonl"]
        if found:
            return found
    return []
