"""Static pickle walker: emulates the unpickler's stack and memo without executing anything.

It records every import (GLOBAL, INST, STACK_GLOBAL, EXT1/2/4), every call (REDUCE, NEWOBJ,
NEWOBJ_EX, OBJ, INST, BUILD) with the string arguments it can see, persistent-id storage
references, container operations on the wrong kind of object, and the reasons
`torch.load(weights_only=True)` would refuse the stream (opcodes outside its set, calls it
does not allow, missing memo keys, ...). Framing follows CPython's C unpickler: FRAME only
requires its length to be available and opcodes are then read linearly, so a frame length that
disagrees with the opcodes inside cannot hide anything. Work is bounded by `Limits`.
"""

from __future__ import annotations

import codecs
import io
import struct
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from dataclasses import dataclass, field
from typing import NamedTuple

from inspector.core.vocabulary import Severity
from inspector.scan.pickles.fastpath import UNIT_OPCODES, match_entries, match_unit

OPCODE_NAMES: dict[int, str] = {
    0x28: "MARK", 0x2E: "STOP", 0x30: "POP", 0x31: "POP_MARK", 0x32: "DUP", 0x46: "FLOAT",
    0x49: "INT", 0x4A: "BININT", 0x4B: "BININT1", 0x4C: "LONG", 0x4D: "BININT2", 0x4E: "NONE",
    0x50: "PERSID", 0x51: "BINPERSID", 0x52: "REDUCE", 0x53: "STRING", 0x54: "BINSTRING",
    0x55: "SHORT_BINSTRING", 0x56: "UNICODE", 0x58: "BINUNICODE", 0x61: "APPEND", 0x62: "BUILD",
    0x63: "GLOBAL", 0x64: "DICT", 0x7D: "EMPTY_DICT", 0x65: "APPENDS", 0x67: "GET",
    0x68: "BINGET", 0x69: "INST", 0x6A: "LONG_BINGET", 0x6C: "LIST", 0x5D: "EMPTY_LIST",
    0x6F: "OBJ", 0x70: "PUT", 0x71: "BINPUT", 0x72: "LONG_BINPUT", 0x73: "SETITEM",
    0x74: "TUPLE", 0x29: "EMPTY_TUPLE", 0x75: "SETITEMS", 0x47: "BINFLOAT", 0x80: "PROTO",
    0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1", 0x86: "TUPLE2",
    0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8A: "LONG1", 0x8B: "LONG4",
    0x42: "BINBYTES", 0x43: "SHORT_BINBYTES", 0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8",
    0x8E: "BINBYTES8", 0x8F: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
    0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8",
    0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}
OPCODE_BYTES = {name: code for code, name in OPCODE_NAMES.items()}

_BIG = 1 << 16  # strings and bytes longer than this are kept as a length only


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


@dataclass(slots=True)
class Call:
    """A call the unpickler would make: callable (None when not a plain import) and its text."""

    func: GlobalRef | None
    opcode: str
    offset: int
    strings: list[str]
    args: str = ""  # the arguments as pseudo-Python, e.g. `"curl x | sh", 1`


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


class _Obj:
    """Result of a call; `func` is the import that produced it (None when unknown)."""

    __slots__ = ("func",)

    def __init__(self, func: GlobalRef | None) -> None:
        self.func = func


class _Seq:
    """A list, dict or set under construction; keeps a few strings for the code-text check."""

    __slots__ = ("kind", "strings")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.strings: list[str] = []


class _Big:
    """A string or bytes value too long to keep."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class _Unknown:
    __slots__ = ()


UNKNOWN = _Unknown()
_MISSING = object()
# Opcodes torch's weights-only unpickler implements; overridden from the installed torch.
WEIGHTS_ONLY_OPCODES_DEFAULT = frozenset(
    OPCODE_BYTES[n] for n in (
        "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
        "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE",
        "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2",
        "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET",
        "BINPUT", "LONG_BINPUT", "LONG1", "PROTO", "STOP",
    )
)


class _Truncated(Exception):
    pass


def _strings_of(value: object, out: list[str], budget: int = 16, depth: int = 0) -> None:
    """Collect the text inside a call's arguments (tuples, lists) for the code-text check."""
    if len(out) >= budget:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, tuple):
        if depth < 8:  # hostile files nest tuples thousands deep
            for v in value:
                _strings_of(v, out, budget, depth + 1)
    elif isinstance(value, _Seq):
        out.extend(value.strings[: budget - len(out)])
    elif isinstance(value, bytes):
        out.append(value.decode("latin-1"))


def render(value: object, depth: int = 0) -> str:
    """A walked value as short pseudo-Python: literals as repr, a call's result as `f(…)`."""
    if isinstance(value, str | bytes):
        text = repr(value)
        return text if len(text) <= 200 else text[:190] + "…" + text[-1]
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, GlobalRef):
        return value.key
    if isinstance(value, _Obj):
        return f"{value.func.key}(…)" if value.func else "<computed object>"
    if isinstance(value, _Big):
        return f"<{value.size} bytes>"
    if isinstance(value, _Seq):
        inner = ", ".join(render(s, depth + 1) for s in value.strings[:3])
        return {"list": f"[{inner}…]", "dict": f"{{{inner}…}}"}.get(value.kind,
                                                                      f"{value.kind}({inner}…)")
    if isinstance(value, tuple):
        if depth > 3:
            return "(…)"
        inner = ", ".join(render(v, depth + 1) for v in value[:6])
        return f"({inner}{', …' if len(value) > 6 else ',' if len(value) == 1 else ''})"
    return "…"


def _decode_text(raw: bytes) -> object:
    """Text of STRING/BINSTRING/SHORT_BINSTRING as Python 3's default ASCII decoding sees it."""
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return raw


def _kind(value: object) -> str:
    """What a container opcode is applied to: dict, list, set, object, unknown or a type name."""
    if isinstance(value, _Seq):
        return value.kind
    if isinstance(value, _Obj):
        if value.func is None:
            return "object"
        return {"collections.OrderedDict": "dict", "collections.Counter": "dict"}.get(
            value.func.key, "object")
    if value is UNKNOWN:
        return "unknown"
    return type(value).__name__


def _describe(value: object) -> str:
    """Stable text for a persistent-id field (no object addresses)."""
    if isinstance(value, GlobalRef):
        return value.key
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if type(value) is int:
        return str(value)
    return f"<{_kind(value)}>"


def _fix_import(module: str, name: str, proto: int) -> tuple[str, str]:
    """Apply Python 2 name mapping the way pickle does for protocol < 3."""
    if proto < 3:
        if (module, name) in NAME_MAPPING:
            return NAME_MAPPING[(module, name)]
        if module in IMPORT_MAPPING:
            return IMPORT_MAPPING[module], name
    return module, name


def scan_pickle(
    data: bytes,
    start: int = 0,
    *,
    allowed: frozenset[str] = frozenset(),
    wo_opcodes: frozenset[int] = WEIGHTS_ONLY_OPCODES_DEFAULT,
    limits: Limits = Limits(),
    fast: bool = True,
    through: bool = False,
    unbuffered: bool = False,
) -> PickleScan:
    """Walk one pickle stream from `start` to its STOP (or the first undecodable byte).

    `fast` lets torch's per-tensor opcode run be recognised in one step (same result).
    `through` walks on past each STOP into the next pickle, each with a fresh stack and memo,
    as repeated `pickle.load` calls read them: one walk for thousands of back-to-back pickles.
    `unbuffered` reads as CPython's C unpickler reads a file object without `peek()` (an
    io.BytesIO, which torch.load hands every zip's data.pkl): after a FRAME, an opcode whose
    argument runs past the frame's end drops the frame's remaining bytes and reads afresh after
    it (`_unbuffered_splice`). A walk that finds a frame ending inside an opcode or past STOP
    sets `frame_misaligned` (and an issue), and the caller walks the stream that way too.
    """
    res = PickleScan(start=start)
    refs, calls, issues, blockers = res.globals, res.calls, res.issues, res.wo_blockers
    stack: list = []
    metastack: list[list] = []
    memo: dict[int, object] = {}
    proto = 0
    pos = start
    n = len(data)
    count = 0
    max_ops = limits.max_opcodes
    unpack_from = struct.unpack_from
    reported_ops: set[int] = set()
    fast = fast and wo_opcodes >= UNIT_OPCODES
    shared_objs: dict = {}  # the fast path's call results, one per callable
    storages: list[tuple] = []  # plain tuples while walking; StorageRefs at the end
    max_memo, max_stack = limits.max_memo, limits.max_stack
    frame_end = 0  # end of the last FRAME's bytes while opcodes are read from inside it
    removed = 0  # `unbuffered`: bytes dropped so far (positions after a drop shift by this)
    if unbuffered:
        fast = False

    def note(code: str, message: str, offset: int, dangerous: bool = False) -> None:
        if len(issues) < 1000:
            issues.append(Issue(code, message, offset, dangerous))

    def block(reason: str) -> None:
        if len(blockers) < 100 and reason not in blockers:
            blockers.append(reason)

    def misaligned(why: str) -> None:
        if not res.frame_misaligned:
            res.frame_misaligned = True
            note("frame-misaligned", f"{why}: a reader without peek() (io.BytesIO, which "
                 "torch.load uses for data.pkl) drops or skips bytes there and reads another "
                 "pickle; that reading was scanned too", op_at)

    def pop() -> object:
        if stack:
            return stack.pop()
        note("stack-underflow", "opcode pops from an empty stack", op_at)
        return UNKNOWN

    def pop_mark() -> list:
        nonlocal stack
        if not metastack:
            note("missing-mark", "opcode needs a MARK that was never pushed", op_at)
            items, stack = stack, []
            return items
        items = stack
        stack = metastack.pop()
        return items

    def take(k: int) -> int:
        nonlocal pos
        p = pos
        if p + k > n:
            raise _Truncated
        pos = p + k
        return p

    def line() -> bytes:
        nonlocal pos
        j = data.find(b"\n", pos)
        if j < 0:
            raise _Truncated
        raw = data[pos:j]
        pos = j + 1
        return raw

    def text(k: int) -> object:
        p = take(k)
        if k > _BIG:
            return _Big(k)
        return str(data[p:p + k], "utf-8", "surrogatepass")

    def binary(k: int) -> object:
        p = take(k)
        return _Big(k) if k > _BIG else data[p:p + k]

    def add_global(module: object, name: object, opname: str) -> GlobalRef | None:
        if not isinstance(module, str) or not isinstance(name, str):
            note("unresolved-import", f"{opname} with operands that are not plain text "
                 f"({type(module).__name__}, {type(name).__name__})", op_at, True)
            return None
        module, name = _fix_import(module, name, proto)
        ref = GlobalRef(module, name, opname, op_at)
        if len(refs) < 100_000:
            refs.append(ref)
        return ref

    def add_call(func: object, args: object, opname: str) -> _Obj:
        fref = func if isinstance(func, GlobalRef) else None
        if fref is not None and fref.key in allowed:
            return _Obj(fref)  # torch's own rebuild functions: nothing more to learn
        if fref is None:
            note("indirect-call", f"{opname} calls a value computed while loading "
                 "(not a plain import), which cannot be checked statically", op_at, True)
            block(f"{opname} on a value that is not an allowed global")
        strings: list[str] = []
        _strings_of(args, strings)
        if len(calls) < 200_000:
            shown = render(args)
            if isinstance(args, tuple):
                shown = shown[1:-1].removesuffix(",")
            calls.append(Call(fref, opname, op_at, strings, shown[:400]))
        return _Obj(fref)

    op_at = start
    try:
        while pos < n:
            count += 1
            if count > max_ops:
                note("limit", f"stopped after {max_ops} opcodes", pos)
                break
            if frame_end and pos >= frame_end:
                if pos > frame_end and not unbuffered:
                    misaligned("an opcode's argument runs past the end of its FRAME")
                frame_end = 0
            op_at = pos
            op = data[pos]
            pos += 1
            if frame_end:
                if unbuffered:
                    spliced, cut = _unbuffered_splice(data, pos, op, frame_end)
                    if cut:
                        data, n, removed, frame_end = spliced, len(spliced), removed + cut, 0
                else:
                    fast = False  # the fast path would step over the frame's end unchecked
            if op not in wo_opcodes and op not in reported_ops:
                reported_ops.add(op)
                block(f"opcode {OPCODE_NAMES.get(op, hex(op))} is not supported")
            if fast and op == 0x58:
                end, ops = match_entries(data, op_at, memo, allowed, GlobalRef, _Obj,
                                         shared_objs, stack.append, storages.append)
                if ops:
                    pos = end
                    count += ops - 1
                    continue
            if fast and (op == 0x68 or op == 0x6A) and data[pos + (1 if op == 0x68 else 4)] == 0x28:
                found = match_unit(data, op_at, memo, allowed, GlobalRef, _Obj, shared_objs)
                if found is not None:
                    pos, value, ops, storage = found
                    stack.append(value)
                    storages.append(storage)
                    count += ops - 1
                    continue
            if op == 0x68:  # BINGET
                key = data[pos]
                pos += 1
                value = memo.get(key, _MISSING)
                if value is _MISSING:
                    note("bad-memo-key", f"BINGET of memo key {key} that was never stored", op_at)
                    block("memo key never stored")
                    value = UNKNOWN
                stack.append(value)
            elif op == 0x71:  # BINPUT
                memo[data[pos]] = stack[-1] if stack else UNKNOWN
                pos += 1
            elif op == 0x58:  # BINUNICODE
                (k,) = unpack_from("<I", data, pos)
                pos += 4
                if k <= _BIG and pos + k <= n:
                    stack.append(str(data[pos:pos + k], "utf-8", "surrogatepass"))
                    pos += k
                else:
                    stack.append(text(k))
            elif op == 0x72:  # LONG_BINPUT
                (key,) = unpack_from("<I", data, pos)
                pos += 4
                memo[key] = stack[-1] if stack else UNKNOWN
            elif op == 0x6A:  # LONG_BINGET
                (key,) = unpack_from("<I", data, pos)
                pos += 4
                value = memo.get(key, _MISSING)
                if value is _MISSING:
                    note("bad-memo-key", f"LONG_BINGET of memo key {key} never stored", op_at)
                    block("memo key never stored")
                    value = UNKNOWN
                stack.append(value)
            elif op == 0x28:  # MARK
                if len(metastack) >= limits.max_depth:
                    note("limit", "MARK nesting deeper than the scan bound", op_at)
                    break
                metastack.append(stack)
                stack = []
            elif op == 0x4B:  # BININT1
                stack.append(data[pos])
                pos += 1
            elif op == 0x74:  # TUPLE
                items = pop_mark()  # before touching `stack`: pop_mark rebinds it
                stack.append(tuple(items))
            elif op == 0x85:  # TUPLE1
                stack.append((stack.pop() if stack else pop(),))
            elif op == 0x86:  # TUPLE2
                b = stack.pop() if stack else pop()
                stack.append((stack.pop() if stack else pop(), b))
            elif op == 0x87:  # TUPLE3
                c = stack.pop() if stack else pop()
                b = stack.pop() if stack else pop()
                stack.append((stack.pop() if stack else pop(), b, c))
            elif op == 0x52:  # REDUCE
                args = stack.pop() if stack else pop()
                func = stack.pop() if stack else pop()
                if isinstance(func, GlobalRef) and func.key not in allowed:
                    block(f"REDUCE of {func.key}")
                stack.append(add_call(func, args, "REDUCE"))
            elif op == 0x51 or op == 0x50:  # BINPERSID, PERSID
                pid = pop() if op == 0x51 else _decode_text(line())
                if op == 0x50:
                    block("PERSID is not supported")
                if (
                    isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage")
                ):
                    numel = pid[4] if type(pid[4]) is int else -1
                    storages.append((_describe(pid[1]), _describe(pid[2]), _describe(pid[3]),
                                     numel, op_at))
                elif isinstance(pid, tuple) and pid and pid[0] not in ("storage", b"storage"):
                    block("persistent id that is not a storage")
                stack.append(_Obj(None))
            elif op == 0x89 or op == 0x88:  # NEWFALSE, NEWTRUE
                stack.append(op == 0x88)
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op == 0x7D:  # EMPTY_DICT
                stack.append(_Seq("dict"))
            elif op == 0x5D:  # EMPTY_LIST
                stack.append(_Seq("list"))
            elif op == 0x75 or op == 0x73:  # SETITEMS, SETITEM
                items = pop_mark() if op == 0x75 else [pop(), pop()][::-1]
                target = stack[-1] if stack else UNKNOWN
                kind = _kind(target)
                if kind not in ("dict", "unknown"):
                    name = "SETITEMS" if op == 0x75 else "SETITEM"
                    if kind == "object":
                        block(f"{name} on an object that is not a dict")
                    else:
                        note("container-type-confusion", f"{name} on a {kind}, not a dict",
                             op_at, True)
                        block(f"{name} on a {kind}")
                if isinstance(target, _Seq) and len(target.strings) < 16:
                    _strings_of(tuple(items), target.strings)
            elif op == 0x4A:  # BININT
                stack.append(unpack_from("<i", data, take(4))[0])
            elif op == 0x4D:  # BININT2
                stack.append(unpack_from("<H", data, take(2))[0])
            elif op == 0x63 or op == 0x69:  # GLOBAL, INST
                module = str(line(), "utf-8")
                name = str(line(), "utf-8")
                opname = "GLOBAL" if op == 0x63 else "INST"
                ref = add_global(module, name, opname)
                if op == 0x63:
                    stack.append(ref)
                else:
                    args = tuple(pop_mark())
                    block(f"INST of {module}.{name}")
                    stack.append(add_call(ref, args, "INST"))
            elif op == 0x62:  # BUILD
                state = pop()
                inst = stack[-1] if stack else UNKNOWN
                func = inst.func if isinstance(inst, _Obj) else None
                if isinstance(inst, _Obj) and inst.func is not None:
                    if inst.func.key not in allowed:
                        block(f"BUILD of {inst.func.key}")
                    strings: list[str] = []
                    _strings_of(state, strings)
                    if strings:
                        calls.append(Call(func, "BUILD", op_at, strings))
                elif not isinstance(inst, _Obj):
                    block(f"BUILD on a {_kind(inst)}")
            elif op == 0x61 or op == 0x65:  # APPEND, APPENDS
                items = [pop()] if op == 0x61 else pop_mark()
                target = stack[-1] if stack else UNKNOWN
                kind = _kind(target)
                if kind != "list":
                    name = "APPEND" if op == 0x61 else "APPENDS"
                    block(f"{name} on a {kind}")
                    if kind not in ("object", "unknown"):
                        note("container-type-confusion", f"{name} on a {kind}, not a list",
                             op_at, True)
                if isinstance(target, _Seq) and len(target.strings) < 16:
                    _strings_of(tuple(items), target.strings)
            elif op == 0x4E:  # NONE
                stack.append(None)
            elif op == 0x47:  # BINFLOAT
                stack.append(unpack_from(">d", data, take(8))[0])
            elif op == 0x80:  # PROTO
                proto = data[take(1)]
                res.protocol = proto
                if proto > 5:
                    note("bad-protocol", f"unsupported pickle protocol {proto}", op_at)
            elif op == 0x2E:  # STOP
                pop()
                res.stopped = True
                if frame_end > pos:
                    if not unbuffered:
                        misaligned("its FRAME runs past STOP")
                    res.next_start = frame_end + removed
                if not through or pos >= n:
                    break
                res.count += 1
                res.stopped = False
                stack, metastack, memo, proto = [], [], {}, 0
            elif op == 0x95:  # FRAME: C unpickler only checks the bytes exist, then reads on
                (k,) = unpack_from("<Q", data, take(8))
                if pos + k > n:
                    raise _Truncated
                if frame_end and pos + k > frame_end and not unbuffered:
                    misaligned("a FRAME runs past the end of the FRAME it lies in")
                frame_end = max(frame_end, pos + k)
            elif op == 0x8C:  # SHORT_BINUNICODE
                stack.append(text(data[take(1)]))
            elif op == 0x94:  # MEMOIZE
                memo[len(memo)] = stack[-1] if stack else UNKNOWN
            elif op == 0x93:  # STACK_GLOBAL
                name = pop()
                module = pop()
                stack.append(add_global(module, name, "STACK_GLOBAL"))
            elif op == 0x81:  # NEWOBJ
                args = pop()
                cls = pop()
                if isinstance(cls, GlobalRef) and cls.key not in allowed:
                    block(f"NEWOBJ of {cls.key}")
                stack.append(add_call(cls, args, "NEWOBJ"))
            elif op == 0x92:  # NEWOBJ_EX
                kwargs = pop()
                args = pop()
                cls = pop()
                stack.append(add_call(cls, (args, kwargs), "NEWOBJ_EX"))
            elif op == 0x6F:  # OBJ
                items = pop_mark()
                cls = items[0] if items else UNKNOWN
                stack.append(add_call(cls, tuple(items[1:]), "OBJ"))
            elif op == 0x82 or op == 0x83 or op == 0x84:  # EXT1, EXT2, EXT4
                width = {0x82: 1, 0x83: 2, 0x84: 4}[op]
                code = int.from_bytes(data[take(width) : pos], "little")
                note("unresolved-import", f"EXT code {code} imports whatever the copyreg "
                     "extension registry maps it to, which cannot be known statically", op_at,
                     True)
                stack.append(UNKNOWN)
            elif op == 0x30:  # POP
                if stack:
                    stack.pop()
                else:
                    pop_mark()
            elif op == 0x31:  # POP_MARK
                pop_mark()
            elif op == 0x32:  # DUP
                stack.append(stack[-1] if stack else UNKNOWN)
            elif op == 0x8A:  # LONG1
                k = data[take(1)]
                stack.append(int.from_bytes(data[take(k) : pos], "little", signed=True))
            elif op == 0x8B:  # LONG4
                (k,) = unpack_from("<i", data, take(4))
                if k < 0:
                    raise _Truncated
                take(k)
                stack.append(0)
            elif op == 0x55:  # SHORT_BINSTRING
                k = data[take(1)]
                p = take(k)
                stack.append(_decode_text(data[p:p + k]))
            elif op == 0x54:  # BINSTRING
                (k,) = unpack_from("<i", data, take(4))
                if k < 0:
                    raise _Truncated
                value = binary(k)
                stack.append(_decode_text(value) if isinstance(value, bytes) else value)
            elif op == 0x53:  # STRING
                raw = line().rstrip(b"\r")
                if len(raw) < 2 or raw[0] != raw[-1] or raw[:1] not in (b"'", b'"'):
                    note("malformed", "STRING argument is not quoted", op_at)
                    stack.append(UNKNOWN)
                else:
                    stack.append(_decode_text(codecs.escape_decode(raw[1:-1])[0]))
            elif op == 0x56:  # UNICODE
                stack.append(str(line(), "raw-unicode-escape"))
            elif op == 0x8D:  # BINUNICODE8
                (k,) = unpack_from("<Q", data, take(8))
                stack.append(text(k))
            elif op == 0x42:  # BINBYTES
                (k,) = unpack_from("<I", data, take(4))
                stack.append(binary(k))
            elif op == 0x43:  # SHORT_BINBYTES
                stack.append(binary(data[take(1)]))
            elif op == 0x8E or op == 0x96:  # BINBYTES8, BYTEARRAY8
                (k,) = unpack_from("<Q", data, take(8))
                stack.append(binary(k))
            elif op == 0x49 or op == 0x4C or op == 0x46:  # INT, LONG, FLOAT
                raw = line()
                stack.append(raw)
            elif op == 0x67:  # GET
                key = int(line())
                value = memo.get(key, _MISSING)
                if value is _MISSING:
                    note("bad-memo-key", f"GET of memo key {key} that was never stored", op_at)
                    value = UNKNOWN
                stack.append(value)
            elif op == 0x70:  # PUT
                key = int(line())
                if key < 0:
                    note("bad-memo-key", "PUT with a negative memo key", op_at)
                else:
                    memo[key] = stack[-1] if stack else UNKNOWN
            elif op == 0x64:  # DICT
                items = pop_mark()
                seq = _Seq("dict")
                _strings_of(tuple(items), seq.strings)
                stack.append(seq)
            elif op == 0x6C:  # LIST
                items = pop_mark()
                seq = _Seq("list")
                _strings_of(tuple(items), seq.strings)
                stack.append(seq)
            elif op == 0x8F:  # EMPTY_SET
                stack.append(_Seq("set"))
            elif op == 0x90:  # ADDITEMS
                pop_mark()
                if _kind(stack[-1] if stack else UNKNOWN) not in ("set", "unknown"):
                    note("container-type-confusion", "ADDITEMS on something not a set", op_at,
                         True)
            elif op == 0x91:  # FROZENSET
                pop_mark()
                stack.append(_Seq("frozenset"))
            elif op == 0x97 or op == 0x98:  # NEXT_BUFFER, READONLY_BUFFER
                if op == 0x97:
                    stack.append(UNKNOWN)
            else:
                note("malformed", f"unknown opcode byte {op:#04x}", op_at)
                res.error = f"unknown opcode {op:#04x} at offset {op_at}"
                break
            if not count & 0xFFF and (len(memo) > max_memo or len(stack) > max_stack):
                note("limit", "memo or stack larger than the scan bound", op_at)
                break
    except (_Truncated, IndexError):
        note("malformed", "pickle data truncated", op_at)
        res.error = f"truncated at offset {op_at}"
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        note("malformed", f"undecodable argument: {exc}", op_at)
        res.error = f"{type(exc).__name__} at offset {op_at}"
    if not res.stopped and res.error is None and pos >= n and count:
        note("malformed", "pickle ends without STOP", op_at)
        res.error = "no STOP opcode"
    res.storages = [tuple.__new__(StorageRef, fields) for fields in storages]
    res.end = pos + removed
    res.next_start = max(res.next_start, res.end)
    res.opcodes = count
    return res


# How the C unpickler reads each opcode's argument: fixed sizes, a length then a body read the
# same way (strings, LONG1/4), a length then a body read past the buffer (bytes: readinto), or
# lines. Reads of the first kinds drop what is left of a FRAME's buffer when they need more.
_FIXED = {0x4A: 4, 0x4B: 1, 0x4D: 2, 0x68: 1, 0x6A: 4, 0x71: 1, 0x72: 4, 0x47: 8, 0x80: 1,
          0x82: 1, 0x83: 2, 0x84: 4, 0x95: 8}
_COUNTED_TEXT = {0x55: 1, 0x54: 4, 0x8C: 1, 0x58: 4, 0x8D: 8, 0x8A: 1, 0x8B: 4}
_COUNTED_BYTES = {0x43: 1, 0x42: 4, 0x8E: 8, 0x96: 8}
_LINES = {0x63: 2, 0x69: 2, 0x49: 1, 0x4C: 1, 0x46: 1, 0x53: 1, 0x56: 1, 0x67: 1, 0x70: 1,
          0x50: 1}


def _unbuffered_splice(data: bytes, pos: int, op: int, buf_end: int) -> tuple[bytes, int]:
    """The bytes a reader without peek() sees for the opcode `op` whose argument starts at
    `pos`, inside a FRAME buffer ending at `buf_end`: where a read needs more than is left,
    the rest of the buffer is dropped and the read continues after it. Returns the data with
    those bytes removed and how many were (0: nothing changes)."""
    def read(size: int) -> int:  # -> 0 or the bytes dropped for this read
        nonlocal pos
        if pos + size <= buf_end or pos >= buf_end:
            pos += size
            return 0
        return buf_end - pos

    reads: list[int] = []
    if op in _FIXED:
        reads = [_FIXED[op]]
    elif op in _COUNTED_TEXT or op in _COUNTED_BYTES:
        reads = [(_COUNTED_TEXT | _COUNTED_BYTES)[op]]
    for size in reads:
        cut = read(size)
        if cut:
            return data[:pos] + data[buf_end:], cut
    if op in _COUNTED_TEXT and pos <= len(data):
        width = _COUNTED_TEXT[op]
        size = int.from_bytes(data[pos - width:pos], "little", signed=width == 4)
        cut = read(max(size, 0))
        if cut:
            return data[:pos] + data[buf_end:], cut
    elif op == 0x95 and pos <= len(data):
        size = int.from_bytes(data[pos - 8:pos], "little")
        cut = read(size)
        if cut:
            return data[:pos] + data[buf_end:], cut
    for _ in range(_LINES.get(op, 0)):
        j = data.find(b"\n", pos, buf_end)
        if j >= 0:
            pos = j + 1
        elif pos < buf_end:
            return data[:pos] + data[buf_end:], buf_end - pos
    return data, 0


def _importable(ref: GlobalRef) -> bool:
    return all(p.isidentifier() for p in ref.module.split(".") + ref.name.split("."))


def looks_like_pickle(scan: PickleScan) -> bool:
    """Whether a walk saw a real pickle: it reached STOP, or imported a real name before failing.

    Text that happens to start with `c` (GLOBAL) yields "imports" such as `lass Foo(Module):`,
    which no unpickler can import; those do not make the bytes a pickle.
    """
    return (scan.stopped or any(_importable(g) for g in scan.globals)
            or any(i.code == "limit" or (scan.protocol >= 2 and i.dangerous)
                   for i in scan.issues))


def imports_or_stops(scan: PickleScan) -> bool:
    """Whether a walk reached STOP or imported a real name: the test for bytes that are
    usually something else (tensor records), where a random run of opcodes must not count."""
    return scan.stopped or any(_importable(g) for g in scan.globals)


def imports(scan: PickleScan) -> bool:
    """Whether a walk imported a real name: the test for a tensor record. Without an import a
    pickle can call nothing, and a STOP alone is no sign: a record whose bytes start with
    0x2e (`.`), or `).`, `N.`, `}.` and other short complete pickles, is ordinary tensor data
    in roughly one record of 256 or of 65,536."""
    return any(_importable(g) for g in scan.globals)


class DisasmRow(NamedTuple):
    """One opcode for the Pickle pane: where, what, its argument, and how bad (None if fine)."""

    offset: int
    opcode: str
    argument: str
    severity: str | None
    calls: int | None = None
    """The offset of the flagged import this opcode calls (REDUCE, NEWOBJ, OBJ, BUILD)."""


def disassemble(data: bytes, limit: int = 10_000, start: int = 0) -> list[DisasmRow]:
    """Opcode rows of the pickle at `start` (at most `limit`), marked with the scanner's verdicts.

    Rows come from `pickletools.genops`, which only decodes; a row that cannot be decoded ends
    the listing with an `ERROR` row.
    """
    import pickletools

    from inspector.scan.pickles.policy import classify, weights_only_rules

    rules = weights_only_rules()
    scan = scan_pickle(data, start, allowed=rules.allowed, wo_opcodes=rules.opcodes)
    marks: dict[int, str] = {}
    for ref in scan.globals:
        marks[ref.offset] = classify(ref.module, ref.name, rules).severity
    for issue in scan.issues:
        severity = Severity.DANGEROUS if issue.dangerous else Severity.SUSPICIOUS
        if marks.get(issue.offset) != Severity.DANGEROUS:
            marks[issue.offset] = severity
    calls: dict[int, int] = {}
    for call in scan.calls:
        # The opcode that makes a flagged call is as bad as the import it calls.
        mark = marks.get(call.func.offset) if call.func is not None else None
        if mark in (Severity.DANGEROUS, Severity.SUSPICIOUS) and call.offset != call.func.offset:
            calls[call.offset] = call.func.offset
            if marks.get(call.offset) != Severity.DANGEROUS:
                marks[call.offset] = mark
    rows: list[DisasmRow] = []
    stream = io.BytesIO(data)
    stream.seek(start)
    try:
        for op, arg, offset in pickletools.genops(stream):
            if len(rows) >= limit:
                break
            text = "" if arg is None else repr(arg)
            if op.name == "STACK_GLOBAL":
                ref = next((g for g in scan.globals if g.offset == offset), None)
                text = repr(ref.key) if ref else "<unresolved>"
            severity = marks.get(offset)
            rows.append(DisasmRow(offset, op.name, text[:200], None if severity == Severity.SAFE
                                  else severity, calls.get(offset)))
    except ValueError as exc:
        rows.append(DisasmRow(scan.end, "ERROR", str(exc)[:200], Severity.SUSPICIOUS))
    return rows
