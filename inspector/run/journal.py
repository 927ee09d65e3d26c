"""The run journal: append-only JSON lines, each carrying the hash of the line before it.

One run folder tells the whole story of a training run in one journal: the checkpoint ledger's
save records, the training guard's alarms, the audit record. Each line is one JSON object with
`seq` (0, 1, 2, ...), `prev` (the SHA-256 of the previous line's bytes, without its newline; 64
zeros for the first), `kind`, the record's own fields and, last, its seal over the line's own
bytes up to it, so an edit of the newest line (which no successor chains to) is caught too. With
a seal key (a file named by `CKPT_INSPECTOR_SEAL_KEY_FILE`, or the text of
`CKPT_INSPECTOR_SEAL_KEY`, handed to every process that writes or reads the journal) the seal is
`mac`, an HMAC-SHA256 only a key holder can make; without one it is `seal`, a plain SHA-256 that
finds damage but that anyone can recompute, so such a journal is unauthenticated. A line is
written whole with one `write`, fsync'd, under an exclusive `flock`, so ranks appending to one
journal interleave whole lines and the chain stays one chain.

Reading never stops at a bad line: a line that is not JSON (a write cut short), a line whose
successor's `prev` does not match it (changed after it was written), a gap in `seq` (lines
deleted; the line after it is still judged by its own seal), a `seq` the chain has passed (a
line copied from earlier), a line out of its place (another journal's chain id, or a chain's
first line, seq 0, past line 1), two sealed lines claiming one `seq` or not chaining to each
other (a fork: neither is believed), a seal that does not hold or a line without the key's
seal when a key is set are each a named `JournalProblem`, and every readable line is still
returned; `Journal.sound` gives the entries a verdict may rest on (their own line intact and
in its place). A journal has one chain id, the hash of its first line (a sealed start that no
later line names while they name another is forked); only where line 1 does not hold is the
one id every sealed line names taken instead, and never two (`_chain_ids`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from inspector.core import strict_json
from inspector.core.atomic import fsync_path
from inspector.integrity.regular_file import read_regular

JOURNAL_NAME = "journal.jsonl"
GENESIS = "0" * 64
_RESERVED = ("seq", "prev", "chain", "kind", "seal", "mac")
_SEAL_PREFIX = b',"seal":"'
_MAC_PREFIX = b',"mac":"'
KEY_FILE_ENV = "CKPT_INSPECTOR_SEAL_KEY_FILE"
KEY_ENV = "CKPT_INSPECTOR_SEAL_KEY"

ProblemKind = Literal["truncated", "unreadable", "edited", "deleted", "forged", "unsigned",
                      "replayed", "misplaced", "forked", "moved"]
UNSOUND: frozenset[str] = frozenset({"unreadable", "edited", "forged", "unsigned", "replayed",
                                     "misplaced", "forked"})
"""Problems that make a line's own record untrustworthy (a gap before a line does not)."""


SEAL_KEY_BYTES = 1 << 20
"""The most a seal key file may hold (a FIFO or /dev/zero named there is refused at once)."""


class SealKeyError(OSError):
    """The configured seal key cannot be read."""


def seal_key() -> bytes | None:
    """The journal seal key from `CKPT_INSPECTOR_SEAL_KEY_FILE` or `CKPT_INSPECTOR_SEAL_KEY`."""
    if name := os.environ.get(KEY_FILE_ENV):
        try:
            key = read_regular(name, "seal key", SEAL_KEY_BYTES).strip()
        except OSError as exc:
            raise SealKeyError(f"cannot read the seal key {name} ({KEY_FILE_ENV}): "
                               f"{exc.strerror}") from None
        if not key:
            raise SealKeyError(f"the seal key {name} ({KEY_FILE_ENV}) is empty")
        return key
    text = os.environ.get(KEY_ENV, "")
    return text.encode("utf-8") if text else None


@dataclass(frozen=True)
class JournalEntry:
    """One readable line: its 1-based line number, place in the chain, kind and whole record."""

    line: int
    seq: int
    kind: str
    record: Mapping[str, Any]


@dataclass(frozen=True)
class JournalProblem:
    """A line that breaks the chain, named by its 1-based line number."""

    line: int
    kind: ProblemKind
    detail: str


@dataclass(frozen=True)
class Journal:
    """Everything readable in a journal, and every place where the chain does not hold."""

    path: Path
    entries: tuple[JournalEntry, ...] = ()
    problems: tuple[JournalProblem, ...] = field(default_factory=tuple)
    authenticated: bool = False
    """Read with a key: every line in `sound` carries that key's seal."""
    head: str | None = None
    """The hash of the first line as it reads now: the chain id of a journal whose first line
    is the record a reader asks about (later lines carry theirs as `chain`)."""

    @property
    def intact(self) -> bool:
        """True when every line is readable and chained to the one before it."""
        return not self.problems

    @property
    def sound(self) -> tuple[JournalEntry, ...]:
        """The entries whose own line is whole and sealed: the only ones to act on."""
        bad = {p.line for p in self.problems if p.kind in UNSOUND}
        return tuple(e for e in self.entries if e.line not in bad)

    @property
    def unsound(self) -> tuple[JournalProblem, ...]:
        """The problems that leave a line's own record out of `sound`."""
        return tuple(p for p in self.problems if p.kind in UNSOUND)

    def of_kind(self, kind: str) -> tuple[JournalEntry, ...]:
        """The sound entries of one kind, in journal order: what a reader may act on."""
        return tuple(e for e in self.sound if e.kind == kind)


def unauthenticated(what: str) -> str:
    """The words a reader says when `what` ("the journal is", "the results files are") was read
    without a seal key: its seals and chain find damage, not a forger."""
    return (f"{what} unauthenticated (no seal key): anyone who can write it can add records "
            f"whose seals and chain hold; set {KEY_FILE_ENV} where it is written and read")


def journal_path(run_dir: str | os.PathLike[str]) -> Path:
    """Where a run folder keeps its journal."""
    return Path(run_dir) / JOURNAL_NAME


def is_run_path(path: str | os.PathLike[str]) -> bool:
    """A run folder (one holding a journal) or a journal file."""
    p = Path(path)
    return (p.is_dir() and journal_path(p).is_file()) or (p.is_file() and p.name == JOURNAL_NAME)


def line_hash(raw: bytes) -> str:
    """The SHA-256 that the next line's `prev` must carry."""
    return hashlib.sha256(raw).hexdigest()


def chain_id(path: str | os.PathLike[str]) -> str | None:
    """The chain id of the journal at `path`: the hash of its first line (None when empty),
    which every later line carries as `chain`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return line_hash(_head(fd)) if os.fstat(fd).st_size else None
    finally:
        os.close(fd)


def append(path: str | os.PathLike[str], kind: str, fields: Mapping[str, Any]) -> JournalEntry:
    """Append one record to the journal at `path` (created with its folder), durably, sealed
    with the seal key when one is set."""
    clash = [k for k in _RESERVED if k in fields]
    if clash:
        raise ValueError(f"journal fields may not be named {', '.join(clash)}")
    key = seal_key()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    created = not target.exists()
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        with _locked(fd):
            last, seq, ends_cleanly = _tail(fd)
            record = {"seq": seq, "prev": line_hash(last) if last is not None else GENESIS,
                      **({"chain": line_hash(_head(fd))} if last is not None else {}),
                      "kind": kind, **fields}
            raw = _sealed(strict_json.dumps(record, sort_keys=False).encode("utf-8"), key)
            # A line cut short by a crash stays as it is (read back as 'truncated'); the new
            # record starts on a line of its own and chains to that fragment's bytes.
            os.write(fd, (b"" if ends_cleanly else b"\n") + raw + b"\n")
            os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_path(target.parent)
    return JournalEntry(line=0, seq=seq, kind=kind, record=record)


_FROM_ENVIRONMENT: Any = object()


def read(path: str | os.PathLike[str], key: bytes | None = _FROM_ENVIRONMENT) -> Journal:
    """Read every line of a journal and name each place the chain or a seal breaks; `key`
    (by default the environment's seal key) is what every line's seal must be made with."""
    if key is _FROM_ENVIRONMENT:
        key = seal_key()
    target = Path(path)
    data = read_regular(target, "journal")  # a FIFO or /dev/zero in its place: refused
    lines = data.split(b"\n")
    cut_short = bool(lines) and lines[-1] != b""
    if not cut_short:
        lines = lines[:-1]
    parsed: list[tuple[int, bytes, dict[str, Any]]] = []
    problems: list[JournalProblem] = []
    for number, raw in enumerate(lines, start=1):
        record = _parse(raw)
        if record is None:
            last = number == len(lines)
            kind: ProblemKind = "truncated" if last and cut_short else "unreadable"
            problems.append(JournalProblem(number, kind, _unreadable_detail(kind)))
        else:
            parsed.append((number, raw, record))
    problems += _chain_problems(parsed, lines, problems, key)
    # the chain's order is `seq`'s, whatever order the file's lines are in (a line moved up the
    # file goes back to its place): readers take "newest" from it
    entries = [JournalEntry(number, record["seq"], str(record["kind"]), record)
               for number, _, record in sorted(parsed, key=lambda p: (p[2]["seq"], p[0]))]
    problems.sort(key=lambda p: p.line)
    # with a key, every line in `sound` carries that key's seal (any other is a problem)
    authenticated = key is not None and bool(lines)
    head = line_hash(lines[0]) if lines else None
    return Journal(target, tuple(entries), tuple(problems), authenticated, head)


def _chain_problems(parsed: list[tuple[int, bytes, dict[str, Any]]], lines: list[bytes],
                    problems: list[JournalProblem], key: bytes | None) -> list[JournalProblem]:
    """Each readable line judged by its own seal and by its place in the chain: first where it
    stands (whose chain it names, a copy, a chain's start past line 1), then its `prev` against
    the line placed here whose `seq` is one less, wherever that line stands in the file; two
    lines left claiming one `seq` are a fork, and neither is believed."""
    found: list[JournalProblem] = []
    sealed: set[int] = set()
    for number, raw, _ in parsed:
        if seal := _seal_problem(raw, key):
            found.append(JournalProblem(number, *seal))
        else:
            sealed.add(number)
    chains, contested = _chain_ids(parsed, lines, sealed)
    found += contested
    first: dict[bytes, int] = {}
    for number, raw, _ in parsed:
        first.setdefault(raw, number)
    placed = [p for p in parsed if not _out_of_place(*p, chains, first[p[1]], found)]
    by_seq: dict[int, list[tuple[int, bytes]]] = {}
    for number, raw, record in placed:
        by_seq.setdefault(record["seq"], []).append((number, raw))
    unreadable = {p.line for p in problems}
    highest = -1
    for number, _, record in placed:
        seq = record["seq"]
        if seq < highest:
            found.append(JournalProblem(number, "moved", f"the file's lines are out of seq "
                                        f"order here (seq {seq} after seq {highest}): lines "
                                        "were moved; the chain is read in seq order"))
        highest = max(highest, seq)
        before = by_seq.get(seq - 1, [])
        if seq == 0:
            if record["prev"] != GENESIS:
                found.append(JournalProblem(number, "edited",
                                            "the first line does not start a chain"))
        elif not before:
            low = max((q for q in by_seq if q < seq), default=-1) + 1
            found.append(JournalProblem(number, "deleted", f"{seq - low} line(s) (seq "
                                        f"{low}..{seq - 1}) are missing before it"))
        elif record["prev"] in {line_hash(b) for _, b in before}:
            pass
        elif number - 1 in unreadable and record["prev"] == line_hash(lines[number - 2]):
            # the writer chained on from a line a crash cut short: evidence, not an edit
            found.append(JournalProblem(number - 1, "truncated", _CUT_AND_CONTINUED))
        elif key is not None and number in sealed and all(at in sealed for at, _ in before):
            # every line here carries the key's seal, so none was edited: one side was put
            # here from elsewhere (another journal sealed with the same key, a forked chain),
            # and which one no check can tell, so neither is believed
            found.append(JournalProblem(number, "misplaced", f"its prev is not the hash of the "
                                        f"line with seq {seq - 1}: it was not written after it"))
            found += [JournalProblem(at, "forked", f"line {number} (seq {seq}) was not written "
                                     "after it: one of the two is another chain's")
                      for at, _ in before if at not in {p.line for p in found}]
        else:
            found += [JournalProblem(at, "edited", "changed after it was written (the next "
                                     "line's hash of it differs)")
                      for at, _ in before if at not in {p.line for p in found}]
    found += _forks(placed, {p.line for p in found if p.kind in UNSOUND})
    # a truncated line the writer chained on from is named once, as that
    cut = {p.line for p in found if p.kind == "truncated"}
    problems[:] = [p for p in problems if p.line not in cut]
    return found


def _chain_ids(parsed: list[tuple[int, bytes, dict[str, Any]]], lines: list[bytes],
               sealed: set[int]) -> tuple[set[str], list[JournalProblem]]:
    """The chain ids a line may name here, and line 1's problem when its place is contested.

    The id is the hash of line 1 when line 1 is a sealed chain start that a later sealed line
    names (or none names any id). A sealed start that no line names, while later lines name
    another id, is contested: it or they were put here from another run sealed with the same
    key, so it is forked and their id is not taken. Where line 1 is no sealed start (damaged,
    or a later line: the start was deleted), the id its writers saw is taken, and only when
    every sealed line names that one id; two ids are two runs' lines, and neither is taken."""
    if not lines:
        return set(), []
    head = line_hash(lines[0])
    named = {r["chain"] for n, _, r in parsed if n in sealed and n != 1 and "chain" in r}
    named |= {r["prev"] for n, _, r in parsed if n in sealed and n != 1 and r["seq"] == 1}
    start = next((r for n, _, r in parsed if n == 1), None)
    if 1 in sealed and start is not None and start["seq"] == 0 and "chain" not in start:
        if head in named or not named:
            return {head}, []
        return {head}, [JournalProblem(1, "forked", "no later line was written after it, and "
                                       "they name another chain: one side is another run's")]
    if start is not None and 1 in sealed and "chain" in start:
        named.add(start["chain"])  # a later line at the top names its chain itself
    return ({head} | named if len(named) == 1 else {head}), []


def _out_of_place(number: int, raw: bytes, record: dict[str, Any], chains: set[str],
                  first: int, found: list[JournalProblem]) -> bool:
    """Whether a line stands where no line of this chain can, named in `found` when so: it
    names another journal's chain id, repeats line `first` (the first with its bytes), or
    starts a chain (seq 0, which carries no chain id) anywhere but line 1 (another run's
    first line, or this one's moved)."""
    seq = record["seq"]
    if "chain" in record and record["chain"] not in chains:
        why = ("written to another journal (its chain id is not the hash of this one's "
               "first line)")
    elif first < number:
        found.append(JournalProblem(number, "replayed", f"a copy of line {first}: its seq "
                                    f"{seq} is taken"))
        return True
    elif seq == 0 and number != 1:
        why = ("a chain's first line (seq 0) past line 1: another journal's first line, or "
               "this one's moved from its place")
    else:
        return False
    found.append(JournalProblem(number, "misplaced", why))
    return True


def _forks(placed: list[tuple[int, bytes, dict[str, Any]]],
           unsound: set[int]) -> list[JournalProblem]:
    """Lines whose own checks all hold but that claim one `seq` with different bytes: two
    chains from one start (a copied journal written on in two places), and no check tells
    which is this run's, so each is named and neither believed."""
    by_seq: dict[int, list[tuple[int, bytes]]] = {}
    for number, raw, record in placed:
        if number not in unsound:
            by_seq.setdefault(record["seq"], []).append((number, raw))
    return [JournalProblem(at, "forked", f"seq {seq} is claimed by line(s) "
                           f"{', '.join(str(n) for n, _ in claims if n != at)} too, with other "
                           "bytes: a forked chain")
            for seq, claims in by_seq.items() if len({raw for _, raw in claims}) > 1
            for at, _ in claims]


def _mac(key: bytes, head: bytes) -> str:
    return hmac.new(key, head, hashlib.sha256).hexdigest()


def _sealed(body: bytes, key: bytes | None) -> bytes:
    if b"\n" in body or not body.endswith(b"}"):
        raise ValueError("a journal record must serialise to one JSON object on one line")
    head = body[:-1]
    if key is None:
        return head + _SEAL_PREFIX + line_hash(head).encode("ascii") + b'"}'
    return head + _MAC_PREFIX + _mac(key, head).encode("ascii") + b'"}'


def _seal_problem(raw: bytes, key: bytes | None) -> tuple[ProblemKind, str] | None:
    """Why a line's seal does not hold (None when it does); with a key, only that key's seal
    holds, since a plain SHA-256 seal can be recomputed by anyone who edits the line."""
    for prefix, keyed in ((_MAC_PREFIX, True), (_SEAL_PREFIX, False)):
        cut = len(raw) - len(prefix) - 64 - 2
        if cut < 0 or raw[cut:cut + len(prefix)] != prefix or not raw.endswith(b'"}'):
            continue
        head, seal = raw[:cut], raw[cut + len(prefix):-2].decode("ascii", "replace")
        if not keyed and key is not None:
            return "unsigned", "sealed without the seal key: anyone could have written it"
        if keyed and key is None:
            return None  # made with a key this reader lacks: only the chain can be checked
        want = _mac(key, head) if keyed else line_hash(head)
        if hmac.compare_digest(seal, want):
            return None
        return ("forged" if keyed else "edited",
                "its seal is not the seal key's (forged, or another key)" if keyed
                else "changed after it was written (its seal does not match)")
    return "edited", "changed after it was written (it carries no seal)"


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    ok = (isinstance(record.get("seq"), int) and isinstance(record.get("prev"), str)
          and isinstance(record.get("kind"), str) and isinstance(record.get("chain", ""), str))
    return record if ok else None


_CUT_AND_CONTINUED = ("a write cut short (kept as evidence); the next record chains on from "
                      "its bytes")


def _unreadable_detail(kind: ProblemKind) -> str:
    if kind == "truncated":
        return "the last line was cut short (a write that did not finish)"
    return "not a journal record (damaged or not JSON)"


def _head(fd: int) -> bytes:
    """The journal's first line: its hash is the chain id every later line carries, so a line
    sealed for another journal with the same key is told apart even after a gap."""
    window = 1 << 12
    while True:
        chunk = os.pread(fd, window, 0)
        cut = chunk.find(b"\n")
        if cut >= 0 or len(chunk) < window:
            return chunk[:cut] if cut >= 0 else chunk
        window *= 4


def _tail(fd: int) -> tuple[bytes | None, int, bool]:
    """The last line's bytes, the next seq, and whether the file ends with a newline."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, 0, True
    # Records are small; reading back a bounded tail keeps an append O(1) in the journal's length.
    window = min(size, 1 << 20)
    while True:
        chunk = os.pread(fd, window, size - window)
        ends_cleanly = chunk.endswith(b"\n")
        body = chunk[:-1] if ends_cleanly else chunk
        cut = body.rfind(b"\n")
        if cut >= 0 or window == size:
            last = body[cut + 1:]
            break
        window = min(size, window * 4)
    seq = _next_seq(fd, size, last)
    return last, seq, ends_cleanly


def _next_seq(fd: int, size: int, last: bytes) -> int:
    record = _parse(last)
    if record is not None:
        return record["seq"] + 1
    # The last line is damaged: count on from the newest readable line before it.
    for raw in reversed(os.pread(fd, size, 0).split(b"\n")):
        found = _parse(raw)
        if found is not None:
            return found["seq"] + 1
    return 0


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
