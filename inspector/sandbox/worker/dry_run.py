"""Op `dry-run`: each pickle reading of a scanned file run by the real unpicklers, inert.

The static walker (`scan.pickles.walker`) is the project's own copy of a grammar; a crafted file
lives where a copy differs from the original. Here the bytes go through CPython's own readers:
the C unpickler (`pickle.load`, `torch.load(weights_only=False)`, `numpy.load(allow_pickle=
True)`), through a buffered file (with peek(), as open() gives) and through io.BytesIO (no
peek(), as torch reads `data.pkl`), and the pure-Python `pickle._Unpickler` (joblib, from a
blob's first byte only: joblib reads a file or a decoded stream from its start). Their
`find_class` and `persistent_load` hand back inert stand-ins and record: every import (raw
module and name, in order), every call (REDUCE, INST/OBJ with arguments, a stand-in value
called), every `__new__`, `__setstate__`, item or append on a stand-in, with their arguments
read whole (`code` is the first code-like text among them, at any length). Nothing named by the
file is ever imported, so nothing it names runs; C code still parses hostile bytes, which is why
this runs in the jail. Stream readings go on pickle after pickle (a multi-pickle file, torch's
legacy stream) until the bytes end or a reader fails.

Values. A load's result is walked for text and bytes that hold a pickle themselves, raw, base64
or hex, up to three stages deep (`nested`): they are read the same way, and reported under the
key path that holds them. Text that reads like code is reported too (`code_values`).

Request: `path` (a file of the blobs), `paths` (inputs read in place), `readings` [{file,
offset, length, member, starts, entries, kinds, py_opcodes}] with `file` an index into [path] +
paths; an item with `zip` true is an archive whose pickle records torch's own zip reader hands
out (`zip_records`), each read as torch.load reads data.pkl. Result:
`readings` [{index, kind, start, apart, member (a record of a `zip` item), pickles, end, error,
cut, imports [[module, name, count]], calls [{target, op, count, texts, code}], nested [{key,
encoding, imports, calls}], code_values [{key, text}]}].
"""

from __future__ import annotations

import _compat_pickle
import base64
import binascii
import gc
import io
import itertools
import mmap
import pickle
import re
from collections.abc import Callable

from inspector.core.map_io import MapIO
from inspector.core.progress import CancelToken
from inspector.sandbox.worker.zip_records import torch_pickles
from inspector.scan.code_text import looks_like_code
from inspector.scan.pickles.joblib_arrays import WRAPPER, array_layout

MAX_PICKLES = 10_000  # pickles one stream reading follows (a million tiny ones: the walker)
MAX_TEXTS = 3  # reconstructed calls kept per target
TEXT_LIMIT = 600  # characters of each reconstructed call shown
MAX_NESTED_STAGES = 3
MAX_VALUES = 200_000  # leaves of a loaded value walked for nested pickles
KINDS = ("c", "c-nopeek", "py")
# torch's rebuilds: their arguments are storage ids, sizes and strides, never a user's value
_PLAIN_TARGETS = ("torch._utils.", "persistent_load", "torch._tensor.", "collections.OrderedDict")
MAX_COPY = 256 << 20  # blobs up to this size are read from a copy in io.BytesIO
# opcodes one stream reading by the pure-Python unpickler runs unless the item says (the C
# readers read on): past it the reading is `cut`, and the file is not safe (`readings-budget`)
MAX_PY_OPCODES = 1_000_000


class _Log:
    """What one reading saw, grouped: imports in first-seen order, calls by target."""

    def __init__(self) -> None:
        self.imports: dict[tuple[str, str], int] = {}
        self.calls: dict[tuple[str, str], dict] = {}

    def imported(self, module: str, name: str) -> None:
        key = (module, name)
        self.imports[key] = self.imports.get(key, 0) + 1

    def called(self, target: str, op: str, args: tuple, computed: bool = False) -> None:
        entry = self.calls.get((target, op))
        if entry is None:
            entry = self.calls[(target, op)] = {"target": target, "op": op, "count": 0,
                                                "computed": computed, "texts": [],
                                                "code": None}
        entry["count"] += 1
        if len(entry["texts"]) < MAX_TEXTS:
            text = f"{target}({', '.join(_show(a) for a in args)})"
            if op == "setstate":
                text = f"{target}.__setstate__({', '.join(_show(a) for a in args)})"
            entry["texts"].append(text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…")
        if entry["code"] is None and not target.startswith(_PLAIN_TARGETS):
            entry["code"] = next((s[:300] for s in _strings(args)
                                  if len(s) > 4 and looks_like_code(s)), None)

    def to_json(self) -> dict:
        return {"imports": [[m, n, c] for (m, n), c in self.imports.items()],
                "calls": list(self.calls.values())}


_SCALARS = (int, float, bool, complex, type(None))
_SEQUENCES = (tuple, list, set, frozenset)


def _strings(args) -> list[str]:
    """Every text in a call's arguments, whole (bytes as latin-1), containers followed."""
    out: list[str] = []
    stack = [args]
    seen = 0
    while stack and seen < 100_000:
        value = stack.pop()
        seen += 1
        kind = type(value)
        if kind in _SCALARS or kind is _Value:
            continue
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, (bytes, bytearray)):
            out.append(bytes(value).decode("latin-1"))
        elif isinstance(value, _SEQUENCES):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
    return out


def _show(value, depth: int = 0) -> str:
    """A value as pseudo-Python; a stand-in as the expression that made it."""
    if isinstance(value, (_Value, _Meta)):
        return value._ci_label
    if depth > 3:
        return "…"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_show(v, depth + 1) for v in value[:8])
        more = ", …" if len(value) > 8 else ""
        return f"[{inner}{more}]" if isinstance(value, list) else f"({inner}{more})"
    if isinstance(value, dict):
        items = list(value.items())[:6]
        return "{" + ", ".join(f"{_show(k, depth + 1)}: {_show(v, depth + 1)}"
                               for k, v in items) + (", …}" if len(value) > 6 else "}")
    text = repr(value)
    return text if len(text) <= 300 else text[:290] + "…" + text[-1]


class _Meta(type):
    """The metaclass of a stand-in class: calling the class is recorded, never run."""

    _ci_label: str
    _ci_log: _Log

    def __call__(cls, *args, **kwargs):
        args = args + ((kwargs,) if kwargs else ())
        cls._ci_log.called(cls._ci_label, "call", args)
        return _Value(cls._ci_log, cls._ci_label, args)


class _PlainMeta(_Meta):
    """A torch rebuild (`_PLAIN_TARGETS`): its calls are counted, the first few shown; a
    checkpoint makes tens of thousands of them."""

    def __call__(cls, *args, **kwargs):
        args = args + ((kwargs,) if kwargs else ())
        log = cls._ci_log
        entry = log.calls.get((cls._ci_label, "call"))
        if entry is None or len(entry["texts"]) < MAX_TEXTS:
            log.called(cls._ci_label, "call", args)
        else:
            entry["count"] += 1
        return _Value(log, cls._ci_label, args)


class _Value:
    """An inert object: what a stand-in call returned, or a stand-in class's instance. Whatever
    the unpickler does to it (call it, set its state, add items) is recorded."""

    __slots__ = ("_ci_args", "_ci_log", "_ci_state", "_ci_suffix", "_ci_target")

    def __init__(self, log: _Log, target: str, args: tuple = (), suffix: str = "") -> None:
        self._ci_log, self._ci_target, self._ci_args = log, target, args
        self._ci_state, self._ci_suffix = [], suffix

    @property
    def _ci_label(self) -> str:
        """The expression that made this value, e.g. `os.getcwd()` (built only when shown)."""
        if self._ci_suffix:
            return f"{self._ci_target}{self._ci_suffix}"
        return f"{self._ci_target}({', '.join(_show(a, 2) for a in self._ci_args)})"[:200]

    def __call__(self, *args, **kwargs):
        self._ci_log.called(self._ci_label, "call", args + ((kwargs,) if kwargs else ()), True)
        return _Value(self._ci_log, self._ci_label, args, "(…)")

    def __setstate__(self, state) -> None:
        self._ci_log.called(self._ci_label, "setstate", (state,))
        self._ci_state.append(state)

    def __setitem__(self, key, value) -> None:
        self._ci_state.append((key, value))

    def append(self, value) -> None:
        self._ci_state.append(value)

    def extend(self, values) -> None:
        self._ci_state.extend(values)

    def __reduce__(self):  # never pickled back; a stand-in has no real state
        raise TypeError("stand-in")


def _stand_in_class(log: _Log, module: str, name: str) -> type:
    """A class named for the import: NEWOBJ needs a type, and `cls.__new__` is recorded."""
    label = f"{module}.{name}"

    def new(cls, *args, **kwargs):
        if args or kwargs:
            log.called(label, "new", args + ((kwargs,) if kwargs else ()))
        return _Value(log, label, args, ".__new__(…)")

    meta = _PlainMeta if label.startswith(_PLAIN_TARGETS) else _Meta
    # a type's name cannot hold a NUL (type() raises, and the reading would stop where the
    # real one goes on); the import is recorded as read
    title = name.rsplit(".", 1)[-1].replace("\0", "?") or "_"
    return meta(title, (), {"__new__": new, "_ci_label": label, "_ci_log": log})


def _reader_class(base: type, persistent: bool) -> type:
    class Recording(base):
        """`base` with a recording find_class (and persistent_load where the loader has one:
        torch's; plain pickle.load refuses a persistent id)."""

        def __init__(self, file, log: _Log) -> None:
            super().__init__(file)
            self._ci_log, self._ci_file = log, file
            self._ci_classes: dict[tuple[str, str], type] = {}

        def find_class(self, module, name):
            # Python 2 names as the real find_class maps them for protocols 0-2 (applied
            # always: under protocol 3+ the unmapped name names no module at all)
            key = _compat_pickle.NAME_MAPPING.get((module, name)) or (
                _compat_pickle.IMPORT_MAPPING.get(module, module), name)
            key = (str(key[0]), str(key[1]))
            log = self._ci_log
            log.imported(*key)
            cls = self._ci_classes.get(key)
            if cls is None:
                cls = self._ci_classes[key] = _stand_in_class(log, *key)
            return cls

        if persistent:
            def persistent_load(self, pid):
                return _Value(self._ci_log, "persistent_load", (pid,))

    return Recording


class _Spent(Exception):
    """The pure-Python reading's opcode budget is spent."""


class _CountedDispatch(dict):
    """pickle._Unpickler's dispatch table, counting the opcodes one reading runs: the pure-
    Python reader takes about 1 µs an opcode, and 10 million one-byte opcodes come from a
    400-byte bzip2 stream."""

    def __init__(self, budget: int) -> None:
        super().__init__(pickle._Unpickler.dispatch)
        self.left = budget

    def __getitem__(self, key):
        self.left -= 1
        if self.left < 0:
            raise _Spent
        return dict.__getitem__(self, key)


def _joblib_build(reader) -> None:
    """BUILD as joblib's NumpyUnpickler runs it: after the state is set on a NumpyArrayWrapper,
    the array is read from the file right there (`joblib_arrays.array_layout`): its raw bytes
    (after a padding byte and its padding) are stepped over, and an object array's own pickle
    is read by a fresh C unpickler, as joblib's `pickle.load(file_handle)` reads it."""
    pickle._Unpickler.load_build(reader)
    top = reader.stack[-1]
    if type(top) is not _Value or top._ci_target != WRAPPER or not top._ci_state:
        return
    state, log, fh = top._ci_state[-1], reader._ci_log, reader._ci_file
    dtype = state.get("dtype") if isinstance(state, dict) else None
    detail = ((dtype._ci_args, dtype._ci_state[-1]) if dtype._ci_state else dtype._ci_args
              ) if type(dtype) is _Value else None
    found = array_layout(state, detail) if isinstance(state, dict) else "no state dict"
    if isinstance(found, str):
        raise pickle.UnpicklingError(f"a joblib array joblib cannot read: {found}")
    if found.nbytes is None:
        reader.stack[-1] = _READERS[("c", False)](fh, log).load()
        return
    pad = fh.read(1) if found.aligned else b"\0"
    end = fh.tell() + (pad[0] if pad else 0) + found.nbytes
    if not pad or end > fh.seek(0, 2):
        raise pickle.UnpicklingError("a joblib array's data is cut short")
    fh.seek(end)
    reader.stack[-1] = _Value(log, "numpy.ndarray", (), "(joblib's array data)")


_READERS = {(kind, persistent): _reader_class(
    pickle._Unpickler if kind == "py" else pickle.Unpickler, persistent)
    for kind in KINDS for persistent in (False, True)}


def read_stream(data, start: int, kind: str, persistent: bool = True,
                py_opcodes: int = MAX_PY_OPCODES) -> tuple[dict, list]:
    """One reading of the pickles from `start` by reader `kind`; returns its record (with
    `boundaries`, where each pickle it read ended) and the values loaded."""
    log = _Log()
    if kind == "c":
        fh = io.BufferedReader(MapIO(data, start), 1 << 16)
    elif len(data) <= MAX_COPY:  # io.BytesIO is C: a Python readinto per opcode is not
        fh = io.BytesIO(bytes(data))
        fh.seek(start)
    else:
        fh = MapIO(data, start)
    reader = _READERS[(kind, persistent)](fh, log)
    if kind == "py":
        reader.dispatch = _CountedDispatch(py_opcodes)
        reader.dispatch[pickle.BUILD[0]] = _joblib_build
    tell = fh.tell
    values, error, pickles, end, boundaries, cut = [], None, 0, start, set(), False
    while pickles < MAX_PICKLES:
        try:
            values.append(reader.load())
        except EOFError as exc:
            if pickles == 0:
                error = f"EOFError: {exc}"[:300]
            break
        except _Spent:
            error, cut = f"stopped after {py_opcodes:,} opcodes", True
            break
        except (Exception, RecursionError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            break
        pickles += 1
        end = tell()
        boundaries.add(end)
        if end >= len(data):
            break
    fh.close()
    record = {"kind": kind, "start": start, "pickles": pickles, "end": end, "error": error,
              "cut": cut, **log.to_json()}
    return record, values, boundaries


_HEX = re.compile(rb"\A(?:[0-9a-fA-F]{2})+\Z")
_B64 = re.compile(rb"\A[A-Za-z0-9+/=\s_-]+\Z")


def _decodings(raw: bytes) -> list[tuple[str, bytes]]:
    """What a text or bytes value may hold once decoded: itself, hex, base64."""
    out = [("raw", raw)]
    stripped = raw.strip()
    if len(stripped) >= 8 and _HEX.match(stripped):
        out.append(("hex", binascii.unhexlify(stripped)))
    elif len(stripped) >= 8 and _B64.match(stripped):
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                out.append(("base64", decode(stripped + b"=" * (-len(stripped) % 4))))
                break
            except (binascii.Error, ValueError):
                continue
    return out


def _leaves(value, key: str, out: list, seen: set, depth: int = 0) -> None:
    """(key path, text or bytes) of every leaf of a loaded value, stand-ins' state included."""
    if len(out) >= MAX_VALUES or depth > 50 or id(value) in seen:
        return
    if isinstance(value, (str, bytes, bytearray)):
        out.append((key, value))
        return
    if isinstance(value, (list, tuple, set, frozenset, dict, _Value)):
        seen.add(id(value))
    if isinstance(value, dict):
        for k, v in list(value.items())[:MAX_VALUES]:
            if _holds_leaves(v):
                _leaves(v, f"{key}.{k}" if key else str(k), out, seen, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, v in enumerate(list(value)[:MAX_VALUES]):
            if _holds_leaves(v):
                _leaves(v, f"{key}[{i}]", out, seen, depth + 1)
    elif isinstance(value, _Value) and not value._ci_target.startswith(_PLAIN_TARGETS):
        for i, v in enumerate(value._ci_args):
            _leaves(v, f"{key}<arg{i}>", out, seen, depth + 1)
        for v in value._ci_state:
            _leaves(v, key, out, seen, depth + 1)


def _holds_leaves(value) -> bool:
    """Whether `_leaves` can find anything in `value`: a number or one of torch's rebuilds (a
    checkpoint's every tensor) holds no text, so its key path is never built."""
    if type(value) in _SCALARS:
        return False
    return not (isinstance(value, _Value) and value._ci_target.startswith(_PLAIN_TARGETS))


def _looks_pickled(raw: bytes) -> bool:
    return len(raw) > 2 and ((raw[0] == 0x80 and raw[1] <= 5) or raw[-1:] == b".")


def nested(values: list, stage: int = 1) -> tuple[list, list]:
    """Pickles held in values (raw, hex, base64, in stages), each read by the C unpickler;
    and text values that read like code."""
    found, code = [], []
    leaves: list = []
    seen: set = set()
    for i, v in enumerate(values):
        _leaves(v, "" if len(values) == 1 else f"<pickle {i}>", leaves, seen)
    for key, leaf in leaves:
        if len(leaf) < 8:
            continue
        raw = leaf.encode("latin-1", "replace") if isinstance(leaf, str) else bytes(leaf)
        if isinstance(leaf, str) and len(leaf) > 8 and looks_like_code(leaf) and len(code) < 20:
            code.append({"key": key, "text": leaf[:300]})
        for encoding, blob in _decodings(raw):
            if not _looks_pickled(blob):
                continue
            record, inner, _ = read_stream(blob, 0, "c")
            if record["pickles"] == 0 and not record["imports"]:
                continue
            found.append({"key": key, "encoding": encoding, "stage": stage,
                          "imports": record["imports"], "calls": record["calls"],
                          "error": record["error"]})
            if stage < MAX_NESTED_STAGES:
                deeper, more_code = nested(inner, stage + 1)
                found += [{**d, "key": f"{key}{d['key'] and '.' + d['key']}",
                           "encoding": f"{encoding}+{d['encoding']}"} for d in deeper]
                code += more_code
            break
        else:
            # text holding an encoded pickle inside an encoding: hex of base64, base64 of hex
            if stage < MAX_NESTED_STAGES and isinstance(leaf, (str, bytes)):
                for encoding, blob in _decodings(raw)[1:]:
                    deeper, _ = nested([blob], stage + 1)
                    found += [{**d, "key": key, "encoding": f"{encoding}+{d['encoding']}"}
                              for d in deeper]
    return found, code


def _readings(index: int, item: dict, data, framed: bool) -> list[dict]:
    """Every reader kind from every start of one blob; a start where an earlier stream of the
    same kind already ended a pickle is that stream's reading, not read again. A start that is
    no entry (`entries`: where a loader begins) and that no stream of that kind reached is
    read out of caution only: its record is `apart` (no loader's reading gets there)."""
    out = []
    reached: dict[str, set] = {}
    walked: set[int] = set()
    starts = set(item.get("starts") or [0])
    entries = set(item.get("entries", starts))
    for start in sorted(starts):
        for kind in item.get("kinds") or KINDS:
            # joblib reads a file (or a decoded stream) from its first byte only; the C
            # readers also start where a format puts a pickle (an .npy's object payload)
            if (kind == "c-nopeek" and not framed) or (kind == "py" and start != 0):
                continue
            if start in reached.get(kind, ()):
                continue
            record, values, boundaries = read_stream(
                data, start, kind, bool(item.get("persistent", True)),
                int(item.get("py_opcodes") or MAX_PY_OPCODES))
            reached.setdefault(kind, set()).update(boundaries)
            # values are walked once per start: every reader rebuilt the same ones
            fresh = values and start not in walked
            walked.add(start)
            record["nested"], record["code_values"] = nested(values) if fresh else ([], [])
            record["apart"] = start not in entries
            out.append({"index": index, **record})
    return out


def _archive_readings(index: int, item: dict, data) -> list[dict]:
    """The readings of each pickle record torch's own zip reader hands out of the archive
    `data` (`zip_records`), as torch.load reads data.pkl: the C unpickler from a copy, with a
    persistent_load; each record names its member."""
    out = []
    for name, record in torch_pickles(data):
        part = {**item, "starts": [0], "entries": [0], "kinds": ["c", "c-nopeek"],
                "persistent": True}
        out += [{**r, "member": name}
                for r in _readings(index, part, record, may_frame(record, 0, len(record)))]
    return out


# A FRAME opcode (0x95) with an 8-byte length that fits in what follows: its top bytes are 0
_FRAME_HEAD = re.compile(rb"\x95[\x00-\xff]{5}\x00\x00\x00", re.DOTALL)
MAX_FRAME_CANDIDATES = 1000


def may_frame(buf, start: int, end: int) -> bool:
    """Whether a C unpickler could execute a FRAME in `buf[start:end]` that the rest holds.

    peek() changes a reading only at an executed FRAME: without one, the C reader without
    peek() reads what the buffered one reads. A FRAME whose length runs past the end fails
    both alike (truncated), right there, with the same imports and calls seen before it
    (checked over 35,000 mutated pickles with such frames: no difference), so only a 0x95
    byte followed by a length that fits counts; past MAX_FRAME_CANDIDATES it is assumed.

    The search goes FRAME_WINDOW bytes at a time and gives a mapped file's pages back behind
    it: a reading of a whole 1.1 GB archive otherwise kept every page resident (the
    `convert` job's largest process, 1,088 MiB)."""
    found, low = 0, start
    while low < end:
        high = min(end, low + FRAME_WINDOW)
        resume = high
        # a head in [low, high) with its 8 length bytes, which may lie in the next window
        for match in _FRAME_HEAD.finditer(buf, low, min(end, high + 8)):
            head = match.start()
            if head >= high:
                break
            if found >= MAX_FRAME_CANDIDATES or int.from_bytes(
                    buf[head + 1:head + 9], "little") <= end - head - 9:
                return True
            found += 1
            resume = max(high, match.end())  # matches do not overlap, as in one search
        _give_back(buf, low, resume)
        low = resume
    return False


FRAME_WINDOW = 16 << 20
"""Bytes `may_frame` searches at a time."""


def _give_back(buf, start: int, stop: int) -> None:
    """Drop the pages of `buf[start:stop]` when it is a read-only file mapping (lossless: a
    later read maps them again from the page cache)."""
    if isinstance(buf, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED") and stop > start:
        first = start // mmap.PAGESIZE * mmap.PAGESIZE
        buf.madvise(mmap.MADV_DONTNEED, first, min(stop, len(buf)) - first)


def dry_run(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Every reading of the request, by every reader kind it names: those of the start line,
    then those of each later part (a streamed request: held bytes of later parts are appended
    to the blob file, which is mapped again when a reading reaches past its map)."""
    files = [request["path"], *request.get("paths", ())]
    out = []
    maps: dict[int, object] = {}
    # A reading allocates an object or two per opcode, and cyclic GC passes over them cost
    # more than the reading itself (a 5,000-tensor data.pkl: 170 ms -> 70 ms without).
    # Collection runs after each blob instead, over what that blob left, so garbage cycles a
    # hostile stream makes are freed blob by blob; the worker's own objects are frozen first.
    gc.freeze()
    index = parts = received = 0
    try:
        for part in itertools.chain([request], request.get("_parts", ())):
            parts += 1
            items = part.get("readings", [])
            received += len(items)  # a streamed request's total grows part by part
            for item in items:
                cancel.check()
                offset, length = int(item["offset"]), int(item["length"])
                buf = _mapped(maps, files, int(item["file"]), offset + length)
                gc.disable()
                try:
                    with memoryview(buf) as whole, whole[offset:offset + length] as data:
                        out += (_archive_readings(index, item, data) if item.get("zip") else
                                _readings(index, item, data, may_frame(buf, offset,
                                                                       offset + length)))
                finally:
                    gc.enable()
                    gc.collect(0)  # all this blob allocated is still in the youngest generation
                index += 1
                emit({"type": "progress", "stage": "dry-run", "done": index,
                      "total": received})
    finally:
        for m in maps.values():
            if isinstance(m, mmap.mmap):
                m.close()
    return {"readings": out, "parts": parts}


def _mapped(maps: dict[int, object], files: list[str], f: int, end: int):
    """File `f` of the request mapped for reading, mapped again when `end` lies past its
    map (the blob file grows while a streamed request's parts arrive)."""
    old = maps.get(f)
    if old is not None and len(old) >= end:
        return old
    with open(files[f], "rb") as fh:
        size = fh.seek(0, 2)
        if old is not None and len(old) >= size:
            return old
        if isinstance(old, mmap.mmap):
            old.close()
        maps[f] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    return maps[f]
