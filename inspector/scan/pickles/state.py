"""The state of one walk: the bytes and position, the unpickler's stack, metastack and memo, and
what has been recorded so far; with the small steps every opcode shares (pop a value, read an
argument, record an import or a call). The walker's loop keeps the hottest of these in locals
and hands them back here before an opcode that lives in `cold_ops` runs.
"""

from __future__ import annotations

from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from collections.abc import Callable
from dataclasses import dataclass, field

from inspector.core.vocabulary import Severity
from inspector.scan.pickles.calls import (
    CALLS_ARGUMENTS,
    RETURNS,
    SETS_STATE,
    UNSEEN,
    CalledArgument,
)
from inspector.scan.pickles.class_source import array_subclass, is_enum_class
from inspector.scan.pickles.joblib_arrays import NUMPY_DTYPE, PLAIN_SUBCLASSES, WRAPPER, layout
from inspector.scan.pickles.opcodes import HANDED, OPCODE_NAMES, PERSISTENT_ID_READS
from inspector.scan.pickles.policy import call_allowed, classify, deferred_calls
from inspector.scan.pickles.records import Call, GlobalRef, Issue, Limits, PickleScan
from inspector.scan.pickles.unbuffered import unbuffered_splice
from inspector.scan.pickles.values import (
    BIG,
    UNKNOWN,
    _Big,
    _Obj,
    _Seq,
    called_attributes,
    describe,
    render,
    strings_of,
)

RECONSTRUCTOR = "copyreg._reconstructor"
# A call of an enum class looks a member up by value, and on a value no member has runs the
# class's _missing_: judged from its source as a protocol the load runs
ENUM_LOOKUP = "looks a member up by value (on a miss the class's _missing_ runs) in"
GETATTR = "builtins.getattr"


class Truncated(Exception):
    """An opcode's argument runs past the end of the data."""


def _fix_import(module: str, name: str, proto: int) -> tuple[str, str]:
    """Apply Python 2 name mapping the way pickle does for protocol < 3."""
    if proto < 3:
        if (module, name) in NAME_MAPPING:
            return NAME_MAPPING[(module, name)]
        if module in IMPORT_MAPPING:
            return IMPORT_MAPPING[module], name
    return module, name


def _shown(args: object) -> str:
    """A call's arguments as pseudo-Python, without the tuple's parentheses."""
    shown = render(args)
    if isinstance(args, tuple):
        shown = shown[1:-1].removesuffix(",")
    return shown[:400]


def _returned(fref: GlobalRef, args: object, made: _Obj) -> object:
    """What a call of `fref` pushes: `made`, or where the callable hands an argument back or
    makes an instance of one (`calls.RETURNS`), that argument, or `made` with it as its class."""
    returns = RETURNS.get(fref.key)
    if returns is None or not isinstance(args, tuple) or returns[0] >= len(args):
        return made
    value = args[returns[0]]
    if returns[1]:
        return value
    if isinstance(value, GlobalRef):
        made.cls = value
    return made


def _instances(values: tuple) -> list[_Obj]:
    """The objects made while loading among `values` and the items of their tuples and lists
    (each once: the memo hands one tuple to many, and hostile files nest them thousands
    deep)."""
    found: list[_Obj] = []
    seen: set[int] = set()
    todo = [values]
    while todo:
        for item in todo.pop():
            if isinstance(item, _Obj):
                found.append(item)
            elif isinstance(item, tuple | _Seq) and id(item) not in seen:
                seen.add(id(item))
                todo.append(item if isinstance(item, tuple) else tuple(item.made or ()))
    return found


def _arguments(args: object, opname: str) -> tuple[tuple | None, dict[str, object] | None]:
    """A call's positional arguments and, for NEWOBJ_EX, the imports and objects among its
    keywords by name ("" for a key computed while loading); None where a part was computed
    while loading (it may hold anything)."""
    if opname != "NEWOBJ_EX":
        return (args if isinstance(args, tuple) else None), {}
    positional, keywords = args if isinstance(args, tuple) and len(args) == 2 else (None, None)
    if not (isinstance(keywords, _Seq) and keywords.kind == "dict"):
        return (positional if isinstance(positional, tuple) else None), None
    return (positional if isinstance(positional, tuple) else None), dict(keywords.objs or {})


def _enum_shaped(fref: GlobalRef, args: object) -> bool:
    """Whether a call could be an enum lookup by value, as `policy.call_verdict` admits one: a
    capitalised class called with one plain word or number (anything else is judged as a call
    whatever the class is, so its source is not read: parsing each called module's source cost
    the corpus scan 8x)."""
    leaf = fref.name.rsplit(".", 1)[-1]
    return leaf[:1].isupper() and isinstance(args, tuple) and len(args) == 1 and (
        isinstance(args[0], str | int) and not isinstance(args[0], bool))


def _denied(fref: GlobalRef) -> bool:
    """Whether the deny list already makes `fref` dangerous: its call needs no enum-lookup
    reading of its source (`policy.call_verdict` judges a denied name before the enum
    pattern, and a callable already judged dangerous needs no second reason)."""
    return classify(fref.module, fref.name).severity == Severity.DANGEROUS


@dataclass(slots=True, eq=False)
class WalkState:
    """One walk's state. `at` arguments are the offset of the opcode being walked."""

    data: bytes
    pos: int
    res: PickleScan
    allowed: frozenset[str]
    through: bool
    unbuffered: bool
    # joblib's reading: the bytes after a NumpyArrayWrapper's BUILD are array data. `nested`
    # walks the pickle an object array is written as (None past the nesting bound).
    joblib: bool = False
    nested: Callable[[int], PickleScan] | None = None
    n: int = field(init=False)
    stack: list = field(default_factory=list)  # the current MARK's: a MARK starts a new one
    metastack: list[list] = field(default_factory=list)
    memo: dict[int, object] = field(default_factory=dict)
    storages: list[tuple] = field(default_factory=list)  # plain tuples; StorageRefs at the end
    shared_objs: dict = field(default_factory=dict)  # the fast path's call results, by callable
    proto: int = 0
    frame_end: int = 0  # end of the last FRAME's bytes while opcodes are read from inside it
    removed: int = 0  # `unbuffered`: bytes dropped so far (positions after a drop shift by this)
    op_at: int = 0  # where the walk stopped: the last opcode it began
    reported_ops: set[int] = field(default_factory=set)  # outside weights_only's, each noted once
    # functions and classes a BUILD set attributes on (by key: every import of one is the same
    # object to the loader), for what later reads them (`persistent_id`)
    built_globals: set[str] = field(default_factory=set)
    handled_seen: set[tuple] = field(default_factory=set)  # `handled`'s calls, each once

    def __post_init__(self) -> None:
        self.n = len(self.data)

    def note(self, code: str, message: str, offset: int, dangerous: bool = False) -> None:
        """Record a structural problem (the first thousand)."""
        issues = self.res.issues
        if len(issues) < 1000:
            issues.append(Issue(code, message, offset, dangerous))

    def block(self, reason: str) -> None:
        """Record a reason torch.load(weights_only=True) would refuse the stream, once."""
        blockers = self.res.wo_blockers
        if len(blockers) < 100 and reason not in blockers:
            blockers.append(reason)

    def misaligned(self, why: str, at: int) -> None:
        """Record, once, that a FRAME's end disagrees with the opcodes inside it."""
        if not self.res.frame_misaligned:
            self.res.frame_misaligned = True
            self.note("frame-misaligned", f"{why}: a reader without peek() (io.BytesIO, which "
                      "torch.load uses for data.pkl) drops or skips bytes there and reads "
                      "another pickle; that reading was scanned too", at)

    def pop(self, at: int) -> object:
        """Pop the top of the stack; an empty stack is a problem, not an error."""
        if self.stack:
            return self.stack.pop()
        self.note("stack-underflow", "opcode pops from an empty stack", at)
        return UNKNOWN

    def pop_mark(self, at: int) -> list:
        """Everything pushed since the last MARK; `stack` is then the MARK's outer stack."""
        items = self.stack
        if not self.metastack:
            self.note("missing-mark", "opcode needs a MARK that was never pushed", at)
            self.stack = []
            return items
        self.stack = self.metastack.pop()
        return items

    def take(self, k: int) -> int:
        """Step over `k` argument bytes; returns where they start."""
        p = self.pos
        if p + k > self.n:
            raise Truncated
        self.pos = p + k
        return p

    def line(self) -> bytes:
        """A newline-terminated argument, without its newline."""
        j = self.data.find(b"\n", self.pos)
        if j < 0:
            raise Truncated
        raw = self.data[self.pos:j]
        self.pos = j + 1
        return raw

    def text(self, k: int) -> object:
        """A UTF-8 argument of `k` bytes (its length only, when long)."""
        p = self.take(k)
        if k > BIG:
            return _Big(k)
        return str(self.data[p:p + k], "utf-8", "surrogatepass")

    def binary(self, k: int) -> object:
        """A bytes argument of `k` bytes (its length only, when long)."""
        p = self.take(k)
        return _Big(k) if k > BIG else self.data[p:p + k]

    def frame_step(self, pos: int, frame_end: int, last_at: int) -> int:
        """Before the opcode at `pos`, inside a FRAME ending at `frame_end`: leave the FRAME at
        its end (an opcode before it, at `last_at`, that ran past it is noted), or with
        `unbuffered` drop the bytes a reader without peek() drops to read the opcode's
        argument. Returns the FRAME's end, 0 once it is left or its rest dropped."""
        if pos >= frame_end:
            if pos > frame_end and not self.unbuffered:
                self.misaligned("an opcode's argument runs past the end of its FRAME", last_at)
            return 0
        if not self.unbuffered:
            return frame_end
        spliced, cut = unbuffered_splice(self.data, pos + 1, self.data[pos], frame_end)
        if not cut:
            return frame_end
        self.data, self.n = spliced, len(spliced)
        self.removed += cut
        return 0

    def unstored(self, op: int, key: int, at: int) -> object:
        """What BINGET (0x68) or LONG_BINGET of a memo key never stored pushes."""
        self.note("bad-memo-key", f"BINGET of memo key {key} that was never stored" if op == 0x68
                  else f"LONG_BINGET of memo key {key} never stored", at)
        self.block("memo key never stored")
        return UNKNOWN

    def unsupported(self, op: int) -> None:
        """Record, once, that torch.load(weights_only=True) does not implement opcode `op`."""
        self.reported_ops.add(op)
        self.block(f"opcode {OPCODE_NAMES.get(op, hex(op))} is not supported")

    def outgrown(self, limits: Limits, at: int) -> bool:
        """Whether the memo or the stack has outgrown `limits` (noted when it has)."""
        if len(self.memo) > limits.max_memo or len(self.stack) > limits.max_stack:
            self.note("limit", "memo or stack larger than the scan bound", at)
            return True
        return False

    def add_global(self, module: object, name: object, opname: str,
                   at: int) -> GlobalRef | None:
        """Record an import; None when its operands are not text."""
        if not isinstance(module, str) or not isinstance(name, str):
            self.note("unresolved-import", f"{opname} with operands that are not plain text "
                      f"({type(module).__name__}, {type(name).__name__})", at, True)
            return None
        module, name = _fix_import(module, name, self.proto)
        ref = GlobalRef(module, name, opname, at)
        if len(self.res.globals) < 100_000:
            self.res.globals.append(ref)
        return ref

    def class_attribute(self, fref: GlobalRef | None, args: object, opname: str, at: int
                        ) -> GlobalRef | None:
        """`getattr(<import>, '<name>')` is the dotted import `module.Class.name`, judged as a
        dotted STACK_GLOBAL is (the unpickler's own lookup walks attributes so): protocol 2
        pickles a class's staticmethod this way (a whole CyclicLR's default scale_fn). The
        getattr import it consumes is no longer an import of its own where it was just made
        (a later use of it, memoised, is a call of builtins.getattr judged as any). None for
        any other call: a computed owner or a name that is not a literal identifier."""
        if fref is None or fref.key != GETATTR or not isinstance(args, tuple) or len(args) != 2:
            return None
        owner, name = args
        if not isinstance(owner, GlobalRef) or not isinstance(name, str) or (
                not name.isidentifier()):
            return None
        made = self.res.globals[-8:]  # the getattr import, then the owner's where it is new
        if any(g is fref for g in made):
            del self.res.globals[len(self.res.globals) - len(made) + next(
                i for i, g in enumerate(made) if g is fref)]
        ref = GlobalRef(owner.module, f"{owner.name}.{name}", opname, at)
        if len(self.res.globals) < 100_000:
            self.res.globals.append(ref)
        return ref

    def add_call(self, func: object, args: object, opname: str, at: int) -> _Obj:
        """Record a call of `func` with `args`; returns the value it pushes."""
        fref = func if isinstance(func, GlobalRef) else None
        if (looked_up := self.class_attribute(fref, args, opname, at)) is not None:
            return looked_up
        if fref is not None:
            allowed = fref.key in self.allowed or call_allowed(fref.key)
            called = CALLS_ARGUMENTS.get(fref.key)
            if called is None and not allowed and opname.startswith("NEWOBJ"):
                self.constructed(fref, args, opname, at)
            if called is not None:
                self.called_arguments(fref, called, args, opname, at)
            if allowed:
                self.handled(args, opname, f"hands to {fref.key}", HANDED, at)
            if fref.key in self.allowed:  # torch's own rebuilds: only the state they hand on
                made = _Obj(fref)
                if fref.key in SETS_STATE and isinstance(args, tuple):
                    self.state_handed(fref, SETS_STATE[fref.key], args, made, at)
                return _returned(fref, args, made)
        if fref is None:
            self.note("indirect-call", f"{opname} calls a value computed while loading "
                      "(not a plain import), which cannot be checked statically", at, True)
            self.block(f"{opname} on a value that is not an allowed global")
        strings: list[str] = []
        strings_of(args, strings)
        calls = self.res.calls
        if len(calls) < 200_000:
            calls.append(Call(fref, opname, at, strings, _shown(args)))
        if fref is not None and opname == "REDUCE" and _enum_shaped(fref, args) and (
                not _denied(fref)) and is_enum_class(fref.module, fref.name) and (
                len(calls) < 200_000):
            calls.append(Call(fref, opname, at, [], "", runs=("_missing_",), role=ENUM_LOOKUP))
        obj = _Obj(fref, args if fref is not None and fref.key == NUMPY_DTYPE else None)
        if fref is not None and fref.key == RECONSTRUCTOR and isinstance(args, tuple) and (
                args and isinstance(args[0], GlobalRef)):
            obj.cls = args[0]  # an instance of its first argument: BUILD runs its __setstate__
        return _returned(fref, args, obj) if fref is not None else obj

    def implicit_call(self, target: object, opname: str, items: object, at: int) -> None:
        """`opname` runs a method the class of `target` (an instance) may define (SETITEM(S):
        `__setitem__` of a non-dict, APPEND(S): `extend` or `append` of a non-list, ADDITEMS:
        `add` of a non-set): recorded as a call of its class, judged by what that method's
        source calls (`ScanContext`)."""
        cls = target.class_ref() if isinstance(target, _Obj) else None
        if cls is not None and cls.key not in self.allowed and len(self.res.calls) < 200_000 and (
                not call_allowed(cls.key)):  # defaultdict, deque: their own C code
            strings: list[str] = []
            strings_of(items, strings)
            self.res.calls.append(Call(cls, opname, at, strings, _shown(items),
                                       attrs=target.attributes()))

    def handled(self, values: object, opname: str, role: str, methods: tuple[str, ...],
                at: int) -> None:
        """`opname` runs `methods` (`opcodes.HASHED`, `opcodes.HANDED`) of each instance among
        `values` (in tuples too, whose hash and comparison run their items'): one of a class
        outside the allowlists is recorded as a call of its class running those methods,
        judged by what they reach in its source (`ScanContext`), each class and state once."""
        for value in _instances(values) if isinstance(values, tuple) else ():
            cls = value.class_ref()
            # a denied import is dangerous already: its source need not be read
            if cls is None or cls.key in self.allowed or call_allowed(cls.key) or _denied(cls):
                continue
            attrs = value.attributes()
            seen = (cls.key, methods, attrs)
            if seen not in self.handled_seen and len(self.res.calls) < 200_000:
                self.handled_seen.add(seen)
                self.res.calls.append(Call(cls, opname, at, [], "", attrs=attrs, runs=methods,
                                           role=role))

    def constructed(self, cls: GlobalRef, args: object, opname: str, at: int) -> None:
        """NEWOBJ(_EX) builds `cls` (outside the allowlists) with `cls.__new__(cls, *args)`:
        code that may run any protocol of the instances it is handed (`zip(x)` iterates x at
        once), and a type that holds a callable to call later (`calls.DEFERRED_CALLS`:
        `map(f, xs)` calls f once iterated) has that argument judged as a call of it."""
        positional, keywords = _arguments(args, opname)
        handed = (*(positional or ()), *(keywords.values() if keywords else ()))
        self.handled(handed, opname, f"hands to {cls.key}'s constructor", HANDED, at)
        deferred = () if _denied(cls) else deferred_calls(cls.module, cls.name)
        if deferred:
            self.called_arguments(cls, deferred, args, opname, at)

    def called_arguments(self, via: GlobalRef, called: tuple[CalledArgument, ...],
                         args: object, opname: str, at: int) -> None:
        """Record what `via` calls among its arguments as calls of their own: an import
        there is a call target, anything computed there cannot be checked (dangerous)."""
        positional, keywords = _arguments(args, opname)
        for arg in called:
            if positional is None:
                value: object = UNKNOWN  # arguments built while loading: none can be seen
            elif 0 <= arg.position < len(positional):
                value = positional[arg.position]
            elif keywords is None:
                value = UNKNOWN  # keywords built while loading
            elif arg.name in keywords or "" in keywords:  # "": a key computed while loading
                value = keywords.get(arg.name, keywords.get(""))
            else:
                continue  # left at its default, which calls nothing of the pickle's
            role = f"{via.key} {arg.how} its argument {arg.name}"
            if isinstance(value, _Obj) and value.func is not None and arg.method:
                value = value.func  # an instance: its maker's code runs (`data.to` of a tensor)
            if isinstance(value, GlobalRef) and arg.array_runs and not call_allowed(
                    value.key) and array_subclass(value.module, value.name):
                self.made_instance(via, value, arg.array_runs, opname, at)
            elif isinstance(value, GlobalRef):
                if len(self.res.calls) < 200_000:
                    self.res.calls.append(Call(value, opname, at, [], _shown(args), role))
                forwarded = CALLS_ARGUMENTS.get(value.key)
                if forwarded and positional is not None and 0 <= arg.args_at < len(positional):
                    # `func(*args)`: what func does with those arguments is judged too
                    self.called_arguments(value, forwarded, positional[arg.args_at], "REDUCE", at)
                elif forwarded and arg.args_at == UNSEEN:
                    self.note("indirect-call", f"{role}: {value.key}, which calls its own "
                              "arguments, with values the scan does not keep (an iterable's "
                              "items), which cannot be checked statically", at, True)
            elif isinstance(value, _Obj) or value is UNKNOWN:
                self.note("indirect-call", f"{role}, a value computed while loading (not a "
                          "plain import), which cannot be checked statically", at, True)

    def made_instance(self, via: GlobalRef, cls: GlobalRef, methods: tuple[str, ...],
                      opname: str, at: int) -> None:
        """`via` makes an instance of `cls` (a NumPy array subclass by its source) and the load
        runs `methods` of it: recorded as those methods run, judged from its source."""
        if len(self.res.calls) < 200_000:
            self.res.calls.append(Call(cls, opname, at, [], "", runs=methods,
                                       role=f"of {via.key} makes"))

    def state_handed(self, via: GlobalRef, where: tuple[int, int], args: tuple, made: _Obj,
                     at: int) -> None:
        """`via` hands its state argument to the object it makes (`calls.SETS_STATE`): the
        class's own `__setstate__` runs with it (recorded as a BUILD of the class, judged from
        its source), or each name is set on the object, and a stored name the unpickler or
        later code calls is noted as a BUILD's is and kept for the BUILD or APPEND that calls
        it."""
        state_at, cls_at = where
        state = args[state_at] if state_at < len(args) else None
        cls = args[cls_at] if 0 <= cls_at < len(args) else None
        if isinstance(cls, GlobalRef) and not call_allowed(cls.key) and (
                len(self.res.calls) < 200_000):
            strings: list[str] = []
            strings_of(state, strings)
            self.res.calls.append(Call(cls, "BUILD", at, strings))
        self.stores_called(made, state, f"{via.key} sets",
                           "on the object it makes (torch's _set_obj_state)", at)

    def stores_called(self, inst: object, state: object, lead: str, where: str,
                      at: int) -> None:
        """A state set on `inst` (a BUILD's, or a rebuild's `_set_obj_state`) that stores a
        name the unpickler or later code calls (`values.called_attributes`): noted, and kept
        on the instance for the BUILD or APPEND that calls it (`stored_call`)."""
        called = called_attributes(state)
        if not called:
            return
        self.note("build-stores-called-attribute", f"{lead} {', '.join(sorted(called))} "
                  f"{where}: the unpickler (a later BUILD, APPENDS, ADDITEMS) or code that "
                  "copies or pickles it looks it up on the instance and calls it", at, True)
        if isinstance(inst, _Obj):
            inst.stored = {**(inst.stored or {}), **called}

    def container_source(self, pid: tuple, at: int) -> None:
        """torch.load's legacy reader, given `('module', obj, source_file, source)` with all
        three set, checks obj's source (`_check_container_source`): when it differs and
        `obj.dump_patches` is true it writes a diff to `<obj.__name__>.patch`, a path relative
        to the working folder or absolute. No class or function has `dump_patches` set but by
        a pickle's own BUILD on it; a value computed while loading cannot be checked."""
        obj = pid[1] if len(pid) > 1 else None
        if len(pid) < 4 or not all(v is UNKNOWN or bool(v) for v in pid[1:4]):
            return  # torch skips a container without its source saved
        if isinstance(obj, GlobalRef):
            if obj.key in self.built_globals:
                self.note("legacy-source-patch", f"a ('module', {obj.key}, …) persistent id makes "
                          "torch.load's legacy reader check its source and, with the "
                          "dump_patches and __name__ this pickle's BUILD set on it, write a "
                          "'<__name__>.patch' file of the pickle's text anywhere", at, True)
        else:
            self.note("legacy-source-patch", f"a ('module', {render(obj)[:80]}, …) persistent id "
                      "hands torch.load's legacy source check (which may write "
                      "'<obj.__name__>.patch' files) a value computed while loading, which "
                      "cannot be checked statically", at, True)

    def stored_call(self, inst: _Obj, name: str, args: tuple, opname: str, at: int) -> None:
        """`opname` calls `inst.<name>`, which an earlier BUILD (or a rebuild's `_set_obj_state`)
        stored on the instance: a call of what was stored there, judged as a REDUCE of it is
        (`via`)."""
        value = (inst.stored or {}).get(name, UNKNOWN)
        role = f"{opname} calls the {name} stored earlier on {render(inst)}"
        if isinstance(value, GlobalRef):
            strings: list[str] = []
            strings_of(args, strings)
            if len(self.res.calls) < 200_000:
                self.res.calls.append(Call(value, opname, at, strings, _shown(args), role))
        elif isinstance(value, _Obj) or value is UNKNOWN:
            self.note("indirect-call", f"{role}, a value computed while loading (not a plain "
                      "import), which cannot be checked statically", at, True)

    def joblib_array(self, state: object, at: int) -> None:
        """After a joblib NumpyArrayWrapper's BUILD (state `state`), read on as joblib does:
        step over the array's raw bytes, or walk the pickle an object array is written as."""
        items = getattr(state, "items", None)
        subclass = items.get("subclass") if isinstance(items, dict) else None
        if isinstance(subclass, GlobalRef) and subclass.key not in PLAIN_SUBCLASSES:
            self.res.calls.append(Call(subclass, "REDUCE", at, [], "",
                                       f"{WRAPPER} rebuilds its array as its subclass"))
        if not self.joblib:
            return
        found = layout(state)
        if isinstance(found, str) or (self.frame_end and self.pos < self.frame_end):
            why = found if isinstance(found, str) else "a FRAME goes on after it"
            self.note("joblib-array-unread", "joblib reads a NumPy array's bytes after this "
                      f"NumpyArrayWrapper, but {why}: the bytes after it were read as opcodes", at)
            return
        self.frame_end = 0  # joblib ends the FRAME before an array (commit_frame)
        start = self.pos
        if found.nbytes is None:
            if self.nested is None:
                self.note("limit", "joblib object arrays nested deeper than the scan bound", at)
                return
            inner = self.nested(start)
            res = self.res
            res.globals += inner.globals
            res.calls += inner.calls
            res.issues += inner.issues
            res.raw_spans += inner.raw_spans
            self.storages += [tuple(s) for s in inner.storages]
            for reason in inner.wo_blockers:
                self.block(reason)
            self.pos = inner.end
            return
        end = start + found.nbytes
        if found.aligned:
            end += 1 + self.data[self.take(1)]
        if end > self.n:
            raise Truncated
        self.pos = end
        if len(self.res.raw_spans) < 100_000:
            self.res.raw_spans.append((start, end))

    def reduce(self, func: object, args: object, at: int) -> _Obj:
        """REDUCE: record the call of `func` with `args`; returns the value it pushes."""
        if isinstance(func, GlobalRef) and func.key not in self.allowed:
            self.block(f"REDUCE of {func.key}")
        return self.add_call(func, args, "REDUCE", at)

    def persistent_id(self, pid: object, at: int) -> None:
        """Record a persistent id's storage reference and push what loading it gives; the
        loader runs protocols of the instances in it (`opcodes.PERSISTENT_ID_READS`)."""
        if isinstance(pid, tuple):
            self.handled(pid, "BINPERSID", "hands to torch.load's storage loader",
                         PERSISTENT_ID_READS, at)
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage"):
            numel = pid[4] if type(pid[4]) is int else -1
            self.storages.append((describe(pid[1]), describe(pid[2]), describe(pid[3]), numel,
                                  at))
        elif isinstance(pid, tuple) and pid and pid[0] not in ("storage", b"storage"):
            self.block("persistent id that is not a storage")
            if pid[0] in ("module", b"module"):
                self.container_source(pid, at)
            elif pid[0] in ("reduce_package", b"reduce_package") and len(pid) in (3, 4):
                # torch.package's persistent_load calls func(importer, *args), from a
                # ('reduce_package', [id,] func, args) id: a REDUCE of func
                args = pid[-1]
                self.stack.append(self.add_call(pid[-2], (UNKNOWN, *args) if isinstance(
                    args, tuple) else (UNKNOWN, args), "REDUCE", at))
                return
        self.stack.append(_Obj(None))
