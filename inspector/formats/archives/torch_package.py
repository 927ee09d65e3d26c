"""torch.package archives: the Python source an archive ships, which its loader runs.

A torch.package archive (`torch.package.PackageExporter`) is a zip whose one folder holds
`.data/version`, `.data/extern_modules` (the modules left to the loading interpreter), pickles
(`*.pkl`) and the source of every module it interns (`a/b.py`, `a/__init__.py`).
`torch.package.PackageImporter` resolves each module a pickle names, and each import the
package's own code makes, against that tree first: an interned module's source runs at load, in
place of any module of the same name. So the sources are read as code here (parsed with `ast`,
never run): each is reported with the loader that runs it, and is dangerous where it shadows a
standard or allowed module, or where what runs at import or unpickling reaches a capability on
the deny list. A pickle global that resolves to an interned module is judged as that code.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import os
import re
import shutil
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Severity
from inspector.formats.archives import python_source, zipread
from inspector.scan.pickles.opcodes import IMPLICIT_METHODS
from inspector.scan.pickles.policy import (
    CALL_ALLOWED,
    DENY,
    DENY_LEAF_NAMES,
    DENY_MODULES,
    KNOWN_DATA,
    weights_only_rules,
)
from inspector.scan.pickles.presets import PRESET_GLOBALS

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

LOADER = "torch.package.PackageImporter"
MAX_SOURCE_BYTES = 4 << 20  # a larger source is reported unread
# Capabilities whose use in code that runs at load no benign package source makes; "reach the
# interpreter" (getattr, type, super) is everyday Python in source, unlike in a pickle.
_LOAD_TIME_CAPABILITIES = frozenset(c for c in {d.capability for d in DENY.values()}
                                    if c != "reach the interpreter")
# Methods the unpickler or the import machinery runs without the pickle calling them by name
# (a pickle that calls a class runs its __init__, but such a call is judged in the pickle):
# those its opcodes run (`IMPLICIT_METHODS`: the attribute hooks and __del__ among them),
# __hash__ and __eq__ (an instance as a dict key or a set item), and the class-creation hooks.
RUN_AT_LOAD = frozenset(m for methods in IMPLICIT_METHODS.values() for m in methods) | {
    "__hash__", "__eq__", "__set_name__", "__init_subclass__", "__class_getitem__"}
# os's process runners, read from its own names (every exec*, spawn*, posix_spawn*, popen*, and
# Windows' startfile, which this platform's os may lack), and shutil's functions but the few
# that only read (every other one copies, moves, deletes, packs or unpacks files)
_OS_RUNNERS = frozenset(n for n in dir(os) if n.startswith(
    ("exec", "spawn", "posix_spawn", "popen"))) | {"startfile"}
_SHUTIL_READERS = frozenset(("which", "disk_usage", "get_archive_formats",
                             "get_unpack_formats", "get_terminal_size", "ignore_patterns"))
_SHUTIL_WRITERS = frozenset(n for n in shutil.__all__ if n not in _SHUTIL_READERS and
                            inspect.isfunction(getattr(shutil, n, None)))
# Final names of calls that run, load, open, write or delete, beside the policy's own
_SOURCE_LEAVES = DENY_LEAF_NAMES | _OS_RUNNERS | _SHUTIL_WRITERS | frozenset((
    "Popen", "FileHandler", "FileIO", "remove", "rmdir", "rename", "replace", "mkdir", "makedirs",
    "chmod", "chown", "kill", "fork", "forkpty", "connect", "create_connection", "socket",
    "touch", "write", "mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile", "symlink",
    "link", "truncate", "putenv"))
# Calls that hand out a module's attributes by a name the code computes, or all of them at once
_REACH_ATTRIBUTES = frozenset(("builtins.getattr", "builtins.vars", "inspect.getmembers"))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class PackageLayout:
    """What a torch.package archive holds: its folder and its interned modules' sources."""

    root: str
    # interned module (the atoms of its dotted name, as PackageImporter's tree holds them) ->
    # every record that may be its source: each copy of a name the zip holds twice (torch's
    # reader runs the first, zipfile hands out the last), and both of `a.py` and `a/__init__.py`
    modules: dict[tuple[str, ...], tuple[zipread.Member, ...]]
    extern: frozenset[str]  # modules the archive leaves to the loading interpreter

    def resolve(self, module: str) -> tuple[str, ...] | None:
        """The interned module that `module` (a pickle global's) resolves to, or None: the
        module itself or the package it lies in, as PackageImporter walks its tree (one atom
        per dot, whatever the atom spells: `my-mod`, `9lives` and `a b` import as well)."""
        parts = tuple(module.split("."))
        for i in range(len(parts), 0, -1):
            if parts[:i] in self.modules:
                return parts[:i]
        return None


def module_atoms(inner: str) -> tuple[str, ...] | None:
    """The module a record of the package's folder (`a/b.py`, `a/__init__.py`) is, as
    PackageImporter's `_add_file` files it into the tree it imports from: one atom per path
    part, any text at all (it checks none for being an identifier). None for a record that is
    no module: not `.py`, under `.data/` (its own records), or the folder's own `__init__.py`
    (the root, which no name imports)."""
    if not inner.endswith(".py") or inner.startswith(".data/"):
        return None
    *prefix, last = inner.split("/")
    atoms = tuple(prefix) if last == "__init__.py" else (*prefix, last[:-3])
    return atoms or None


def layout_of(buf, members: list[zipread.Member]) -> PackageLayout | None:
    """The archive read as a torch.package, or None where it is not one: PackageImporter
    needs `.data/extern_modules`, and torch's reader `.data/version` or `version`, each found
    as that reader looks a record up (case-insensitively: `zipread.torch_member`)."""
    root = members[0].name.split("/", 1)[0] if members else ""
    listed = zipread.torch_member(members, f"{root}/.data/extern_modules")
    if listed is None or not any(zipread.torch_member(members, f"{root}/{version}")
                                 for version in (".data/version", "version")):
        return None
    try:
        text = zipread.member_bytes(buf, listed, 1 << 20).decode("utf-8", "replace")
    except ValueError:
        text = ""
    # its module tree holds each record's name as written (`get_all_records`), but it reads a
    # module's source with `get_record`, which may open any record whose name differs only in
    # case: every one of those is a copy that may run
    alike: dict[str, list[zipread.Member]] = {}
    for m in members:
        alike.setdefault(zipread.torch_name(m.name), []).append(m)
    modules: dict[tuple[str, ...], tuple[zipread.Member, ...]] = {}
    for m in members:
        atoms = module_atoms(m.name[len(root) + 1:]) if m.name.startswith(root + "/") else None
        if atoms is not None:
            known = modules.get(atoms, ())
            modules[atoms] = known + tuple(c for c in alike[zipread.torch_name(m.name)]
                                           if c not in known)
    return PackageLayout(root, modules, frozenset(text.split()))


# PackageImporter's own text records, as it reads them; one that reads otherwise is walked as
# any other member (no loader unpickles them, and none can call anything when they read so)
_TEXT_RECORDS = {".data/extern_modules": re.compile(rb"(?:[A-Za-z_][\w.]*\n)*"),
                 ".data/version": re.compile(rb"\d{1,9}\n?"),
                 ".data/python_version": re.compile(rb"[\w.+]{0,40}\n?"),
                 ".data/serialization_id": re.compile(rb"\d{0,40}\n?")}


def not_pickles(buf, layout: PackageLayout, members: list[zipread.Member]) -> set[str]:
    """The members PackageImporter reads as something other than a pickle: the interned
    sources (Python), and its text records (the ones torch's reader opens for their names)
    where they read as it writes them."""
    found = {m.name for copies in layout.modules.values() for m in copies}
    for inner, pattern in _TEXT_RECORDS.items():
        m = zipread.torch_member(members, f"{layout.root}/{inner}")
        try:
            if m is not None and pattern.fullmatch(zipread.member_bytes(buf, m, 1 << 20)):
                found.add(m.name)
        except ValueError:
            continue
    return found


def records(layout: PackageLayout, by_name: dict[str, zipread.Member]
            ) -> dict[str, zipread.Member]:
    """The storage records under the names a torch zip gives them (`ROOT/data/KEY`):
    PackageImporter reads storage KEY from `ROOT/.data/KEY.storage` (found case-insensitively)."""
    head, tail = zipread.torch_name(f"{layout.root}/.data/"), ".storage"
    return {f"{layout.root}/data/{name[len(head):-len(tail)]}": m for name, m in by_name.items()
            if (folded := zipread.torch_name(name)).startswith(head) and folded.endswith(tail)}


@functools.cache
def _allowed_heads() -> frozenset[str]:
    """The top-level modules of every name the allow-lists admit."""
    names = set(weights_only_rules().allowed) | CALL_ALLOWED | PRESET_GLOBALS | KNOWN_DATA
    return frozenset(n.split(".", 1)[0] for n in names)


def shadowed(module: str) -> str | None:
    """Why an interned `module` shadows a module the loading interpreter would otherwise use:
    a standard-library module, or one the allow-lists admit names from; None when it does not."""
    head = module.split(".", 1)[0]
    if head in sys.stdlib_module_names or head == "builtins":
        return f"it shadows the standard-library module {head}"
    if head in _allowed_heads():
        return f"it shadows {head}, whose names the allow-lists admit"
    return None


def _aliases(tree: ast.Module) -> tuple[dict[str, str], list[str]]:
    """Local name -> dotted name, from every import in the source; and the modules it
    star-imports (`from os import *` binds os's names without naming them)."""
    names: dict[str, str] = {}
    stars: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".", 1)[0]] = a.name if a.asname else \
                    a.name.split(".", 1)[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name == "*":
                    stars.append(node.module)
                else:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names, stars


def _pairs(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of each binding a statement makes: assignments (a tuple's items pair
    up), `:=`, and a function's parameters with their defaults."""
    if isinstance(node, ast.Assign):
        pairs = [(t, node.value) for t in node.targets]
    elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        pairs = [(node.target, node.value)]
    elif isinstance(node, _FUNCTIONS):
        args = node.args.posonlyargs + node.args.args
        pairs = list(zip(args[len(args) - len(node.args.defaults):], node.args.defaults,
                         strict=True)) + [(a, d) for a, d in zip(
                             node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d]
    else:
        return []
    out = []
    while pairs:
        target, value = pairs.pop()
        if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            pairs += zip(target.elts, value.elts, strict=False)
        else:
            out.append((target, value))
    return out


def _bindings(tree: ast.Module, aliases: dict[str, str], stars: list[str]
              ) -> dict[str, list[str]]:
    """Name -> the dotted names an assignment binds to it anywhere in the source (`run =
    os.system`, `self.run = os.system` binds `.run`, `def f(run=os.system)`, `m =
    sys.modules.get('os')` binds the module): flow and scope aside, any such binding may be
    the one a call meets. Chains of them (`o = os`, then `run = o.system`) are followed."""
    pairs = [p for node in ast.walk(tree) for p in _pairs(node)]
    bound: dict[str, list[str]] = {}
    for _ in range(3):  # a chain of a few assignments; a longer one is no everyday code
        for target, value in pairs:
            if isinstance(value, ast.Call) and _module_named(value, aliases, stars, bound) is None:
                continue  # its result, not a callable the source names (but a module it looks up)
            key = (target.id if isinstance(target, ast.Name) else f".{target.attr}"
                   if isinstance(target, ast.Attribute) else
                   target.arg if isinstance(target, ast.arg) else None)
            if key is None:
                continue
            known = bound.setdefault(key, [])
            known += [d for d in _dotted(value, aliases, stars, bound, bare=False)
                      if d not in known]
    return bound


def _dotted(node: ast.AST, aliases: dict[str, str], stars: list[str] = (),
            bound: dict[str, list[str]] | None = None, bare: bool = True) -> list[str]:
    """The dotted names a call's target may spell (`os.system`, `open` as `builtins.open`): a
    bare name no import binds is the builtin's, or the name of any module the source
    star-imports (which one binds it is not read here, so each is judged); a name or an
    attribute an assignment binds (`bound`) is also what it binds. `bare`: a name nothing
    binds spells nothing (False: an assignment's value, which may be a local)."""
    bound = bound or {}
    chain: list[str] = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    tails = [[*reversed(chain)]]
    if chain:  # `self.run(...)` after `self.run = os.system`: its last attribute's bindings
        tails += [[target] for target in bound.get(f".{chain[0]}", [])]
    if (named := _module_named(node, aliases, stars, bound)) is not None:
        heads = [named]  # sys.modules['os'].system
    elif isinstance(node, ast.Call):  # __import__('os').system(...)
        heads = _dotted(node.func, aliases, stars, bound)
    elif not isinstance(node, ast.Name):
        heads = []
    elif node.id in aliases:
        heads = [aliases[node.id], *bound.get(node.id, [])]
    else:
        heads = bound.get(node.id, []) + ([f"builtins.{node.id}"] if bare or hasattr(
            builtins, node.id) else []) + [f"{module}.{node.id}" for module in stars]
    out = [".".join([head, *tails[0]]) for head in heads]
    return out + [tail[0] for tail in tails[1:]]


def _module_named(node: ast.AST, aliases: dict[str, str], stars: list[str],
                  bound: dict[str, list[str]]) -> str | None:
    """The module `sys.modules['m']` or `sys.modules.get('m')` looks up by its literal name."""
    if isinstance(node, ast.Subscript):
        table, key = node.value, node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "get") and node.args:
        table, key = node.func.value, node.args[0]
    else:
        return None
    if isinstance(key, ast.Constant) and isinstance(key.value, str) and "sys.modules" in (
            _dotted(table, aliases, stars, bound)):
        return key.value
    return None


def _load_time_nodes(tree: ast.Module, run_at_load: frozenset[str],
                     properties: bool = False) -> list[ast.AST]:
    """The statements that run when the module is imported or its objects unpickled (or, with
    `properties`, built by a loader that reads their attributes): the module's and its
    classes' bodies, the methods the loader runs, and what those reach, followed by name: the
    module's own functions they call, the methods of the module's classes any attribute of that
    name (`self.m`, `cls.m`, `super().m`, `getattr(x, "m")`) may be, and the constructors of
    the classes they call."""
    functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    methods: dict[str, list[ast.AST]] = {}
    todo: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            todo += node.decorator_list + node.args.defaults
            if node.name in run_at_load:
                todo.append(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, _FUNCTIONS):
                    methods.setdefault(item.name, []).append(item)
                    todo += item.decorator_list + item.args.defaults
                    if item.name in run_at_load or (properties and _is_property(item)):
                        todo.append(item)
                else:
                    todo.append(item)
            todo += node.decorator_list + node.bases + node.keywords
        else:
            todo.append(node)
    seen: set[int] = {id(n) for n in todo}
    out: list[ast.AST] = []
    while todo:
        node = todo.pop()
        out.append(node)
        for inner in ast.walk(node):
            for reached in _reaches(inner, functions, classes, methods):
                if id(reached) not in seen:
                    seen.add(id(reached))
                    todo.append(reached)
    return out


_CONSTRUCTION = ("__new__", "__init__", "__post_init__")


def _reaches(node: ast.AST, functions: dict[str, ast.AST], classes: dict[str, ast.ClassDef],
             methods: dict[str, list[ast.AST]]) -> list[ast.AST]:
    """The module's own functions and methods one node of code that runs may run: any it names
    as a value counts as called (a decorator, `map(f, ...)`, `atexit.register(f)`, a callback)."""
    if isinstance(node, ast.Attribute):
        return methods.get(node.attr, [])
    if isinstance(node, ast.Name) and node.id in functions:
        return [functions[node.id]]
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return []
    name = node.func.id
    if name in classes:
        return [m for m in classes[name].body if isinstance(m, _FUNCTIONS)
                and m.name in _CONSTRUCTION]
    if (name == "getattr" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)):
        return methods.get(node.args[1].value, [])
    return []


def _is_property(node: ast.AST) -> bool:
    """Whether a method is a property's getter or setter (`@property`, `@x.setter`,
    `@functools.cached_property`): reading an attribute runs it."""
    return any((d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")) in (
        "property", "cached_property", "setter", "getter", "deleter")
        for d in node.decorator_list)


def judge_source(source: str | bytes | ast.Module, run_at_load: frozenset[str] = RUN_AT_LOAD,
                 properties: bool = False) -> tuple[list[str], list[str]]:
    """(the imports of a module's source, what it calls or names at load that reaches a
    capability on the deny list, each with its reason), read with `ast`; ValueError if it does
    not parse. A denied callable named as a value counts as called (whatever it is handed to
    may call it), and so does getattr with a computed name, vars or `__dict__` of a module the
    deny list names whole (`_attribute_reach`).
    `source`: the file's bytes (decoded as Python decodes them, `python_source.parse`), or
    text or a tree already read so. `run_at_load`: the methods its loader runs unasked
    (another loader's, such as transformers', which builds the class it names, add
    `__init__`); `properties`: whether that loader reads the built object's attributes, so
    its properties run too."""
    tree = source if isinstance(source, ast.Module) else python_source.parse(source)
    aliases, stars = _aliases(tree)
    bound = _bindings(tree, aliases, stars)
    imports = sorted(set(aliases.values()) | {f"{module}.*" for module in stars})
    bad: list[str] = []
    local: frozenset[str] | None = None  # `_locals`, read where first needed
    for node in _load_time_nodes(tree, run_at_load, properties):
        nodes = list(ast.walk(node))
        inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
        called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        for n in nodes:
            # a denied callable named as a value is as dangerous as its call: map(os.system,
            # ...), atexit.register(os.system, ...), Thread(target=...), `run = os.system`
            if isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load) and (
                    id(n) not in inner):
                reasons = [_denied(t) for t in _dotted(n, aliases, stars, bound)
                           if t not in DENY_MODULES]
                if any(reasons) and isinstance(n, ast.Name) and id(n) not in called and (
                        n.id not in aliases):
                    local = _locals(tree) if local is None else local
                    if n.id in local:  # as a value, what it binds, not the builtin it
                        # shadows (`input = input_ids.reshape(...)`)
                        reasons = [_denied(t) for t in bound.get(n.id, [])]
            elif isinstance(n, ast.Call):
                reasons = _attribute_reach(n, aliases, stars, bound)
            else:
                continue
            bad += [r for r in reasons if r and r not in bad]
    return imports, bad


def _locals(tree: ast.Module) -> frozenset[str]:
    """The names a source assigns or takes as parameters anywhere."""
    return frozenset(n.id if isinstance(n, ast.Name) else n.arg for n in ast.walk(tree)
                     if isinstance(n, ast.arg) or (isinstance(n, ast.Name)
                                                   and isinstance(n.ctx, ast.Store)))


def _attribute_reach(call: ast.Call, aliases: dict[str, str], stars: list[str],
                     bound: dict[str, list[str]]) -> list[str]:
    """Why `getattr(m, name)`, `vars(m)` or `inspect.getmembers(m)` of a module the deny list
    names whole (`m.__dict__` is judged as a reference) reaches its capabilities: a literal name
    is judged as `m.name` would be, a computed one may be any of its callables."""
    if not call.args or not set(_dotted(call.func, aliases, stars, bound)) & _REACH_ATTRIBUTES:
        return []
    out = []
    for module in _dotted(call.args[0], aliases, stars, bound, bare=False):
        entry = DENY.get(module)
        if module not in DENY_MODULES or entry.capability not in _LOAD_TIME_CAPABILITIES:
            continue
        name = call.args[1] if len(call.args) > 1 else None
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            out.append(_denied(f"{module}.{name.value}"))
        else:
            out.append(f"{ast.unparse(call)[:80]}: hands out {module}'s callables (by a name "
                       f"computed at load, or all at once), and {module} {entry.text}")
    return out


def _denied(target: str) -> str | None:
    """Why a call of `target` in code that runs at load reaches a deny-list capability: the
    target is a single callable the deny list names, or under a module it names whole its final
    name runs, loads, opens, writes or deletes (a pickle's every use of such a module is denied,
    but source code calls os.path.join or logging.getLogger every day)."""
    parts = target.split(".")
    if parts[0] == "builtins" and len(parts) > 2:
        parts = parts[1:]  # a local name's attribute: `x.system` is no builtin
    for i in range(len(parts), 0, -1):
        entry = DENY.get(".".join(parts[:i]))
        if entry is None or entry.capability not in _LOAD_TIME_CAPABILITIES:
            continue
        if i == len(parts) or parts[-1] in _SOURCE_LEAVES or parts[-1] == "__dict__":
            return f"{target}: {entry.text}"
        return None
    return None


def report(ctx: FormatContext, buf, layout: PackageLayout, members: list[zipread.Member]) -> None:
    """Report each interned source as code its loader runs, and judge the pickle globals that
    resolve to one (`ctx.uses`, after every member was read)."""
    judged: dict[tuple[str, ...], tuple[str, str]] = {}
    for atoms, copies in sorted(layout.modules.items()):
        module = ".".join(atoms)
        severity, why = Severity.SUSPICIOUS, []
        if reason := shadowed(module):
            severity, why = Severity.DANGEROUS, [reason]
        imports: list[str] = []
        bad: list[str] = []
        for copy in copies:  # every copy is judged: any one may be the source that runs
            try:
                raw = zipread.member_bytes(buf, copy, MAX_SOURCE_BYTES)
                found, denied = judge_source(python_source.normalized(raw))
            except ValueError as exc:
                unread = f"its source could not be read ({str(exc)[:100]})"
                why += [unread] if unread not in why else []
                continue
            imports += [i for i in found if i not in imports]
            bad += [b for b in denied if b not in bad]
        if bad:
            severity = Severity.DANGEROUS
            why.append("at import or unpickling it calls " + "; ".join(bad[:3]))
        if len(copies) > 1:
            why.append(f"the archive holds {len(copies)} sources for it "
                       f"({', '.join(sorted({c.name for c in copies}))}), each judged: "
                       "readers differ on which one runs")
        listed = f"; it imports {', '.join(imports[:8])}" if imports else ""
        message = (f"{LOADER} runs this source as module {module} wherever a pickle or the "
                   f"package's code imports it{listed}")
        ctx.find(severity, "package-code", message + ("; " + "; ".join(why) if why else ""),
                 copies[0].name)
        judged[atoms] = (severity, "; ".join(why))
    for use in ctx.uses.values():
        atoms = layout.resolve(use.module)
        if atoms is None:
            continue
        module = ".".join(atoms)
        severity, why = judged[atoms]
        use.reason = (f"resolves to {module}, which the archive interns: {LOADER} runs its "
                      f"source at load" + (f" ({why})" if why else ""))
        if severity == Severity.DANGEROUS or use.severity == Severity.SAFE:
            use.severity = severity
