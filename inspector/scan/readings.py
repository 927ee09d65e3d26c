"""The loaders' own readings of a scanned file, folded into its scan result.

The static walk (`scan.pickles.walker`) explains a pickle; the verdict also rests on what the real
unpicklers read from the same bytes. While a file is scanned, every buffer the walker reads as a
pickle is kept with the offsets it starts at (`ScanContext.walk`), and the file itself is always one
more reading from its first byte, whatever its format (the C unpickler accepts any opcode
there: a polyglot is not told by byte 0). A reader, injected by the caller (the CLI and the app
pass `sandbox.host.client.dry_run_reader`, which runs the `dry-run` op in the jail; core never
unpickles), reads each blob with CPython's C unpickler (buffered and without peek()) and the
pure-Python one (joblib), recording every import and call. `scan.reading_apply` then folds
the answers into each result.
"""

from __future__ import annotations

import contextlib
import contextvars
import mmap
import os
import stat
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator

from inspector.core.vocabulary import Severity
from inspector.scan.reading_apply import apply, recount, unreached, walker_only
from inspector.scan.reading_record import ArchiveAsk, Blob, StreamReading
from inspector.scan.result import Finding

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
    walk = iter(walk)
    broke: list[BaseException] = []
    with tempfile.TemporaryDirectory(prefix="ckpt-readings-") as folder:
        blob_file = os.path.join(folder, "blobs")

        def parts() -> Iterator[dict]:
            held = 0
            done = 0
            with open(blob_file, "ab") as out, deferred():
                while True:
                    try:
                        res = next(walk)
                    except StopIteration:
                        break
                    except BaseException as exc:
                        broke.append(exc)
                        raise
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
            if broke:  # the walk itself failed, not the reading
                raise
            if not walked:  # the job failed before the walk ended (its worker never started)
                with deferred():
                    results.extend(walk)
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
        unreached(r, [b for b in read_blobs if not b.reached], apart_blobs, real, over)
        walker_only(r, [b for b in read_blobs if b.reached and not b.zip], real)
        r._blobs = []


def _unread(res, why: str) -> None:
    res.findings.append(Finding(Severity.SUSPICIOUS, "readings-unavailable",
                                f"the loaders' own readings could not run ({why[:200]}); the "
                                "verdict rests on the static walk alone"))
    res.verdict = recount(res)
    res._blobs = []


