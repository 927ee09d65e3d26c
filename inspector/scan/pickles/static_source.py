"""What an import IS, read from the installed modules' source text, never by importing them.

A pickle names a callable by the module it is reached through; a module that re-exports one
(`from subprocess import Popen` in torch's elastic `subprocess_handler`) hands out the same
object under a longer name. `resolve` follows such re-exports through the source files found
on `sys.path` (parsed with `ast`, no module the input names is imported or run), and
`is_enum_class` says whether a class is statically an enum (its bases lead to `enum.Enum`).
Anything the source does not say plainly (a `from x import *`, a lazy module, a compiled
extension) is left unresolved: the caller judges the literal name as before.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from inspector.scan.pickles.records import Held
from inspector.scan.pickles.values import OPAQUE

_MAX_HOPS = 8


@functools.lru_cache(maxsize=1024)
def module_file(module: str) -> Path | None:
    """The `.py` source of `module` on `sys.path` (a package's `__init__.py`), else None."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    # plain strings until a hit: a cold scan asks ~1,100 times, and Path parsing cost ~30 ms
    for entry in sys.path:
        if not entry:
            continue  # the working folder: what a scan is run from decides nothing
        folder = os.path.join(entry, *parts[:-1])
        for candidate in (os.path.join(folder, parts[-1], "__init__.py"),
                          os.path.join(folder, f"{parts[-1]}.py")):
            if os.path.isfile(candidate):
                return Path(candidate)
    return None


@functools.lru_cache(maxsize=512)
def _tree(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > 4_000_000:
            return None
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def _top_level(body: list[ast.stmt]):
    """Statements run when the module is imported: the body, into if/try/with blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _top_level(node.body)
            yield from _top_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(h.body for h in node.handlers)):
                yield from _top_level(block)


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str | None:
    """The module an ImportFrom in `module` (its file `path`) names."""
    if not node.level:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if node.level - 1 > len(package):
        return None
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else [])) or None


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _binding(module: str, name: str) -> tuple[str, object] | None:
    """What binds `name` at the top level of `module`: ("def", node), ("from", (module, name))
    or None where the source does not say (the last plain binding wins, as at import)."""
    return _bindings(module).get(name)


@functools.lru_cache(maxsize=1024)
def _bindings(module: str) -> dict[str, tuple[str, object]]:
    """`_binding` of every name `module` binds at its top level, in one walk of its source."""
    path = module_file(module)
    tree = _tree(path) if path else None
    if tree is None:
        return {}
    found: dict[str, tuple[str, object]] = {}
    imports: dict[str, str] = {}  # `import a.b as c` bindings seen so far
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    imports[head] = head
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            for alias in node.names:
                if source and alias.name != "*":
                    found[alias.asname or alias.name] = ("from", (source, alias.name))
                    imports.setdefault(alias.asname or alias.name, f"{source}.{alias.name}")
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = ("def", node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            dotted = _dotted(node.value)
            for target in (t for t in targets if isinstance(t, ast.Name)):
                if dotted and len(dotted) > 1 and dotted[0] in imports:
                    real = imports[dotted[0]].split(".") + dotted[1:]
                    found[target.id] = ("from", (".".join(real[:-1]), real[-1]))
                else:
                    found[target.id] = ("other", node)
    return found


def cache_dir() -> Path:
    """Where this project keeps what it derives from installed source (per file version)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ckpt-inspector"


# Bumped when what the cache holds changes (format 2: names a star import brings in)
_BINDINGS_FORMAT = 2
_STAR_STACK: set[str] = set()  # star imports being followed (a cycle ends there)


def _star_modules(module: str) -> list[str]:
    """The modules `module` star-imports at its top level (`from .distributed_c10d import *`)."""
    path = module_file(module)
    tree = _tree(path) if path else None
    if tree is None:
        return []
    return [source for node in _top_level(tree.body) if isinstance(node, ast.ImportFrom)
            and any(a.name == "*" for a in node.names)
            and (source := _absolute(module, path, node))]


def _exported(module: str) -> set[str]:
    """Every name `module` binds or re-exports, which a star import of it may bring in (a name
    the star would not bring, being private, only fails the load that asks for it)."""
    if module in _STAR_STACK:
        return set()
    _STAR_STACK.add(module)
    try:
        return set(_bindings(module)) | set(_reexports(module))
    finally:
        _STAR_STACK.discard(module)


@functools.lru_cache(maxsize=1024)
def _reexports(module: str) -> dict[str, tuple[str, str]]:
    """The names `module` re-exports (`_bindings`' "from" ones, and what its star imports bring
    in): kept on disk per file version
    (`~/.cache/ckpt-inspector/source-bindings/`), so a scan does not parse torch's 110 KB
    `__init__.py` (15 ms) again in every process; the cache holds only what the installed
    source says."""
    path = module_file(module)
    if path is None:
        return {}
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = f"{_BINDINGS_FORMAT}|{path}|{st.st_size}|{st.st_mtime_ns}"
    cache = cache_dir() / "source-bindings" / f"{hashlib.sha256(stamp.encode()).hexdigest()}.json"
    try:
        doc = json.loads(cache.read_text(encoding="utf-8"))
        if doc.get("stamp") == stamp:
            return {k: (v[0], v[1]) for k, v in doc["reexports"].items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    bound = _bindings(module)
    found = {name: b[1] for name, b in bound.items() if b[0] == "from"}
    for star in _star_modules(module):
        for name in _exported(star):
            if name not in bound:
                found.setdefault(name, (star, name))
    try:
        from inspector.core.atomic import write_text_atomic

        cache.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache, json.dumps({"stamp": stamp, "reexports": found}),
                          overwrite=True)
    except OSError:
        pass  # a read-only home only costs a parse next time
    return found  # type: ignore[return-value]


@functools.lru_cache(maxsize=4096)
def resolve(module: str, name: str) -> tuple[str, str]:
    """`module.name` followed through the re-exports its source states plainly: the module and
    name the object is defined under (itself where nothing is re-exported)."""
    head, dot, rest = name.partition(".")
    current = (module, head)
    for _ in range(_MAX_HOPS):
        source = _reexports(current[0]).get(current[1])
        if source is None:
            break
        src_module, src_name = source
        # `from pkg import sub` may name a submodule: its attribute then lives in it
        if module_file(f"{src_module}.{src_name}") is not None and not rest:
            break
        current = (src_module, src_name)
    return current[0], current[1] + dot + rest


# --- what a class's method calls, read from its source ----------------------------------------
# The load runs code a class defines without a call naming it (`opcodes.IMPLICIT_METHODS`,
# `HASHED`, `HANDED`). `method_reaches` finds the method in the class's source or its bases'
# (their linearisation, read through the module's imports) and follows what its body does a
# few calls deep: the instance's methods (`self.m()`, `super().m()`, `Base.m(self)`), the
# functions its module defines or imports, and the methods of what the pickle put into the
# instance's attributes. A method in compiled code, or one the source does not name plainly, is
# not found (None): the caller then judges the class's import alone.
_MAX_CLASSES = 32  # classes of one linearisation
_MAX_DEPTH = 4  # calls followed from the method (DefinedFunction.__new__ -> _new_ -> super)
_MAX_BODIES = 48  # function bodies read for one method
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_WRITE_MODES = frozenset("wax+")


@functools.lru_cache(maxsize=512)
def _names(module: str) -> dict[str, str]:
    """Local name -> dotted name, from every import in the module's source (relative ones
    resolved; imports inside functions too, where sympy makes many)."""
    path = module_file(module)
    tree = _tree(path) if path else None
    names: dict[str, str] = {}
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Import):
            for a in node.names:
                head = a.name.split(".", 1)[0]
                names[a.asname or head] = a.name if a.asname else head
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            for a in node.names:
                if source and a.name != "*":
                    names[a.asname or a.name] = f"{source}.{a.name}"
    return names


def _class_def(module: str, name: str) -> tuple[str, str, ast.ClassDef] | None:
    """(module, qualified name, its ClassDef) of the class `module.name` is, by its source."""
    module, name = resolve(module, name)
    head, _, rest = name.partition(".")
    bound = _binding(module, head)
    if bound is None or bound[0] != "def" or not isinstance(bound[1], ast.ClassDef):
        return None
    node = bound[1]
    for part in rest.split(".") if rest else ():
        node = next((n for n in node.body if isinstance(n, ast.ClassDef) and n.name == part),
                    None)
        if node is None:
            return None
    return module, name, node


def _ref(module: str, expr: ast.expr) -> tuple[str, str] | None:
    """The (module, name) a base class or called class written `expr` in `module` names."""
    if isinstance(expr, ast.Subscript):  # Generic[T], Mapping[str, int]
        expr = expr.value
    dotted = _dotted(expr)
    if not dotted:
        return None
    if len(dotted) == 1:
        imported = _names(module).get(dotted[0])
        if imported and "." in imported and _binding(module, dotted[0]) is None:
            return tuple(imported.rsplit(".", 1))  # imported inside a function
        return module, dotted[0]
    imported = _names(module).get(dotted[0])
    if imported is None:
        return (module, ".".join(dotted)) if _binding(module, dotted[0]) else None
    return resolve(".".join([imported, *dotted[1:-1]]), dotted[-1])


@functools.lru_cache(maxsize=1024)
def _mro(module: str, name: str, depth: int = 0) -> tuple[tuple[str, str], ...]:
    """The class's linearisation (C3, as Python computes it) over the classes whose source can
    be read; bases that cannot (builtins, compiled) are left out."""
    found = _class_def(module, name) if depth <= _MAX_HOPS * 2 else None
    if found is None:
        return ()
    module, name, node = found
    bases = [b for b in (_ref(module, e) for e in node.bases) if b is not None]
    bases = [(m, n) for m, n in (resolve(*b) for b in bases) if _class_def(m, n)]
    seqs = [list(_mro(*b, depth=depth + 1)) for b in bases] + [list(bases)]
    out = [(module, name)]
    while len(out) < _MAX_CLASSES:
        seqs = [s for s in seqs if s]
        head = next((s[0] for s in seqs if not any(s[0] in t[1:] for t in seqs)), None)
        if head is None:
            break  # done, or no consistent order: what was ordered stands
        out.append(head)
        for s in seqs:
            if s[0] == head:
                del s[0]
    return tuple(out)


def _method_in(mro: tuple[tuple[str, str], ...], method: str, start: int = 0
               ) -> tuple[int, ast.FunctionDef | ast.expr] | None:
    """The first class of `mro[start:]` whose body binds `method`: its index and def, or the
    expression an alias binds it to where the source does not lead to a def
    (`__setattr__ = _ProxyLookup(...)`: the method exists, what it runs is unknown)."""
    for i in range(start, len(mro)):
        found = _class_def(*mro[i])
        if found is None:
            continue
        bound = _class_binding(found[0], mro, i, found[2].body, method, 0)
        if bound is not None:
            return bound
    return None


def _class_binding(module: str, mro: tuple[tuple[str, str], ...], at: int,
                   body: list[ast.stmt], name: str, hops: int
                   ) -> tuple[int, ast.FunctionDef | ast.expr] | None:
    """What binds `name` in a class body, the last binding winning as at class creation: a def,
    or an alias (`__del__ = close`, `__setstate__ = Base.__setstate__`) followed to its def."""
    bound = None
    for item in _top_level(body):
        if isinstance(item, _FUNCS) and item.name == name:
            bound = (at, item)
        elif isinstance(item, ast.Assign | ast.AnnAssign) and item.value is not None and any(
                isinstance(t, ast.Name) and t.id == name
                for t in (item.targets if isinstance(item, ast.Assign) else [item.target])):
            bound = _alias(module, mro, at, body, item.value, hops) or (at, item.value)
    return bound


def _alias(module: str, mro: tuple[tuple[str, str], ...], at: int, body: list[ast.stmt],
           value: ast.expr, hops: int) -> tuple[int, ast.FunctionDef | ast.expr] | None:
    """The def an alias's value names: another name of the same body, a function of the
    module, or `Base.method` of a class in the instance's linearisation; None otherwise."""
    parts = _dotted(value)
    if not parts or hops > _MAX_HOPS:
        return None
    if len(parts) == 1:
        inner = _class_binding(module, mro, at, body, parts[0], hops + 1)
        if inner is not None:
            return inner
        bound = _binding(module, parts[0])
        return (at, bound[1]) if bound and bound[0] == "def" and isinstance(
            bound[1], _FUNCS) else None
    if len(parts) == 2:
        ref = _ref(module, ast.Name(parts[0]))
        base = resolve(*ref) if ref else None
        if base in mro:
            return _method_in(mro, parts[1], mro.index(base))
    return None


def _reads_only(call: ast.Call) -> bool:
    """Whether an `open(...)` call opens for reading only (its mode a literal without w, a, x
    or +, or left at 'r')."""
    mode = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None:
        return not any(k.arg is None for k in call.keywords) and len(call.args) <= 1
    return (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
            and not _WRITE_MODES & set(mode.value))


def _target(module: str, parts: list[str]) -> str:
    """The dotted name a call written `parts` in `module` reaches."""
    imported = _names(module).get(parts[0])
    if imported is not None:
        return ".".join([imported, *parts[1:]])
    bound = _binding(module, parts[0])
    if bound is not None and bound[0] == "def":
        return ".".join([module, *parts])
    if len(parts) == 1 and hasattr(builtins, parts[0]):
        return f"builtins.{parts[0]}"
    return ".".join(parts)  # a local name's attribute (`fh.write`), or a name set otherwise


# What a statement runs on an object beside calls: subscripts, loops, `with`, comparisons,
# operators (by their `ast` class's name), truth tests, builtins (`len(x)`: `x.__len__`).
_DUNDER = {op: f"__{name}__" for op, name in (
    ("Add", "add"), ("Sub", "sub"), ("Mult", "mul"), ("MatMult", "matmul"), ("Div", "truediv"),
    ("FloorDiv", "floordiv"), ("Mod", "mod"), ("Pow", "pow"), ("LShift", "lshift"),
    ("RShift", "rshift"), ("BitOr", "or"), ("BitXor", "xor"), ("BitAnd", "and"), ("Eq", "eq"),
    ("NotEq", "ne"), ("Lt", "lt"), ("LtE", "le"), ("Gt", "gt"), ("GtE", "ge"), ("Not", "bool"),
    ("USub", "neg"), ("UAdd", "pos"), ("Invert", "invert"))}
_BUILTIN_RUNS = {"len": ("__len__",), "next": ("__next__",), "str": ("__str__",),
                 "repr": ("__repr__",), "hash": ("__hash__",), "bool": ("__bool__", "__len__"),
                 "int": ("__int__", "__index__"), "float": ("__float__", "__index__"),
                 "format": ("__format__",), "abs": ("__abs__",), "reversed": ("__reversed__",),
                 "dict": ("keys", "__getitem__", "__iter__"),
                 **dict.fromkeys(("list", "tuple", "set", "frozenset", "sorted", "sum", "min",
                                  "max", "any", "all", "enumerate", "zip", "map", "filter",
                                  "iter"), ("__iter__", "__len__"))}
_SUBSCRIPT = {ast.Store: "__setitem__", ast.Load: "__getitem__", ast.Del: "__delitem__"}


def _protocols(node: ast.AST):
    """(expression, method) for each protocol method `node` runs on an object it does not call
    by name."""
    if isinstance(node, ast.Subscript):
        yield node.value, _SUBSCRIPT.get(type(node.ctx), "__getitem__")
    elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        yield node.iter, "__iter__"
    elif isinstance(node, ast.With | ast.AsyncWith):
        for item in node.items:
            yield from ((item.context_expr, m) for m in ("__enter__", "__exit__"))
    elif isinstance(node, ast.Compare):
        for op, right in zip(node.ops, node.comparators, strict=False):
            yield ((right, "__contains__") if isinstance(op, ast.In | ast.NotIn)
                   else (node.left, _DUNDER.get(type(op).__name__, "__eq__")))
    elif isinstance(node, ast.BinOp | ast.AugAssign | ast.UnaryOp):
        operand = node.left if isinstance(node, ast.BinOp) else (
            node.target if isinstance(node, ast.AugAssign) else node.operand)
        dunder = _DUNDER.get(type(node.op).__name__, "__eq__")
        yield operand, dunder
        if isinstance(node, ast.AugAssign):
            yield operand, dunder.replace("__", "__i", 1)  # `+=` runs __iadd__, else __add__
    elif isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
        yield node.test, "__bool__"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        for method in _BUILTIN_RUNS.get(node.func.id, ()):
            yield node.args[0], method


def _uses(body: list[ast.stmt]):
    """What a function body does when it runs: (call, None) for each call, (expression,
    method) for each protocol method run without a call (nested functions and lambdas left
    out: they run only when called)."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call):
            yield node, None
        yield from _protocols(node)
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _NESTED))


class Reach(NamedTuple):
    """What one method reaches: the class and method that defines it, the deny-list reasons
    (with the path of calls to each), and each value the pickle stored that it calls
    (`stored`: the import's dotted name, or "" for a value made while loading; the path)."""

    where: str
    reasons: tuple[str, ...]
    stored: tuple[tuple[str, str], ...] = ()


def _held_at(held: tuple[Held, ...], chain: list[str]) -> Held | None:
    """What the attribute chain `self.a.b` (`chain` ["a", "b"]) holds, by the pickle's state
    (a computed key, "", may be any name)."""
    found = None
    for name in chain:
        found = next((h for h in held if h.name == name), None) or next(
            (h for h in held if not h.name), None)
        held = found.attrs if found is not None else ()
    return found


@functools.lru_cache(maxsize=2048)
def method_reaches(module: str, name: str, method: str, judge: Callable[[str], str | None],
                   attributes: tuple[Held, ...] = ()) -> Reach | None:
    """What `module.name`'s `method` reaches that `judge` (dotted target -> reason or None)
    denies, or None where the method is not in the class's readable source. `attributes`:
    what the pickle's BUILD states put into the instance's attributes (`Call.attrs`): a call
    `self.<attribute>.m()`, or a protocol (`self.a[k] = v`, `for x in self.a`) runs that
    instance's class's method, followed as the instance's own are; a call `self.<attribute>()`
    of an attribute no method names calls what is stored there (`Reach.stored`)."""
    mro = _mro(module, name)
    found = _method_in(mro, method) if mro else None
    if found is None:
        return None
    index, node = found
    follow = _Follow(judge)
    where = f"{mro[index][1].rsplit('.', 1)[-1]}.{method}"
    follow.visit(mro[index][0], mro, index, node, where, 0, attributes)
    return Reach(where, tuple(follow.reasons), tuple(follow.stored))


@dataclass
class _Follow:
    """One `method_reaches` walk: the judge, what it found, the bodies it read."""

    judge: Callable[[str], str | None]
    reasons: list[str] = field(default_factory=list)
    stored: list[tuple[str, str]] = field(default_factory=list)
    seen: set = field(default_factory=set)

    def denied(self, target: str) -> str | None:
        """The judge's reason for a dotted target, or for what it re-exports."""
        real = ".".join(resolve(*target.rsplit(".", 1))) if "." in target else target
        return self.judge(target) or (self.judge(real) if real != target else None)

    def deny(self, reason: str, path: str) -> None:
        """Keep one reason (the first eight), with the path of calls where there is one."""
        text = f"{reason} (through {path})" if " → " in path else reason
        if len(self.reasons) < 8 and text not in self.reasons:
            self.reasons.append(text)

    def visit(self, mod: str, klass: tuple, cls_at: int | None,
              fn: ast.FunctionDef | ast.expr, path: str,
              depth: int, held: tuple[Held, ...]) -> None:
        """Judge what `fn` (of `klass[cls_at]`, or a function of `mod`) does when it runs."""
        if (id(fn), held) in self.seen or len(self.seen) >= _MAX_BODIES:
            return
        self.seen.add((id(fn), held))
        if not isinstance(fn, _FUNCS):  # an alias the source does not lead to a def
            self.deny(f"`{path.rsplit(' → ', 1)[-1]}` is bound in the class body to "
                      f"`{ast.unparse(fn)[:80]}`, which this scan cannot follow", path)
            return
        first = fn.args.posonlyargs + fn.args.args
        this = first[0].arg if first and cls_at is not None else None  # self / cls
        for node, method in _uses(fn.body):
            if method is not None:  # a protocol: self's own method, or an attribute's class's
                parts = _dotted(node)
                if depth < _MAX_DEPTH and parts and parts[0] == this:
                    self.on_instance(klass, cls_at, held, parts[1:], method, path, depth)
                continue
            parts = _dotted(node.func)
            passed = [p for p in (_dotted(a) for a in node.args) if p]  # map(sympify, args)
            for each in ([parts] if parts else []) + passed:
                if each[0] == this:
                    continue
                target = _target(mod, each)
                if target in ("builtins.open", "io.open") and each is parts and (
                        _reads_only(node)):
                    continue
                reason = self.denied(target)
                if reason:
                    self.deny(reason, path)
            if depth >= _MAX_DEPTH:
                continue
            if parts and parts[0] == this and len(parts) > 1 and not (
                    len(parts) == 2 and _method_in(klass, parts[1])):
                self.on_instance(klass, cls_at, held, parts[1:-1], parts[-1], path, depth)
                continue
            nxt = _next(mod, klass, cls_at, node, parts, this)
            if nxt is not None:
                n_mod, n_at, n_fn, n_name = nxt
                self.visit(n_mod, klass, n_at, n_fn, f"{path} → {n_name}", depth + 1, held)

    def on_instance(self, klass: tuple, cls_at: int | None, held: tuple[Held, ...],
                    chain: list[str], method: str, path: str, depth: int) -> None:
        """`self.<chain>.<method>` runs: the method of the class of the instance (or of what the
        pickle put at `chain`), else, called, what the pickle stored under that name."""
        if chain:
            owner = _held_at(held, chain)
            if owner is None:
                return
            # a class whose source cannot be read (types.SimpleNamespace) still calls what the
            # pickle stored in its instance's attributes: they shadow the type's methods
            klass = _mro(*owner.cls) if owner.cls else ()
            held = owner.attrs
        hit = _method_in(klass, method) if klass else None
        if hit is not None:
            self.visit(klass[hit[0]][0], klass, hit[0], hit[1],
                       f"{path} → {klass[hit[0]][1].rsplit('.', 1)[-1]}.{method}", depth + 1,
                       held)
            return
        value = _held_at(held, [method]) if not method.startswith("__") else None
        if value is None:
            return
        path = f"{path} → self.{'.'.join([*chain, method])}"
        called = _mro(*value.cls) if value.cls and not value.ref else ()  # an instance's class
        if _method_in(called, "__call__") and OPAQUE not in (h.name for h in value.attrs):
            self.on_instance(called, 0, value.attrs, [], "__call__", path, depth)
        elif len(self.stored) < 8 and (value.ref, path) not in self.stored:
            self.stored.append((value.ref, path))  # the caller judges it as a REDUCE of it


def _function(mod: str, module: str, name: str):
    """`_next`'s answer for a call in `mod` of `module.name`: followed only within the same
    top-level package (another package's or the standard library's is judged by name)."""
    src, fname = resolve(module, name)
    if src.partition(".")[0] != mod.partition(".")[0]:
        return None
    bound = _binding(src, fname) if "." not in fname else None
    if bound and bound[0] == "def" and isinstance(bound[1], _FUNCS):
        return src, None, bound[1], f"{src}.{fname}"
    return None


def _next(mod: str, klass: tuple, cls_at: int | None, call: ast.Call, parts: list[str] | None,
          this: str | None):
    """The function a call in a method's code runs, where the source says plainly: the
    instance's own method (`self.m()`, `super().m()`, `Base.m(self)`), or a function the
    module defines or imports by name."""
    func = call.func
    if parts and len(parts) == 2 and parts[0] == this and cls_at is not None:
        hit = _method_in(klass, parts[1])  # self.m(), cls.m(): the instance's class
    elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)
          and _dotted(func.value.func) == ["super"] and cls_at is not None):
        hit = _method_in(klass, func.attr, cls_at + 1)  # super().m()
    elif parts and len(parts) == 1:
        bound = _binding(mod, parts[0])  # a function of the same module, by name
        if bound and bound[0] == "def" and isinstance(bound[1], _FUNCS):
            return mod, None, bound[1], parts[0]
        # `from sympy.core.function import expand`: the function it imports
        imported = _names(mod).get(parts[0]) if bound is None or bound[0] == "from" else None
        return _function(mod, *imported.rsplit(".", 1)) if imported and "." in imported else None
    elif parts and len(parts) == 2:
        ref = _ref(mod, ast.Name(parts[0]))  # Base.m(self): a class the module names
        other = _mro(*resolve(*ref)) if ref else ()
        got = _method_in(other, parts[1]) if other else None
        if got is None:  # `function.expand(x)`: a function of a module it imports
            imported = _names(mod).get(parts[0])
            return _function(mod, imported, parts[1]) if imported else None
        # the instance is still of the pickled class: its self.m() calls follow its MRO
        at = klass.index(other[got[0]]) if other[got[0]] in klass else cls_at
        return other[got[0]][0], at, got[1], f"{other[got[0]][1]}.{parts[1]}"
    else:
        return None
    if hit is None:
        return None
    at, fn = hit
    name = fn.name if isinstance(fn, _FUNCS) else (parts[-1] if parts else func.attr)
    return klass[at][0], at, fn, f"{klass[at][1].rsplit('.', 1)[-1]}.{name}"
