"""What a class is, read from its installed source with `ast` (never imported): an enum whose
call only looks a member up (`is_enum_class`), and whether it defines a method
(`defines_method`). Built on `static_source`'s readers."""

from __future__ import annotations

import ast
import functools

from inspector.scan.pickles.static_source import (
    _MAX_HOPS,
    _binding,
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
