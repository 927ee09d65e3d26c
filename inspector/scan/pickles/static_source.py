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
import functools
import sys
from pathlib import Path

_MAX_HOPS = 8
_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"})


@functools.lru_cache(maxsize=1024)
def module_file(module: str) -> Path | None:
    """The `.py` source of `module` on `sys.path` (a package's `__init__.py`), else None."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    for entry in sys.path:
        if not entry:
            continue  # the working folder: what a scan is run from decides nothing
        base = Path(entry)
        if not base.is_dir():
            continue
        folder = base.joinpath(*parts[:-1])
        for candidate in (folder / parts[-1] / "__init__.py", folder / f"{parts[-1]}.py"):
            try:
                if candidate.is_file():
                    return candidate
            except OSError:
                continue
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
    path = module_file(module)
    tree = _tree(path) if path else None
    if tree is None:
        return None
    found: tuple[str, object] | None = None
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
                if source and (alias.asname or alias.name) == name and alias.name != "*":
                    found = ("from", (source, alias.name))
                elif source and alias.name != "*":
                    imports.setdefault(alias.asname or alias.name, f"{source}.{alias.name}")
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == name:
                found = ("def", node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                dotted = _dotted(node.value)
                if dotted and len(dotted) > 1 and dotted[0] in imports:
                    real = imports[dotted[0]].split(".") + dotted[1:]
                    found = ("from", (".".join(real[:-1]), real[-1]))
                else:
                    found = ("other", node)
    return found


@functools.lru_cache(maxsize=4096)
def resolve(module: str, name: str) -> tuple[str, str]:
    """`module.name` followed through the re-exports its source states plainly: the module and
    name the object is defined under (itself where nothing is re-exported)."""
    head, dot, rest = name.partition(".")
    current = (module, head)
    for _ in range(_MAX_HOPS):
        bound = _binding(*current)
        if bound is None or bound[0] != "from":
            break
        src_module, src_name = bound[1]
        # `from pkg import sub` may name a submodule: its attribute then lives in it
        if module_file(f"{src_module}.{src_name}") is not None and not rest:
            break
        current = (src_module, src_name)
    return current[0], current[1] + dot + rest


@functools.lru_cache(maxsize=1024)
def is_enum_class(module: str, name: str, hops: int = 0) -> bool:
    """Whether `module.name` is, by its source, a class whose bases lead to enum's classes."""
    module, name = resolve(module, name)
    if module == "enum" and name in _ENUM_BASES:
        return True
    if hops > _MAX_HOPS or "." in name:
        return False
    bound = _binding(module, name)
    if bound is None or bound[0] != "def" or not isinstance(bound[1], ast.ClassDef):
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
