"""What a class is, read from its installed source with `ast` (never imported): an enum whose
call only looks a member up (`is_enum_class`), and whether it defines a method
(`defines_method`). Built on `static_source`'s readers."""

from __future__ import annotations

import ast
import functools

from inspector.scan.pickles.static_source import (
    _MAX_HOPS,
    _binding,
    _class_def,
    _dotted,
    _method_in,
    _mro,
    _ref,
    _top_level,
    _tree,
    module_file,
    resolve,
)

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
