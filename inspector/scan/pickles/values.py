"""The values a walk pushes in place of real objects, and how they read: as text for the
code-text check (`strings_of`), as short pseudo-Python (`render`), as the kind a container
opcode meets (`kind_of`)."""

from __future__ import annotations

from inspector.scan.pickles.records import GlobalRef, Held

# The classes' names show in findings (an import whose operand is a call's result names its
# type), so they keep the names they have always had.


# Names the unpickler or later code looks up on an instance and calls: BUILD calls
# `inst.__setstate__`, APPEND(S) `inst.append` / `inst.extend` of a non-list, ADDITEMS `inst.add`
# of a non-set; copy, pickle and NumPy look up `__deepcopy__`, `__reduce_ex__`, `__array__` ...
# on the instance too. A dict that sets one of them (BUILD state, keywords) is kept track of.
CALLED_METHODS = frozenset({"append", "extend", "add"})


def is_called_name(key: object) -> bool:
    """Whether an attribute named `key` is one the unpickler or later code calls by name."""
    return isinstance(key, str) and (key in CALLED_METHODS or (
        len(key) > 4 and key.startswith("__") and key.endswith("__")))


def watch_keys(target: object, flat: list) -> None:
    """Keep, on `target` (a dict being filled), its keys that name called attributes or
    pointer-like keywords (`WATCHED_KEYWORDS`), with their values; all of them, not the first 16."""
    hot = getattr(target, "hot", MISSING)
    if hot is MISSING:
        return
    for i in range(0, len(flat) - 1, 2):
        key = flat[i]
        computed = isinstance(key, _Obj | _Unknown)  # a value made while loading
        if computed or (isinstance(key, str) and (is_called_name(key)
                                                  or key in WATCHED_KEYWORDS)):
            if target.hot is None:
                target.hot = {}
            if len(target.hot) < 64:
                target.hot.setdefault(UNKNOWN if computed else key, flat[i + 1])


class _Obj:
    """Result of a call; `func` is the import that produced it (None when unknown). `detail`:
    what a later opcode needs to know of it, kept for a few callables only (a numpy.dtype's
    arguments and BUILD state, which size a joblib array: `joblib_arrays`). `hot`: when it is
    a dict filled with watched keys (`watch_keys`), those keys and values; `stored`: attributes
    a BUILD stored on it that the unpickler later calls (`__setstate__`, `append` ...);
    `cls`: its class where that is not `func` (copyreg._reconstructor's first argument);
    `held`: each import or made object a BUILD put into one of its attributes (`held_values`)."""

    __slots__ = ("cls", "detail", "func", "held", "hot", "stored")

    def __init__(self, func: GlobalRef | None, detail: object = None) -> None:
        self.func = func
        self.detail = detail
        self.hot: dict | None = None
        self.stored: dict | None = None
        self.cls: GlobalRef | None = None
        self.held: dict[str, object] | None = None

    def attributes(self, depth: int = 0) -> tuple[Held, ...]:
        """`held` as a `Call` records it, sorted by name: what each attribute holds, and what
        an instance there holds in turn (a few levels: a pickle may make an object hold
        itself)."""
        out = []
        for name, value in sorted((self.held or {}).items()):
            if isinstance(value, GlobalRef):
                out.append(Held(name, ref=value.key))
                continue
            ref = value.class_ref() if isinstance(value, _Obj) else None
            inner = value.attributes(depth + 1) if ref and depth < _HELD_DEPTH else ()
            out.append(Held(name, cls=(ref.module, ref.name) if ref else None, attrs=inner))
        return tuple(out)

    def class_ref(self) -> GlobalRef | None:
        """The import that is (or made) its class: a class NEWOBJ or REDUCE called, or
        copyreg._reconstructor's first argument; a function's import where a function made it
        (whose source then defines no method: nothing is judged)."""
        return self.cls or self.func


_HELD_DEPTH = 3  # levels of `_Obj.attributes`


def _held(value: object) -> bool:
    """Whether a state's value is one an instance's code may call or run methods of: an
    import, or an object made while loading."""
    return isinstance(value, GlobalRef | _Obj) or value is UNKNOWN


class _Seq:
    """A list, dict or set under construction; keeps a few strings for the code-text check and,
    for a dict, its first text-keyed items (a joblib array's wrapper state is one) and every
    item whose value is an import or an object the pickle made (`objs`, by its text key, or ""
    for a key computed while loading: as a BUILD state, what it puts into attributes)."""

    __slots__ = ("hot", "items", "kind", "made", "objs", "strings")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.strings: list[str] = []
        self.items: dict[str, object] | None = None  # made on a dict's first items
        self.hot: dict | None = None  # its watched keys (`watch_keys`), all of them
        self.objs: dict[str, object] | None = None
        # a list's items that are objects made while loading, or tuples or lists that may hold
        # some: code it is handed to iterates it and runs their protocols (`array('f', [x])`
        # asks each x's __float__), the first 64
        self.made: list[object] | None = None

    def keep_made(self, items: list) -> None:
        """Keep, in a list, the items that are or may hold objects made while loading."""
        for item in items:
            if isinstance(item, _Obj | tuple | _Seq) and len(self.made or ()) < 64:
                self.made = self.made or []
                self.made.append(item)

    def set_items(self, flat: list) -> None:
        """Keep the text-keyed items of `flat` (key, value, key, value ...), the first 16."""
        if self.kind != "dict":
            return
        watch_keys(self, flat)
        if self.items is None:
            self.items = {}
        items = self.items
        for i in range(0, len(flat) - 1, 2):
            key, value = flat[i], flat[i + 1]
            if not isinstance(key, str):
                if _held(value) and isinstance(key, _Obj | _Unknown):
                    self.objs = self.objs or {}
                    self.objs[""] = value  # a computed key: it may be any attribute's name
                continue
            if len(items) < 16:
                items[key] = value
            if _held(value):
                if self.objs is None:
                    self.objs = {}
                self.objs[key] = value


class _Big:
    """A string or bytes value too long to keep."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class _Unknown:
    __slots__ = ()


UNKNOWN = _Unknown()
MISSING = object()
# Keywords that hand torch's C constructors a raw pointer or handle: `UntypedStorage(size,
# allocator=ADDRESS)` casts it to a c10::Allocator* and calls through it; the legacy tensor
# constructor `torch.Tensor(cdata=ADDRESS)` wraps the address as a TensorImpl*.
WATCHED_KEYWORDS = frozenset({"allocator", "cdata"})
BIG = 1 << 16  # strings and bytes longer than this are kept as a length only


def strings_of(value: object, out: list[str], budget: int = 16, depth: int = 0) -> None:
    """Collect the text inside a call's arguments (tuples, lists) for the code-text check."""
    if len(out) >= budget:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, tuple):
        if depth < 8:  # hostile files nest tuples thousands deep
            for v in value:
                strings_of(v, out, budget, depth + 1)
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


def decode_text(raw: bytes) -> object:
    """Text of STRING/BINSTRING/SHORT_BINSTRING as Python 3's default ASCII decoding sees it."""
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return raw


def kind_of(value: object) -> str:
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


def describe(value: object) -> str:
    """Stable text for a persistent-id field (no object addresses)."""
    if isinstance(value, GlobalRef):
        return value.key
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if type(value) is int:
        return str(value)
    return f"<{kind_of(value)}>"


def _state_parts(state: object) -> tuple:
    """A BUILD state's dict part and slot part (`(dict, slots)`), or the state alone."""
    return state if isinstance(state, tuple) and len(state) == 2 else (state,)


def called_attributes(state: object) -> dict:
    """What a BUILD state stores that the unpickler or later code calls by name (its dict part
    and its slot part, `(dict, slots)`): name -> value."""
    found: dict = {}
    for part in _state_parts(state):
        hot = part.hot if isinstance(part, _Seq | _Obj) else None
        for key, value in (hot or {}).items():
            if is_called_name(key):
                found.setdefault(key, value)
    return found


OPAQUE = "*"  # `held_values`' name for a state no dict, which may hold code where it likes


def held_values(state: object) -> dict[str, object]:
    """What a BUILD state (its dict part and its slot part) puts into the instance's
    attributes that its code may call or run methods of: name ("" for a computed one, `OPAQUE`
    for a state that is no dict but holds such values) -> the import or the object made while
    loading."""
    found: dict[str, object] = {}
    for part in _state_parts(state):
        if isinstance(part, _Seq) and part.kind == "dict":
            found.update(part.objs or {})
        elif _may_hold_code(part, 0):  # the class's own __setstate__ places what it holds
            found[OPAQUE] = UNKNOWN
    return found


def _may_hold_code(value: object, depth: int) -> bool:
    """Whether a state that is no dict may hold an import or an object made while loading."""
    if isinstance(value, tuple):
        return depth > 8 or any(_may_hold_code(v, depth + 1) for v in value)
    return _held(value) or isinstance(value, _Seq)

