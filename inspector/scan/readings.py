"""The loaders' own readings of a scanned file, folded into its scan result.

The static walk (`scan.pickles.walker`) explains a pickle; the verdict also rests on what the real
unpicklers read from the same bytes. While a file is scanned, every buffer the walker reads as a
pickle is kept with the offsets it starts at (`ScanContext.walk`), and the file itself is always one
more reading from its first byte, whatever its format (the C unpickler accepts any opcode
there: a polyglot is not told by byte 0). A reader, injected by the caller (the CLI and the app
pass `sandbox.host.client.dry_run_reader`, which runs the `dry-run` op in the jail; core never
unpickles), reads each blob with CPython's C unpickler (buffered and without peek()) and the
pure-Python one (joblib), recording every import and call. `apply` then folds in:

- imports the real readings resolve, classified as any import (`policy.classify`);
- `parser-differential`: the real readers resolve an import the walker did not see (dangerous:
  a grammar difference is the mark of a crafted file), or a real reader reads a pickle where
  the walker found none, or the walker sees imports no real reader reaches: those leave the
  globals (the verdict's imports are the real readers') and the finding is as severe as the
  worst of them (`_walker_only`);
- calls outside the call allow-list (`policy.call_verdict`), with their reconstructed call and
  code-like arguments read whole;
- pickles held in values (raw, base64, hex, in stages), as `nested-pickle-value` on the key that
  holds them, and code-like text in values (`code-in-value`, info);
- `unreached-pickle`: imports read in bytes no loader reads as a pickle (a blob not `reached`:
  a member of an archive no zip reader hands out so), kept apart from the globals and as
  severe as the worst of them (`_unreached`).

A file the walker called no checkpoint becomes one when a real reading reads a pickle from it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import mmap
import os
import re
import stat
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field

from inspector.core.verdict import worst
from inspector.core.vocabulary import Severity, Verdict
from inspector.scan.pickles.policy import (
    call_verdict,
    classify,
    numpy_dtype_classes,
    weights_only_rules,
)
from inspector.scan.reading_record import NestedPickle, StreamReading
from inspector.scan.result import Finding, GlobalUse


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
    # reads whole files, never archive members)
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


PY_OPCODES_BASE = 250_000


def py_budget(size: int) -> int:
    """Opcodes the pure-Python reading of a blob of a `size`-byte file may run (about 1 µs
    each; the C readers about 0.05). Every opcode takes at least one byte, so the file's own
    bytes and its stored members are always read whole; only decoded content, which a few
    bytes stretch (400 bytes of bzip2 decode to 10 million opcodes), can be cut."""
    return PY_OPCODES_BASE + size


Reader = Callable[[dict], dict]
"""Runs the `dry-run` op on a request ({path, paths, readings}) and returns its result; a
file (a readings `group`) it could not read is in the result's `unread` {group: why}."""

_reader: Reader | None = None
# `using` overrides the process's reader in one thread only: parallel jobs each swap in their
# own, and a process-wide swap undone out of order would leave one installed for good.
_UNSET = object()
_override = contextvars.ContextVar("ckpt_inspector_reader", default=_UNSET)


def set_reader(reader: Reader | None) -> None:
    """Install the reader every later scan in this process uses (None: walker only)."""
    global _reader
    _reader = reader


@contextlib.contextmanager
def installed(reader: Reader | None):
    """Scans in every thread use `reader` until the block ends; the one before is back then."""
    global _reader
    before, _reader = _reader, reader
    try:
        yield
    finally:
        _reader = before


@contextlib.contextmanager
def using(reader: Reader | None):
    """Scans inside, in this thread, use `reader` (None: walker only), whatever is installed."""
    token = _override.set(reader)
    try:
        yield
    finally:
        _override.reset(token)


def current_reader() -> Reader | None:
    """The reader this thread's scans use: its `using` one, else the installed one."""
    reader = _override.get()
    return _reader if reader is _UNSET else reader


_DEFER = contextvars.ContextVar("ckpt_inspector_defer_readings", default=False)


@contextlib.contextmanager
def deferred():
    """Scans inside leave their readings pending (`read` runs them later, many in one job)."""
    token = _DEFER.set(True)
    try:
        yield
    finally:
        _DEFER.reset(token)


def is_deferred() -> bool:
    """Whether scans now leave their readings pending."""
    return _DEFER.get()


def blobs_of(walked: Iterable[Blob], whole, path: str, size: int,
             archives: Iterable[ArchiveAsk] = ()) -> list[Blob]:
    """The blobs one scan leaves for the real readers: the file from its first byte (always,
    whatever its format: a zip is read without persistent_load, as plain pickle.load reads it),
    then every other buffer the walk read, held as bytes, then each damaged archive for torch's
    own zip reader (in place when the file is mapped)."""
    if current_reader() is None and not _DEFER.get():
        return []
    # the jailed reader runs in another folder: a relative name would name another file there
    path = os.path.abspath(path)
    mapped = isinstance(whole, mmap.mmap)
    budget = py_budget(size)
    first = Blob(None, {0}, {0}, path=path if mapped else None, size=size,
                 data=None if mapped else bytes(whole),
                 persistent=bytes(whole[:4]) != b"PK\x03\x04", py_opcodes=budget)
    out = [first]
    for blob in walked:
        if blob.data is whole:
            first.starts |= blob.starts
            first.entries |= blob.entries
            first.walker |= blob.walker
        else:
            out.append(Blob(blob.member, blob.starts, blob.entries, blob.walker,
                            data=bytes(blob.data),
                            kinds=blob.kinds, py_opcodes=budget, reached=blob.reached))
    for ask in archives:
        start, end = ask.span or (0, size)
        label = f"bytes {start}-{end}" if ask.span else None
        out.append(Blob(label, {0}, {0}, ask.walker, zip=True, offset=start, size=end - start,
                        path=path if mapped else None,
                        data=None if mapped else bytes(whole[start:end])))
    return out


_NAME = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*")


def _importable(module: str, name: str) -> bool:
    """A name the import system could resolve: anything else fails before any code runs."""
    return bool(_NAME.fullmatch(module) and _NAME.fullmatch(name))


@functools.lru_cache(maxsize=1024)
def _exists(module: str) -> bool:
    """Whether the module's top-level package can be found (found, not imported)."""
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def request(groups: list[list[Blob]], folder: str) -> dict:
    """The dry-run request for the blobs of each scanned file (`groups`, one list a file):
    held bytes go into one file in `folder`."""
    blob_file = os.path.join(folder, "blobs")
    paths: list[str] = []
    for b in (b for group in groups for b in group):
        if b.path is not None and b.path not in paths:
            paths.append(b.path)
    with open(blob_file, "wb") as out:
        items = _items(groups, paths, out)
    return {"op": "dry-run", "path": blob_file, "paths": paths, "readings": items}


def _items(groups: list[list[Blob]], paths: list[str], out, first: int = 0) -> list[dict]:
    """The request's readings: a blob read in place names its file in [blob file] + `paths`,
    held bytes are appended to `out` (the blob file). Each item names its `group`, the
    scanned file it is of (numbered from `first`): a reader whose worker one file kills
    retries that file alone and reads the others on (`Reader`, the answer's `unread`)."""
    items = []
    pos = out.tell()
    for number, group in enumerate(groups, first):
        for b in group:
            items.append(_item(b, paths, out, pos, number))
            pos = out.tell()
    return items


def _item(b: Blob, paths: list[str], out, pos: int, group: int) -> dict:
    """One reading of the request (held bytes appended to `out` at `pos`)."""
    if b.path is not None:
        item = {"file": 1 + paths.index(b.path), "offset": b.offset, "length": b.size}
    else:
        out.write(b.data)
        item = {"file": 0, "offset": pos, "length": len(b.data)}
    return {**item, "member": b.member, "starts": sorted(b.starts),
            "entries": sorted(b.entries), "zip": b.zip, "persistent": b.persistent,
            "kinds": list(b.kinds), "py_opcodes": b.py_opcodes, "group": group}


def read(results: Iterable, reader: Reader | None = None) -> None:
    """Run the real readings of each result's blobs (one job for all) and fold them in."""
    reader = reader or current_reader()
    results = [r for r in results if getattr(r, "_blobs", None)]
    if reader is None or not results:
        return
    with tempfile.TemporaryDirectory(prefix="ckpt-readings-") as folder:
        try:
            answer = reader(request([r._blobs for r in results], folder))
        except Exception as exc:  # no reading: never safe on the walker's word alone
            for r in results:
                _unread(r, f"{type(exc).__name__}: {exc}")
            return
    _fold(results, answer)


HELD_RESERVE = 256 << 20
"""Held bytes a gated job may receive (its memory allowance is fixed before they exist)."""
PART_FILES = 16
"""Files walked per part of a streamed dry run: the worker reads each while the next is walked."""


SMALL_FILE = 1 << 20
"""Files up to this size are read whole by the scan; larger ones are memory-mapped, and the
jailed reader reads their blobs in place."""
READ_BATCH_FILES = 256
READ_BATCH_BYTES = 256 << 20  # of files walked before their readings run and results come


def batch_full(count: int, size: int) -> bool:
    """Whether a batch of `count` files, `size` bytes in all, is to be scanned now."""
    return count >= READ_BATCH_FILES or size > READ_BATCH_BYTES


def file_size(path: str | os.PathLike) -> int:
    """A regular file's size (what `scan_file` may map and read in place), else 0."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def read_batch(founds: list, scan: Callable) -> list:
    """`scan` of each found file (`discover.Found`), with the loaders' readings of all of them
    in one jailed job whose worker starts before the first file is walked (`read_while`): a
    caller that imports the scan's modules inside `scan` (the CLI) has them imported while the
    worker starts."""
    if not founds:
        return []
    if current_reader() is None:
        return [scan(f) for f in founds]
    in_place = [os.fspath(f.path) for f in founds if file_size(f.path) > SMALL_FILE]
    return read_while(map(scan, founds), in_place)


def read_while(walk: Iterable, in_place: list[str], reader: Reader | None = None) -> list:
    """The scans `walk` yields (their readings pending), with those readings run by one jailed
    job that starts while the walk does and reads each part of `PART_FILES` files while the
    next is walked; returns the walk's results, readings folded.

    The worker jails before the walk ends, so what it may read is fixed first: `in_place`,
    the files whose scans may ask for a reading in place (memory-mapped ones), and one blob
    file, appended to part by part, for held bytes up to `HELD_RESERVE`. A result that needs
    anything else is read by a job of its own afterwards. A reader without `gated` (any plain
    function) reads after the walk."""
    reader = reader or current_reader()
    in_place = [os.path.abspath(p) for p in in_place]  # as `blobs_of` names them
    gated = getattr(reader, "gated", None)
    if gated is None:
        with deferred():
            results = list(walk)
        read(results, reader)
        return results
    results: list = []
    inside: list = []
    walked: list = []
    with tempfile.TemporaryDirectory(prefix="ckpt-readings-") as folder:
        blob_file = os.path.join(folder, "blobs")

        def parts() -> Iterator[dict]:
            held = 0
            done = 0
            with open(blob_file, "ab") as out, deferred():
                for res in walk:
                    results.append(res)
                    if len(results) - done < PART_FILES:
                        continue
                    held = yield from _part(results[done:], inside, held, in_place, out)
                    done = len(results)
                walked.append(True)
                yield from _part(results[done:], inside, held, in_place, out)

        open(blob_file, "wb").close()  # the jail's read rule needs the file to exist
        base = {"op": "dry-run", "path": blob_file, "paths": list(in_place),
                "held_mb": HELD_RESERVE >> 20}
        try:
            answer = gated(base, parts)
        except Exception as exc:  # no reading: never safe on the walker's word alone
            if not walked:  # the walk itself failed, not the reading
                raise
            for r in inside:
                _unread(r, f"{type(exc).__name__}: {exc}")
            answer = None
    if answer is not None:
        _fold(inside, answer)
    chosen = {id(r) for r in inside}
    read([r for r in results if id(r) not in chosen], reader)
    return results


def _part(new: list, inside: list, held: int, in_place: list[str],
          out) -> Generator[dict, None, int]:
    """Yields the part of the streamed request for `new` results: those whose blobs the job
    may read (in place, or held within the reserve left) join `inside`, their held bytes are
    appended to `out`. Returns the held bytes so far."""
    chosen = []
    for r in new:
        blobs = getattr(r, "_blobs", None) or []
        size = sum(len(b.data) for b in blobs if b.data is not None)
        if all(b.path is None or b.path in in_place for b in blobs) and (
                held + size <= HELD_RESERVE):
            chosen.append(r)
            held += size
    items = _items([r._blobs for r in chosen], in_place, out, len(inside))
    inside.extend(chosen)
    out.flush()
    if items:
        yield {"readings": items}
    return held


def _fold(results: list, answer: dict) -> None:
    """Fold a dry-run answer into the results whose blobs made its request, in order; a
    result whose file the reader could not read (`unread`: its group, and why) says so."""
    by_blob: dict[int, list[StreamReading]] = {}
    for raw in answer.get("readings", []):
        record = StreamReading.from_json(raw)
        by_blob.setdefault(int(record.index), []).append(record)
    unread = {int(group): str(why) for group, why in answer.get("unread", {}).items()}
    i = 0
    for group, r in enumerate(results):
        if group in unread:
            i += len(r._blobs)
            _unread(r, unread[group])
            continue
        real: set[tuple[str, str]] = set()
        over: set[tuple[str, str]] = set()
        read_blobs, apart_blobs = [], []
        for b in r._blobs:
            resolved, apart = apply(r, b, by_blob.get(i, []))
            over |= apart
            if b.reached:
                real |= resolved
            else:
                over |= resolved
            if by_blob.get(i):
                read_blobs.append(b)
            if apart or not b.reached:
                apart_blobs.append(b)
            i += 1
        _unreached(r, [b for b in read_blobs if not b.reached], apart_blobs, real, over)
        _walker_only(r, [b for b in read_blobs if b.reached and not b.zip], real)
        r._blobs = []


def _unread(res, why: str) -> None:
    res.findings.append(Finding(Severity.SUSPICIOUS, "readings-unavailable",
                                f"the loaders' own readings could not run ({why[:200]}); the "
                                "verdict rests on the static walk alone"))
    res.verdict = _recount(res)
    res._blobs = []


def _recount(res) -> str:
    """The verdict from the result's globals and findings, as `ScanContext.finish` gives it."""
    if res.verdict == Verdict.SKIPPED:
        return Verdict.SKIPPED
    verdict = worst([g.severity for g in res.globals] + [f.severity for f in res.findings])
    return Verdict.ERROR if res.error and verdict != Verdict.DANGEROUS else verdict


def apply(res, blob: Blob, records: list[StreamReading]) -> tuple[set[tuple[str, str]],
                                                        set[tuple[str, str]]]:
    """Fold one blob's real readings into `res` (a `scan.ScanResult`); returns the imports
    they resolved (`_walker_only` then takes out what only the walk saw), and those that only
    readings no loader makes (`apart` records) resolved."""
    rules = weights_only_rules()
    uses = {(g.module, g.name): g for g in res.globals}
    real: dict[tuple[str, str], int] = {}
    apart: set[tuple[str, str]] = set()
    read_pickle = False
    where = blob.member
    found_in: dict[tuple[str, str], str | None] = {}  # the record of a zip blob naming each

    seen = {(f.code, f.message, f.member) for f in res.findings}
    # a call the walk already reported (with its opcode's offset) is not reported again
    seen_calls = {(f.code, f.call) for f in res.findings if f.call}
    # nor one of a global already dangerous: it is shown under that global, with its call
    dangerous_calls = {c for g in res.globals if g.severity == Severity.DANGEROUS
                       for c in g.calls}

    def find(severity: str, code: str, message: str, call: str | None = None,
             member: str | None = where) -> None:
        if call is not None and ((code, call) in seen_calls or call in dangerous_calls):
            return
        if len(res.findings) < 4000 and (code, message, member) not in seen:
            seen.add((code, message, member))
            res.findings.append(Finding(severity, code, message, member, None, call))

    for rec in records:
        read_pickle |= rec.pickles > 0 and not rec.apart
        if rec.cut:
            res.weights_only_ok = False
            find(Severity.SUSPICIOUS, "readings-budget",
                 f"the pure-Python unpickler's reading (joblib's) {rec.error}; what lies "
                 "past that is read by the C unpicklers only")
        for module, name, count in rec.imports:
            if not _importable(module, name):
                continue
            if rec.apart:
                apart.add((module, name))
            else:
                real[(module, name)] = max(real.get((module, name), 0), count)
                found_in.setdefault((module, name), rec.member or where)
        for call in rec.calls:
            _judge_call(call, find, rules)
        for inner in rec.nested:
            _nested(inner, find, rules, where)
        for value in rec.code_values[:5]:
            find(Severity.INFO, "code-in-value",
                 f"the value at {value['key'] or '<root>'} reads like code: "
                 f"{value['text'][:120]!r}", None, _key(where, value["key"]))
    for (module, name), count in real.items():
        if (module, name) not in uses and blob.reached:
            verdict = classify(module, name, rules)
            member = found_in.get((module, name))
            use = GlobalUse(module, name, count, verdict.severity, verdict.reason,
                            [member] if member else [])
            res.globals.append(use)
            uses[(module, name)] = use
            res.weights_only_ok = res.weights_only_ok and verdict.severity == Severity.SAFE
    only_real = sorted(f"{m}.{n}" for m, n in (set(real) | apart) - blob.walker)
    if only_real and blob.zip:
        find(Severity.SUSPICIOUS, "zip-reader-differential",
             "torch's own zip reader hands torch.load pickles of this damaged archive that "
             "the scan's reading of it did not give (" + ", ".join(only_real[:6]) + "); the "
             "real unpicklers read them")
    elif only_real:
        find(Severity.DANGEROUS, "parser-differential",
             "CPython's unpickler resolves imports the static walk did not see ("
             + ", ".join(only_real[:6]) + "): the bytes are crafted to read differently")
    # imports before a failure count too, when the module exists (text opening with `c`
    # reads as a GLOBAL of words that name no module: a real load fails right there)
    read_pickle = read_pickle or any(_exists(m) for m, _ in real)
    if read_pickle and res.error and res.error.startswith(("not a model file",
                                                           "not a readable")):
        find(Severity.SUSPICIOUS, "parser-differential",
             "CPython's unpickler reads a pickle here that the static walk could not read: "
             f"{res.error[:160]}")
        res.error = None
        res.format = "pickle" if res.format == "unknown" else res.format
        if res.verdict == Verdict.SKIPPED:
            res.verdict = Verdict.SAFE
    res.globals.sort(key=lambda g: (-_RANK[g.severity], g.module, g.name))
    res.verdict = _recount(res)
    return set(real), apart - set(real)


def _unreached(res, blobs: list[Blob], holding: list[Blob], real: set[tuple[str, str]],
               over: set[tuple[str, str]]) -> None:
    """Imports of pickles in bytes no loader reads as pickles, which no loader's reading
    resolves, are not the verdict's globals: they are one `unreached-pickle` finding, as
    severe as the worst of them (a crafted file keeps its payload dangerous), naming what the
    scan found there. Those bytes are the `blobs` not `reached` (members of an archive no
    loader opens that way, a compressed stream's content past where the stdlib's decoder
    stops) and the `over` readings: from starts past where every loader's reading stops.
    `holding`: the blobs that hold them."""
    names = (over | set().union(*(b.walker for b in blobs))) - real
    rules = weights_only_rules()
    # names no import system resolves leave too, and are shown only when dangerous
    judged = {n: classify(*n, rules).severity for n in names}
    shown_names = {n for n, s in judged.items() if _importable(*n) or s == Severity.DANGEROUS}
    if not shown_names:
        _set_apart(res, names, [], Severity.INFO, "unreached-pickle", None)
        return
    severity = worst([Severity.INFO, *(judged[n] for n in shown_names)])
    severity = Severity.INFO if severity == Severity.SAFE else severity
    shown = ", ".join(sorted(f"{m}.{n}" for m, n in shown_names)[:6])
    _set_apart(res, names, [b for b in holding if b.member], severity, "unreached-pickle",
               f"{shown} imported in bytes no loader reads as a pickle; the scan read them "
               "because a repairing reader might")


def _walker_only(res, blobs: list[Blob], real: set[tuple[str, str]]) -> None:
    """Imports the walk saw in blobs the real readers read, and that no real reading of the
    file resolves, leave the verdict's globals: they are one `parser-differential` finding,
    as severe as the worst of them (a dangerous name the walk alone sees keeps the file
    dangerous). Names no import system resolves (Python source in a TorchScript archive read
    as protocol-0 text) fail in any loader before code runs: no finding unless one is worse
    than suspicious."""
    walked = set().union(*(b.walker for b in blobs)) - real
    if ("numpy", "dtype") in walked:  # the dtype classes listed for what it builds go with it
        walked |= {tuple(c.rsplit(".", 1)) for c in numpy_dtype_classes()} - real
    gone = [g for g in res.globals if (g.module, g.name) in walked]
    if not gone:
        return
    shown = [g for g in gone if _importable(g.module, g.name) or g.severity == Severity.DANGEROUS]
    severity = worst([Severity.SUSPICIOUS] + [g.severity for g in shown])
    names = ", ".join(sorted(g.import_name for g in shown)[:6])
    _set_apart(res, walked, [b for b in blobs if b.walker & walked], severity,
               "parser-differential",
               f"the static walk sees imports no real unpickler reaches ({names})" if shown
               else None)


def _set_apart(res, names: set[tuple[str, str]], holding: list[Blob], severity: str, code: str,
               message: str | None) -> None:
    """Takes `names` out of the verdict's globals into one finding `code` (none when `message`
    is None), on the member of the `holding` blobs when they are all one, and recounts."""
    res.globals[:] = [g for g in res.globals if (g.module, g.name) not in names]
    members = {b.member for b in holding}
    if message is not None and len(res.findings) < 4000:
        res.findings.append(Finding(Severity(severity), code, message,
                                    next(iter(members)) if len(members) == 1 else None))
    res.verdict = _recount(res)


_RANK = {Severity.SAFE: 0, Severity.INFO: 0, Severity.SUSPICIOUS: 1, Severity.DANGEROUS: 2}


def _key(member: str | None, key: str) -> str:
    return f"{member}!{key}" if member and key else (member or key or "<root>")


def _judge_call(call: dict, find, rules) -> None:
    """A recorded call outside the allow-list is dangerous; code in its arguments too."""
    if call["op"] not in ("call", "new"):
        return
    text = call["texts"][0] if call["texts"] else call["target"]
    if call["op"] == "call":
        verdict = call_verdict(call["target"], call["computed"], call["texts"], rules)
        if verdict is not None:
            find(verdict.severity, "call-outside-allowlist", verdict.reason, text)
    if call.get("code"):
        find(Severity.DANGEROUS, "code-in-arguments",
             f"{call['target']} is called with an argument that reads like code: "
             f"{call['code'][:120]!r}", text)


def _nested(inner: NestedPickle, find, rules, member: str | None) -> None:
    """A pickle held in a value: its dangerous imports and calls are a finding on its key."""
    bad = [f"{m}.{n}" for m, n, _ in inner.imports
           if classify(m, n, rules).severity == Severity.DANGEROUS]
    bad += [c["target"] for c in inner.calls if c["op"] == "call" and call_verdict(
        c["target"], c["computed"], c["texts"], rules) is not None]
    key = _key(member, inner.key)
    shown = next((c["texts"][0] for c in inner.calls if c["texts"]), None)
    if bad:
        find(Severity.SUSPICIOUS, "nested-pickle-value",
             f"the value at {inner.key or '<root>'} is a pickle ({inner.encoding}) that "
             f"calls {', '.join(sorted(set(bad))[:4])}: loading this file runs nothing, but "
             "never unpickle that value", shown, key)
    else:
        find(Severity.INFO, "nested-pickle-value",
             f"the value at {inner.key or '<root>'} is a pickle ({inner.encoding}) of "
             "plain data", shown, key)
