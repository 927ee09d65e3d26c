"""What a class is, read from its installed source with `ast` (never imported): an enum whose
call only looks a member up (`is_enum_class`), whether it defines a method (`defines_method`),
and what a method the load runs reaches (`method_reaches`). Built on `static_source`'s
readers."""

from __future__ import annotations

import ast
import builtins
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from inspector.scan.pickles.records import Held
from inspector.scan.pickles.static_source import (
    _FUNCS,
    _MAX_HOPS,
    _binding,
    _class_def,
    _dotted,
    _method_in,
    _mro,
    _names,
    _ref,
    _top_level,
    _tree,
    module_file,
    resolve,
)
from inspector.scan.pickles.values import OPAQUE

_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"})


@functools.lru_cache(maxsize=1024)
def is_enum_class(module: str, name: str, hops: int = 0) -> bool:
    """Whether `module.name` is, by its source, a class whose bases lead to enum's classes."""
    module, name = resolve(module, name)
    if module == "enum" and name in _ENUM_BASES:
        return True
    if hops > _MAX_HOPS or "." in name:
        return False
    bound = _binding(module, name)
    if bound is None or bound[0] != "def" or not isinstance(bound[1], ast.ClassDef) or (
            _custom_call(module, bound[1])):
        return False
    path = module_file(module)
    for deco in bound[1].decorator_list:  # `@enum._simple_enum(IntFlag) class RegexFlag:`
        dotted = _dotted(deco.func if isinstance(deco, ast.Call) else deco)
        if dotted and dotted[-1] == "_simple_enum":
            return True
    for base in bound[1].bases:
        dotted = _dotted(base)
        if not dotted:
            continue
        if len(dotted) == 1:
            if is_enum_class(module, dotted[0], hops + 1):
                return True
            continue
        # `enum.Enum`, `some_module.Base`: the first part is an imported module
        tree = _tree(path) if path else None
        modules = {}
        for node in _top_level(tree.body if tree else []):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    modules[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
        if dotted[0] in modules and is_enum_class(
                ".".join([modules[dotted[0]], *dotted[1:-1]]), dotted[-1], hops + 1):
            return True
    return False


def _custom_call(module: str, node: ast.ClassDef) -> bool:
    """Whether the class names a metaclass whose `__call__` (what calling the class runs) is
    not enum's own, or one whose source cannot be read: then a call of it is no enum lookup."""
    for keyword in node.keywords:
        if keyword.arg != "metaclass":
            continue
        ref = _ref(module, keyword.value)
        meta = resolve(*ref) if ref else None
        if meta is None:
            return True
        if meta[0] == "enum":
            continue
        mro = _mro(*meta)
        found = _method_in(mro, "__call__") if mro else None
        if not mro or (found is not None and mro[found[0]][0] != "enum"):
            return True
    return False


@functools.lru_cache(maxsize=1024)
def defines_method(module: str, name: str, method: str) -> bool:
    """Whether the class's readable source (its own or a readable base's) defines `method`."""
    mro = _mro(module, name)
    return bool(mro) and _method_in(mro, method) is not None


@functools.lru_cache(maxsize=1024)
def source_bases(module: str, name: str) -> tuple[str, ...]:
    """Every base class the class's readable source and its readable bases' name (dotted, as
    re-exports resolve), those whose own source cannot be read (builtins, compiled) included:
    what a class derived from a C type inherits from it (its `__new__`) is then known."""
    found: list[str] = []
    for mod, cls in _mro(module, name):
        node = _class_def(mod, cls)
        for base in node[2].bases if node else ():
            ref = _ref(node[0], base)
            if ref is None:
                continue
            dotted = ".".join(resolve(*ref))
            if ref[0] == node[0] and _binding(*ref) is None and "." not in ref[1]:
                dotted = f"builtins.{ref[1]}"  # a name the module never binds: a builtin
            if dotted not in found:
                found.append(dotted)
    return tuple(found)


_NDARRAY = frozenset(f"numpy.{core}{sub}ndarray" for core in ("", "core.", "_core.")
                     for sub in ("", "multiarray."))


@functools.lru_cache(maxsize=256)
def array_subclass(module: str, name: str) -> tuple[str, str] | None:
    """Where the class `module.name` is defined, when its source shows a NumPy array subclass
    (its bases lead to numpy.ndarray), following the module's `from X import *` (numpy.rec's
    recarray); None where the source does not show one."""
    found = _class_def(module, name)
    if found is None and "." not in name:
        path = module_file(module)
        tree = _tree(path) if path else None
        stars = [n.module for n in _top_level(tree.body if tree else [])
                 if isinstance(n, ast.ImportFrom) and not n.level and n.module
                 and any(a.name == "*" for a in n.names)]
        return next((hit for hit in (array_subclass(m, name) for m in stars) if hit), None)
    if found is None or not _NDARRAY & set(source_bases(found[0], found[1])):
        return None
    return found[0], found[1]


# --- what a class's method calls, read from its source ----------------------------------------
# The load runs code a class defines without a call naming it (`opcodes.IMPLICIT_METHODS`,
# `HASHED`, `HANDED`). `method_reaches` finds the method in the class's source or its bases'
# (`static_source`'s linearisation, read through the module's imports) and follows what its
# body does a few calls deep: the instance's methods (`self.m()`, `super().m()`,
# `Base.m(self)`), the functions its module defines or imports, and the methods of what the
# pickle put into the instance's attributes. A method in compiled code, or one the source does
# not name plainly, is not found (None): the caller then judges the class's import alone.
_MAX_DEPTH = 4  # calls followed from the method (DefinedFunction.__new__ -> _new_ -> super)
_MAX_BODIES = 48  # function bodies read for one method
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_WRITE_MODES = frozenset("wax+")


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
