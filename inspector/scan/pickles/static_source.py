"""What an import IS, read from the installed modules' source text, never by importing them.

A pickle names a callable by the module it is reached through; a module that re-exports one
(`from subprocess import Popen` in torch's elastic `subprocess_handler`) hands out the same
object under a longer name. `resolve` follows such re-exports through the source files found
on `sys.path` (parsed with `ast`, no module the input names is imported or run), and
its classes' definitions, linearisations and the defs their bodies bind (aliases followed) are
read for `class_source`. Star imports are followed; anything else the source does not say
plainly (a lazy module, a compiled extension) is left unresolved: the caller judges the literal
name as before.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
from pathlib import Path

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


# --- a class's structure: its definition, linearisation and the defs its body binds --------
_MAX_CLASSES = 32  # classes of one linearisation
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


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
