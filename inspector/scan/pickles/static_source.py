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


@functools.lru_cache(maxsize=1024)
def _reexports(module: str) -> dict[str, tuple[str, str]]:
    """The names `module` re-exports (`_bindings`' "from" ones): kept on disk per file version
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
    stamp = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    cache = cache_dir() / "source-bindings" / f"{hashlib.sha256(stamp.encode()).hexdigest()}.json"
    try:
        doc = json.loads(cache.read_text(encoding="utf-8"))
        if doc.get("stamp") == stamp:
            return {k: (v[0], v[1]) for k, v in doc["reexports"].items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    found = {name: bound[1] for name, bound in _bindings(module).items()
             if bound[0] == "from"}
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


# --- what a class's method calls, read from its source ----------------------------------------
# The unpickler runs code a class defines on opcodes that are no call: NEWOBJ runs
# `cls.__new__`, BUILD `__setstate__`, SETITEM(S) on a non-dict `__setitem__`, APPEND(S) on a
# non-list `extend` or `append`, ADDITEMS on a non-set `add`. `method_reaches` finds the method
# in the class's source or its bases' (their linearisation, read through the module's imports)
# and follows what its body calls: methods of the instance (`self.m()`, `cls.m()`, `super().m()`,
# `Base.m(self)`) and functions of the same module called by name, a few calls deep. A method in
# a compiled module, or any the source does not name plainly, is not found (None): the caller
# then judges the class's import alone.
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
               ) -> tuple[int, ast.FunctionDef] | None:
    """The first class of `mro[start:]` whose body defines `method`: its index and def."""
    for i in range(start, len(mro)):
        found = _class_def(*mro[i])
        if found is None:
            continue
        for item in found[2].body:
            if isinstance(item, _FUNCS) and item.name == method:
                return i, item
    return None


def _calls(body: list[ast.stmt]):
    """The calls a function body makes when it runs (nested functions and lambdas left out:
    they run only when called)."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call):
            yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _NESTED))


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


@functools.lru_cache(maxsize=2048)
def method_reaches(module: str, name: str, method: str, judge: Callable[[str], str | None],
                   attributes: tuple[tuple[str, str, str], ...] = ()
                   ) -> tuple[str, tuple[str, ...]] | None:
    """What `module.name`'s `method` reaches that `judge` (dotted target -> reason or None)
    denies: (the class and method that defines it, the reasons, each with the path of calls
    that gets there), or None where the method is not in the class's readable source.
    `attributes`: (attribute, module, class) of each instance the pickle put into an attribute
    of the instance (`Call.attrs`, from its BUILD states): a call `self.<attribute>.m()` runs
    that class's `m`, followed as the instance's own methods are."""
    mro = _mro(module, name)
    found = _method_in(mro, method) if mro else None
    if found is None:
        return None
    index, node = found
    where = f"{mro[index][1].rsplit('.', 1)[-1]}.{method}"
    reasons: list[str] = []
    seen: set[int] = set()

    def denied(target: str) -> str | None:
        reason = judge(target)
        if reason is None and "." in target:
            real = ".".join(resolve(*target.rsplit(".", 1)))
            reason = judge(real) if real != target else None
        return reason

    def visit(mod: str, klass: tuple, cls_at: int | None, fn: ast.FunctionDef, path: str,
              depth: int, attrs: dict[str, tuple[str, str]]) -> None:
        if id(fn) in seen or len(seen) >= _MAX_BODIES:
            return
        seen.add(id(fn))
        first = fn.args.posonlyargs + fn.args.args
        this = first[0].arg if first and cls_at is not None else None  # self / cls
        for call in _calls(fn.body):
            parts = _dotted(call.func)
            passed = [p for p in (_dotted(a) for a in call.args) if p]  # map(sympify, args)
            for each in ([parts] if parts else []) + passed:
                if each[0] == this:
                    continue
                target = _target(mod, each)
                if target in ("builtins.open", "io.open") and each is parts and (
                        _reads_only(call)):
                    continue
                reason = denied(target)
                if reason and len(reasons) < 8:
                    text = f"{reason} (through {path})" if " → " in path else reason
                    if text not in reasons:
                        reasons.append(text)
            if depth >= _MAX_DEPTH:
                continue
            held = attrs.get(parts[1]) if parts and len(parts) == 3 and parts[0] == this else None
            other = _mro(*held) if held else ()
            got = _method_in(other, parts[2]) if other else None
            if got is not None:  # self.<attribute>.m(): the pickled instance's own method
                o_at, o_fn = got
                visit(other[o_at][0], other, o_at, o_fn,
                      f"{path} → {other[o_at][1].rsplit('.', 1)[-1]}.{o_fn.name}", depth + 1, {})
                continue
            nxt = _next(mod, klass, cls_at, call, parts, this)
            if nxt is not None:
                n_mod, n_at, n_fn, n_name = nxt
                visit(n_mod, klass, n_at, n_fn, f"{path} → {n_name}", depth + 1, attrs)

    def _next(mod, klass, cls_at, call, parts, this):
        """The function a call in the method's code runs, where the source says plainly."""
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
            return None
        elif parts and len(parts) == 2:
            ref = _ref(mod, ast.Name(parts[0]))  # Base.m(self): a class the module names
            other = _mro(*resolve(*ref)) if ref else ()
            got = _method_in(other, parts[1]) if other else None
            if got is None:
                return None
            # the instance is still of the pickled class: its self.m() calls follow its MRO
            at = klass.index(other[got[0]]) if other[got[0]] in klass else cls_at
            return other[got[0]][0], at, got[1], f"{other[got[0]][1]}.{parts[1]}"
        else:
            return None
        if hit is None:
            return None
        at, fn = hit
        return klass[at][0], at, fn, f"{klass[at][1].rsplit('.', 1)[-1]}.{fn.name}"

    visit(mro[index][0], mro, index, node, where, 0, {a: (m, n) for a, m, n in attributes})
    return where, tuple(reasons)
