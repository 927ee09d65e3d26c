"""The opcodes torch's tensor pickles rarely or never use: one small function each, and one
table (`_PUSHES`) for those whose whole effect is to push a value.

The walker's loop handles the hot opcodes inline and looks every other one up in `COLD_OPS`:
`handler(state, op, at)` with `at` the opcode's offset and `state.pos` just past the opcode
byte. A handler returns True to end the walk.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from struct import unpack_from

from inspector.scan.pickles.class_source import defines_method
from inspector.scan.pickles.joblib_arrays import NUMPY_DTYPE, WRAPPER
from inspector.scan.pickles.opcodes import HANDED, HASHED, OPCODE_BYTES
from inspector.scan.pickles.records import Call, GlobalRef
from inspector.scan.pickles.state import Truncated, WalkState
from inspector.scan.pickles.values import (
    MISSING,
    UNKNOWN,
    WATCHED_KEYWORDS,
    _Obj,
    _Seq,
    decode_text,
    held_values,
    kind_of,
    render,
    strings_of,
    watch_keys,
)

Handler = Callable[[WalkState, int, int], bool | None]
COLD_OPS: dict[int, Handler] = {}


def _handles(*names: str) -> Callable[[Handler], Handler]:
    """Register the decorated function for the named opcodes."""
    def register(handler: Handler) -> Handler:
        for name in names:
            COLD_OPS[OPCODE_BYTES[name]] = handler
        return handler
    return register


def unknown_opcode(st: WalkState, op: int, at: int) -> bool:
    """A byte that is no opcode ends the walk."""
    st.note("malformed", f"unknown opcode byte {op:#04x}", at)
    st.res.error = f"unknown opcode {op:#04x} at offset {at}"
    return True


# The opcodes whose whole effect is to push one value: what each pushes, read from the state.
# Text and bytes arguments are kept by `state.text` / `state.binary` (their length alone when
# long); INT, LONG and FLOAT push their argument line as raw bytes.
_PUSHES: dict[str, Callable[[WalkState], object]] = {
    "NONE": lambda st: None,
    "EMPTY_DICT": lambda st: _Seq("dict"),
    "EMPTY_LIST": lambda st: _Seq("list"),
    "EMPTY_SET": lambda st: _Seq("set"),
    "DUP": lambda st: st.stack[-1] if st.stack else UNKNOWN,
    "BINFLOAT": lambda st: unpack_from(">d", st.data, st.take(8))[0],
    "INT": WalkState.line,
    "LONG": WalkState.line,
    "FLOAT": WalkState.line,
    "UNICODE": lambda st: str(st.line(), "raw-unicode-escape"),
    "SHORT_BINUNICODE": lambda st: st.text(st.data[st.take(1)]),
    "BINUNICODE8": lambda st: st.text(unpack_from("<Q", st.data, st.take(8))[0]),
    "SHORT_BINBYTES": lambda st: st.binary(st.data[st.take(1)]),
    "BINBYTES": lambda st: st.binary(unpack_from("<I", st.data, st.take(4))[0]),
    "BINBYTES8": lambda st: st.binary(unpack_from("<Q", st.data, st.take(8))[0]),
    "BYTEARRAY8": lambda st: st.binary(unpack_from("<Q", st.data, st.take(8))[0]),
}
_PUSH_BY_BYTE = {OPCODE_BYTES[name]: value for name, value in _PUSHES.items()}


@_handles(*_PUSHES)
def _push(st: WalkState, op: int, at: int) -> None:
    st.stack.append(_PUSH_BY_BYTE[op](st))


@_handles("PROTO")
def _proto(st: WalkState, op: int, at: int) -> None:
    st.proto = st.res.protocol = st.data[st.take(1)]
    if st.proto > 5:
        st.note("bad-protocol", f"unsupported pickle protocol {st.proto}", at)


@_handles("STOP")
def _stop(st: WalkState, op: int, at: int) -> bool | None:
    st.pop(at)
    res = st.res
    res.stopped = True
    if st.frame_end > st.pos:
        if not st.unbuffered:
            st.misaligned("its FRAME runs past STOP", at)
        res.next_start = st.frame_end + st.removed
    if not st.through or st.pos >= st.n:
        return True
    # `through`: the next pickle, as a fresh `pickle.load` reads it (the loop holds the same
    # memo and metastack, so they are emptied rather than replaced)
    res.count += 1
    res.stopped = False
    st.stack = []
    st.metastack.clear()
    st.memo.clear()
    st.proto = 0
    return None


@_handles("FRAME")
def _frame(st: WalkState, op: int, at: int) -> None:
    # the C unpickler only checks that the frame's bytes exist, then reads opcodes on
    (k,) = unpack_from("<Q", st.data, st.take(8))
    if st.pos + k > st.n:
        raise Truncated
    if st.frame_end and st.pos + k > st.frame_end and not st.unbuffered:
        st.misaligned("a FRAME runs past the end of the FRAME it lies in", at)
    st.frame_end = max(st.frame_end, st.pos + k)


def _import_lines(st: WalkState) -> tuple[str, str]:
    """The module and name lines of GLOBAL and INST."""
    module = str(st.line(), "utf-8")
    return module, str(st.line(), "utf-8")


@_handles("GLOBAL")
def _global(st: WalkState, op: int, at: int) -> None:
    module, name = _import_lines(st)
    st.stack.append(st.add_global(module, name, "GLOBAL", at))


@_handles("INST")
def _inst(st: WalkState, op: int, at: int) -> None:
    module, name = _import_lines(st)
    ref = st.add_global(module, name, "INST", at)
    args = tuple(st.pop_mark(at))
    st.block(f"INST of {module}.{name}")
    st.stack.append(st.add_call(ref, args, "INST", at))


@_handles("STACK_GLOBAL")
def _stack_global(st: WalkState, op: int, at: int) -> None:
    name = st.pop(at)
    module = st.pop(at)
    st.stack.append(st.add_global(module, name, "STACK_GLOBAL", at))


@_handles("BUILD")
def _build(st: WalkState, op: int, at: int) -> None:
    state = st.pop(at)
    inst = st.stack[-1] if st.stack else UNKNOWN
    if isinstance(inst, GlobalRef):
        # BUILD of a global sets attributes on the function or class itself (slot state is
        # setattr): code every later use shares. torch.load's legacy reader, for one, writes
        # `<obj.__name__>.patch` when a persistent id's obj has `dump_patches` set.
        st.note("build-on-global", f"BUILD sets attributes on {inst.key} itself (a function or "
                f"class, shared code, not an instance) with {render(state)[:200]}: no save does "
                "this, and what the loader or later code reads from it is then the pickle's", at,
                True)
        st.block(f"BUILD on {inst.key}")
        st.built_globals.add(inst.key)
        return
    stored = inst.stored if isinstance(inst, _Obj) else None
    if stored and "__setstate__" in stored:
        # an earlier BUILD stored __setstate__ on the instance: this BUILD calls it with state
        st.stored_call(inst, "__setstate__", (state,), "BUILD", at)
    else:
        st.stores_called(inst, state, "BUILD stores", f"on {render(inst)}", at)
    if isinstance(inst, _Obj) and inst.func is not None:
        if inst.func.key not in st.allowed:
            st.block(f"BUILD of {inst.func.key}")
        strings: list[str] = []
        strings_of(state, strings)
        held = held_values(state)
        if held:
            inst.held = {**(inst.held or {}), **held}
        # BUILD runs the class's __setstate__ where it defines one: recorded as a call of its
        # class (`ScanContext` judges what that method's source calls)
        cls = inst.class_ref()
        if (strings or cls.key not in st.allowed) and len(st.res.calls) < 200_000:
            st.res.calls.append(Call(cls, "BUILD", at, strings, attrs=inst.attributes()))
        _state_handed(st, cls, state, at)
        if inst.func.key == NUMPY_DTYPE:
            inst.detail = (inst.detail, state)  # (its arguments, its state): a joblib array's size
        elif inst.func.key == WRAPPER:
            st.joblib_array(state, at)
    elif not isinstance(inst, _Obj):
        st.block(f"BUILD on a {kind_of(inst)}")


def _state_handed(st: WalkState, cls: GlobalRef, state: object, at: int) -> None:
    """BUILD hands its state to the class's own `__setstate__`, which may run any protocol of
    what it is given (`state['x']`, `'x' in state`, `SafeUUID(state['is_safe'])` hashes a
    value): the instances it holds (itself, a tuple's items, a dict's values) are handled as
    an allowed callable's arguments are. A state that is no dict only ever reaches one (the
    unpickler's own BUILD refuses it); a dict's values where the class's source defines one."""
    if cls.key in st.allowed:
        return
    parts = state if isinstance(state, tuple) else (state,)
    held = tuple(v for part in parts if isinstance(part, _Seq) and part.kind == "dict"
                 for v in (part.objs or {}).values())
    custom = defines_method(cls.module, cls.name, "__setstate__") if held else False
    handed = (state, *held) if custom else (state,)
    st.handled(handed, "BUILD", f"hands its state to {cls.key}.__setstate__", HANDED, at)


@_handles("SETITEM", "SETITEMS")
def _setitems(st: WalkState, op: int, at: int) -> None:
    items = st.pop_mark(at) if op == 0x75 else [st.pop(at), st.pop(at)][::-1]
    target = st.stack[-1] if st.stack else UNKNOWN
    kind = kind_of(target)
    if kind not in ("dict", "unknown"):
        name = "SETITEMS" if op == 0x75 else "SETITEM"
        if kind == "object":
            st.block(f"{name} on an object that is not a dict")
        else:
            st.note("container-type-confusion", f"{name} on a {kind}, not a dict", at, True)
            st.block(f"{name} on a {kind}")
    if kind in ("dict", "unknown"):  # a dict hashes and compares its keys
        st.handled(tuple(items[0::2]), "SETITEMS" if op == 0x75 else "SETITEM",
                   "uses as a dict key", HASHED, at)
    if isinstance(target, _Seq):
        if len(target.strings) < 16:
            strings_of(tuple(items), target.strings)
        target.set_items(items)
    elif isinstance(target, _Obj):
        watch_keys(target, items)  # a dict subclass's instance filled as a dict (OrderedDict)
        if kind == "object":  # obj[key] = value runs the class's __setitem__
            st.implicit_call(target, "SETITEMS" if op == 0x75 else "SETITEM", tuple(items), at)


@_handles("APPEND", "APPENDS")
def _appends(st: WalkState, op: int, at: int) -> None:
    items = [st.pop(at)] if op == 0x61 else st.pop_mark(at)
    target = st.stack[-1] if st.stack else UNKNOWN
    kind = kind_of(target)
    if kind != "list":
        name = "APPEND" if op == 0x61 else "APPENDS"
        st.block(f"{name} on a {kind}")
        if kind not in ("object", "unknown"):
            st.note("container-type-confusion", f"{name} on a {kind}, not a list", at, True)
    if isinstance(target, _Seq) and len(target.strings) < 16:
        strings_of(tuple(items), target.strings)
    if isinstance(target, _Seq) and kind == "list":
        target.keep_made(items)
    stored = target.stored if isinstance(target, _Obj) else None
    if kind == "object" and not (stored and ("extend" in stored or "append" in stored)):
        # the C unpickler calls the instance's extend (else append), pickle.py's APPEND append
        st.implicit_call(target, "APPENDS" if op != 0x61 else "APPEND", tuple(items), at)
    for method in ("extend", "append") if stored else ():
        if method in stored:  # stored by a BUILD: APPEND(S) of a non-list looks it up and calls
            st.stored_call(target, method, tuple(items), "APPENDS" if op != 0x61 else "APPEND",
                           at)


@_handles("ADDITEMS")
def _additems(st: WalkState, op: int, at: int) -> None:
    items = st.pop_mark(at)
    target = st.stack[-1] if st.stack else UNKNOWN
    if kind_of(target) in ("set", "unknown"):  # a set hashes and compares its items
        st.handled(tuple(items), "ADDITEMS", "adds to a set", HASHED, at)
    if isinstance(target, _Obj) and target.stored and "add" in target.stored:
        st.stored_call(target, "add", tuple(items), "ADDITEMS", at)
    elif kind_of(target) == "object":
        st.implicit_call(target, "ADDITEMS", tuple(items), at)  # calls the instance's add
    if kind_of(st.stack[-1] if st.stack else UNKNOWN) not in ("set", "unknown"):
        st.note("container-type-confusion", "ADDITEMS on something not a set", at, True)


@_handles("DICT", "LIST")
def _dict_or_list(st: WalkState, op: int, at: int) -> None:
    items = st.pop_mark(at)
    seq = _Seq("dict" if op == 0x64 else "list")
    strings_of(tuple(items), seq.strings)
    if op == 0x64:
        st.handled(tuple(items[0::2]), "DICT", "uses as a dict key", HASHED, at)
        seq.set_items(items)
    else:
        seq.keep_made(items)
    st.stack.append(seq)


@_handles("FROZENSET")
def _frozenset(st: WalkState, op: int, at: int) -> None:
    st.handled(tuple(st.pop_mark(at)), "FROZENSET", "adds to a frozenset", HASHED, at)
    st.stack.append(_Seq("frozenset"))


@_handles("PERSID")
def _persid(st: WalkState, op: int, at: int) -> None:
    pid = decode_text(st.line())
    st.block("PERSID is not supported")
    st.persistent_id(pid, at)


@_handles("NEWOBJ", "NEWOBJ_EX")
def _newobj(st: WalkState, op: int, at: int) -> None:
    # NEWOBJ_EX is NEWOBJ with keyword arguments on top; weights_only refuses the opcode
    # itself, so only NEWOBJ's class is held to the allowed set here
    ex = op == 0x92
    kwargs = st.pop(at) if ex else None
    args = st.pop(at)
    cls = st.pop(at)
    if not ex and isinstance(cls, GlobalRef) and cls.key not in st.allowed:
        st.block(f"NEWOBJ of {cls.key}")
    if ex and isinstance(cls, GlobalRef) and cls.module.partition(".")[0] == "torch":
        _torch_keywords(st, cls, kwargs, at)
    st.stack.append(st.add_call(cls, (args, kwargs) if ex else args,
                                "NEWOBJ_EX" if ex else "NEWOBJ", at))


def _torch_keywords(st: WalkState, cls: GlobalRef, kwargs: object, at: int) -> None:
    """NEWOBJ_EX hands keyword arguments to a torch class's C constructor, some of which are raw
    pointers it calls through or wraps (`UntypedStorage(size, allocator=ADDRESS)`,
    `torch.Tensor(cdata=ADDRESS)`): those, and keywords that cannot be seen, are dangerous."""
    hot = kwargs.hot if isinstance(kwargs, _Seq | _Obj) else None
    if isinstance(kwargs, _Seq) and kwargs.kind == "dict":
        pointers = sorted(str(k) for k in (hot or {}) if k in WATCHED_KEYWORDS)
        if pointers:
            why = f"keyword {', '.join(pointers)}: a raw pointer or handle its C code calls "
            why += "through or wraps (an address the pickle chose: memory corruption)"
        elif hot and UNKNOWN in hot:
            why = "a keyword computed while loading, which cannot be checked statically"
        else:
            return
    elif kwargs is None or isinstance(kwargs, _Seq):
        return  # not a dict: the unpickler refuses it before any call
    else:
        why = "keywords computed while loading, which cannot be checked statically"
    st.note("torch-pointer-keyword", f"NEWOBJ_EX of {cls.key} with {why}", at, True)


@_handles("OBJ")
def _obj(st: WalkState, op: int, at: int) -> None:
    items = st.pop_mark(at)
    cls = items[0] if items else UNKNOWN
    st.stack.append(st.add_call(cls, tuple(items[1:]), "OBJ", at))


@_handles("EXT1", "EXT2", "EXT4")
def _ext(st: WalkState, op: int, at: int) -> None:
    width = {0x82: 1, 0x83: 2, 0x84: 4}[op]
    code = int.from_bytes(st.data[st.take(width) : st.pos], "little")
    st.note("unresolved-import", f"EXT code {code} imports whatever the copyreg extension "
            "registry maps it to, which cannot be known statically", at, True)
    st.stack.append(UNKNOWN)


@_handles("POP")
def _pop(st: WalkState, op: int, at: int) -> None:
    if st.stack:
        st.stack.pop()
    else:
        st.pop_mark(at)


@_handles("POP_MARK")
def _pop_mark(st: WalkState, op: int, at: int) -> None:
    st.pop_mark(at)


@_handles("LONG1")
def _long1(st: WalkState, op: int, at: int) -> None:
    k = st.data[st.take(1)]
    st.stack.append(int.from_bytes(st.data[st.take(k) : st.pos], "little", signed=True))


@_handles("LONG4")
def _long4(st: WalkState, op: int, at: int) -> None:
    (k,) = unpack_from("<i", st.data, st.take(4))
    if k < 0:
        raise Truncated
    st.take(k)
    st.stack.append(0)


@_handles("SHORT_BINSTRING")
def _short_binstring(st: WalkState, op: int, at: int) -> None:
    k = st.data[st.take(1)]
    p = st.take(k)
    st.stack.append(decode_text(st.data[p:p + k]))


@_handles("BINSTRING")
def _binstring(st: WalkState, op: int, at: int) -> None:
    (k,) = unpack_from("<i", st.data, st.take(4))
    if k < 0:
        raise Truncated
    value = st.binary(k)
    st.stack.append(decode_text(value) if isinstance(value, bytes) else value)


@_handles("STRING")
def _string(st: WalkState, op: int, at: int) -> None:
    raw = st.line().rstrip(b"\r")
    if len(raw) < 2 or raw[0] != raw[-1] or raw[:1] not in (b"'", b'"'):
        st.note("malformed", "STRING argument is not quoted", at)
        st.stack.append(UNKNOWN)
    else:
        st.stack.append(decode_text(codecs.escape_decode(raw[1:-1])[0]))


@_handles("GET")
def _get(st: WalkState, op: int, at: int) -> None:
    key = int(st.line())
    value = st.memo.get(key, MISSING)
    if value is MISSING:
        st.note("bad-memo-key", f"GET of memo key {key} that was never stored", at)
        value = UNKNOWN
    st.stack.append(value)


@_handles("PUT")
def _put(st: WalkState, op: int, at: int) -> None:
    key = int(st.line())
    if key < 0:
        st.note("bad-memo-key", "PUT with a negative memo key", at)
    else:
        st.memo[key] = st.stack[-1] if st.stack else UNKNOWN


@_handles("NEXT_BUFFER", "READONLY_BUFFER")
def _buffer(st: WalkState, op: int, at: int) -> None:
    # out-of-band buffers: the next one is pushed, READONLY_BUFFER only marks the top
    if op == 0x97:
        st.stack.append(UNKNOWN)
