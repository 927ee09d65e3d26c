"""The load-time source judge: what Python source an artifact ships runs when a loader takes it.

The source (a torch.package's interned modules, Hugging Face or sentence-transformers remote
code) is read with `ast`, never run. What runs at import: the module's and its classes' bodies,
decorators, parameter defaults and annotations (a def evaluates them), the bases and keywords
of each class, and every method of a metaclass (`__prepare__`, `__new__` and `__init__` run at
the class statement, `__call__` when the class is called). What runs as the loader takes the
module's objects: the methods it runs unasked (`RUN_AT_LOAD` for unpickling), or, for a loader
that builds the module's classes and calls their methods (`every_method`), every method and
function of the module but the ones only a user's save runs; and what those reach, followed by
name. Each name such code calls or hands on is judged by `source_capability.denied`.
"""

from __future__ import annotations

import ast
import builtins
import sys
from dataclasses import dataclass

from inspector.formats.archives import python_source
from inspector.formats.archives.source_capability import (
    HOLDERS,
    RESOLVERS,
    denied,
    holds_capability,
    literal_of,
)
from inspector.scan.pickles.opcodes import IMPLICIT_METHODS
from inspector.scan.pickles.policy import DENY, DENY_MODULES

# Methods the unpickler or the import machinery runs without the pickle calling them by name
# (a pickle that calls a class runs its __init__, but such a call is judged in the pickle):
# those its opcodes run (`IMPLICIT_METHODS`: the attribute hooks and __del__ among them),
# __hash__ and __eq__ (an instance as a dict key or a set item), and the class-creation hooks.
RUN_AT_LOAD = frozenset(m for methods in IMPLICIT_METHODS.values() for m in methods) | {
    "__hash__", "__eq__", "__set_name__", "__init_subclass__", "__class_getitem__"}
# Methods no loader runs, only a user's explicit save or upload: not roots under `every_method`
_USER_ONLY = ("save", "push_to_hub", "to_json_file")
# Base classes that make a class a metaclass, beside the module's own metaclasses
_META_BASES = frozenset(("type", "ABCMeta", "EnumMeta", "EnumType"))
# Calls that hand out a module's attributes by a name the code computes, or all of them at once
_REACH_ATTRIBUTES = frozenset(("builtins.getattr", "builtins.vars", "inspect.getmembers"))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _aliases(tree: ast.Module, package: tuple[str, ...] | None = None
             ) -> tuple[dict[str, str], list[str]]:
    """Local name -> dotted name, from every import in the source; and the modules it
    star-imports (`from os import *` binds os's names without naming them). `package`: the
    package a relative import starts from, where the source is a known module's."""
    names: dict[str, str] = {}
    stars: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".", 1)[0]] = a.name if a.asname else \
                    a.name.split(".", 1)[0]
        elif isinstance(node, ast.ImportFrom):
            source = _relative(node, package) if node.level else node.module
            for a in node.names if source else ():
                if a.name == "*":
                    stars.append(source)
                else:
                    names[a.asname or a.name] = f"{source}.{a.name}"
    return names, stars


def _relative(node: ast.ImportFrom, package: tuple[str, ...] | None) -> str | None:
    """The module a relative import names, as the import system resolves it from `package`
    (None where the package is unknown, or the import climbs above its top)."""
    if package is None or node.level - 1 >= len(package):
        return None
    base = package[:len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


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
    local = _locals(tree)
    bound: dict[str, list[str]] = {}
    for _ in range(3):  # a chain of a few assignments; a longer one is no everyday code
        for target, value in pairs:
            if isinstance(value, ast.Call) and _looked_up(value, aliases, stars, bound) is None:
                continue  # its result, not a callable the source names (but a module it looks up)
            key = (target.id if isinstance(target, ast.Name) else f".{target.attr}"
                   if isinstance(target, ast.Attribute) else
                   target.arg if isinstance(target, ast.arg) else None)
            if key is None:
                continue
            known = bound.setdefault(key, [])
            shadow = f"builtins.{value.id}" if isinstance(value, ast.Name) and (
                value.id in local) else None  # `x = input` of a parameter `input`
            known += [d for d in _dotted(value, aliases, stars, bound, bare=False)
                      if d not in known and d != shadow]
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
    if (named := _looked_up(node, aliases, stars, bound)) is not None:
        heads = [named]  # sys.modules['os'].system
    elif isinstance(node, ast.Call):  # __import__('os').system(...)
        heads = _dotted(node.func, aliases, stars, bound)
    elif not isinstance(node, ast.Name):
        heads = []
    elif node.id in aliases:
        heads = [aliases[node.id], *bound.get(node.id, [])]
    elif node.id == "__builtins__" and node.id not in bound:
        heads = ["builtins.__builtins__"]  # the builtins' namespace, as a module sees it
    else:
        heads = bound.get(node.id, []) + ([f"builtins.{node.id}"] if bare or hasattr(
            builtins, node.id) else []) + [f"{module}.{node.id}" for module in stars
                                           if _may_export(module, node.id)]
    out = [".".join([head, *tails[0]]) for head in heads]
    return out + [tail[0] for tail in tails[1:]]


def _looked_up(node: ast.AST, aliases: dict[str, str], stars: list[str],
               bound: dict[str, list[str]]) -> str | None:
    """What a lookup by a literal name hands out: the module `sys.modules['m']` or
    `sys.modules.get('m')`, `importlib.import_module('m')` or `__import__('m')` (its top
    module without a fromlist), the object `pkgutil.resolve_name('m:f')` names."""
    if isinstance(node, ast.Call) and node.args:
        resolver = set(_dotted(node.func, aliases, stars, bound)) & RESOLVERS
        named = literal_of(node) if resolver else None
        if named is not None and resolver == {"builtins.__import__"} and len(node.args) < 4 and (
                not any(k.arg == "fromlist" for k in node.keywords)):
            return named.split(".", 1)[0]
        if named is not None:
            return named
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


def _may_export(module: str, name: str) -> bool:
    """Whether `from module import *` may bind `name`: not where the module, already imported
    here (never imported for this), has no such name (`from os import *` binds no `print`)."""
    loaded = sys.modules.get(module)
    return loaded is None or hasattr(loaded, name)


def _def_time(fn: ast.AST) -> list[ast.AST]:
    """What a def statement evaluates as it runs: decorators, defaults, and annotations (which
    are code, evaluated there or wherever a loader reads them)."""
    args = fn.args
    every = args.posonlyargs + args.args + args.kwonlyargs + [
        a for a in (args.vararg, args.kwarg) if a is not None]
    return [*fn.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d),
            *(a.annotation for a in every if a.annotation), *([fn.returns] if fn.returns else [])]


def _metaclasses(classes: dict[str, ast.ClassDef]) -> set[str]:
    """The module's classes that make classes: named as a `metaclass=`, or subclassing type
    (or another of them)."""
    found = {k.value.id for c in classes.values() for k in c.keywords
             if k.arg == "metaclass" and isinstance(k.value, ast.Name)} & set(classes)
    for _ in range(len(classes)):
        more = {name for name, c in classes.items() if any(
            (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")) in (
                _META_BASES | found) for b in c.bases)} - found
        if not more:
            break
        found |= more
    return found


def _load_time_nodes(tree: ast.Module, run_at_load: frozenset[str], properties: bool = False,
                     every_method: bool = False) -> list[ast.AST]:
    """The code that runs when the module is imported, its objects unpickled, or (with
    `properties`) its classes built by a loader that reads their attributes, or (with
    `every_method`) built by one that may call any of their methods: module and class bodies,
    what each def evaluates, every method of a metaclass, the methods the loader runs, and what
    those reach, followed by name: the module's own functions they call, the methods of the
    module's classes any attribute of that name (`self.m`, `cls.m`, `super().m`,
    `getattr(x, "m")`) may be, and the constructors of the classes they call."""
    functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    makers = _metaclasses(classes)
    methods: dict[str, list[ast.AST]] = {}
    todo: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            todo += _def_time(node)
            if node.name in run_at_load or (every_method and not node.name.startswith(
                    _USER_ONLY)):
                todo.append(node)
        elif isinstance(node, ast.ClassDef):
            every = node.name in makers or every_method
            for item in node.body:
                if not isinstance(item, _FUNCTIONS):
                    todo.append(item)
                    continue
                methods.setdefault(item.name, []).append(item)
                todo += _def_time(item)
                if item.name in run_at_load or (properties and _is_property(item)) or (
                        every and not item.name.startswith(_USER_ONLY)):
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
    if name == "getattr" and len(node.args) > 1:
        looked = node.args[1]
        if isinstance(looked, ast.Constant) and isinstance(looked.value, str):
            return methods.get(looked.value, [])
        return [m for found in methods.values() for m in found]  # a computed name: any
    return []


def _is_property(node: ast.AST) -> bool:
    """Whether a method is a property's getter or setter (`@property`, `@x.setter`,
    `@functools.cached_property`): reading an attribute runs it."""
    return any((d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")) in (
        "property", "cached_property", "setter", "getter", "deleter")
        for d in node.decorator_list)


@dataclass(frozen=True)
class Judged:
    """What one module's source does at load: its imports, what it calls or names that reaches
    a deny-list capability (each with its reason), and every dotted name its load-time code
    calls or names (where another module the artifact ships runs next)."""

    imports: list[str]
    denied: list[str]
    named: frozenset[str]


def judge_source(source: str | bytes | ast.Module, run_at_load: frozenset[str] = RUN_AT_LOAD,
                 properties: bool = False, every_method: bool = False
                 ) -> tuple[list[str], list[str]]:
    """(the imports of a module's source, what it calls or names at load that reaches a
    capability on the deny list, each with its reason), read with `ast`; ValueError if it does
    not parse (`judge_module`, of a source that is no known module's)."""
    judged = judge_module(source, run_at_load, properties, every_method)
    return judged.imports, judged.denied


def judge_module(source: str | bytes | ast.Module, run_at_load: frozenset[str] = RUN_AT_LOAD,
                 properties: bool = False, every_method: bool = False,
                 package: tuple[str, ...] | None = None) -> Judged:
    """What a module's source does at load, read with `ast`; ValueError if it does not parse.
    A denied callable named as a value counts as called (whatever it is handed to may call
    it), and so does getattr with a computed name, vars or `__dict__` of a module that holds a
    capability (`_attribute_reach`).
    `source`: the file's bytes (decoded as Python decodes them, `python_source.parse`), or
    text or a tree already read so. `run_at_load`: the functions and methods its loader runs
    unasked, by name; `properties`: whether that loader reads the built object's attributes,
    so its properties run too; `every_method`: whether it builds the module's classes and may
    call any method (transformers, sentence-transformers: a list of the ones it calls lags the
    loader); `package`: the package its relative imports start from (the module's own for an
    `__init__.py`, else the one it lies in), where it is a known module's."""
    tree = source if isinstance(source, ast.Module) else python_source.parse(source)
    aliases, stars = _aliases(tree, package)
    bound = _bindings(tree, aliases, stars)
    imports = sorted(set(aliases.values()) | {f"{module}.*" for module in stars})
    bad: list[str] = []
    named: set[str] = set()
    local: frozenset[str] | None = None  # `_locals`, read where first needed
    typed = _typing(tree)
    for node in _load_time_nodes(tree, run_at_load, properties, every_method):
        nodes = list(ast.walk(node))
        inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
        calls = {id(n.func): n for n in nodes if isinstance(n, ast.Call)}
        for n in nodes:
            # a denied callable named as a value is as dangerous as its call: map(os.system,
            # ...), atexit.register(os.system, ...), Thread(target=...), `run = os.system`
            if isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load) and (
                    id(n) not in inner):
                call = calls.get(id(n))
                if call is None and id(n) in typed:
                    continue  # a type in an annotation is stored, not called
                targets = _dotted(n, aliases, stars, bound)
                named.update(targets)
                reasons = [denied(t, call) for t in targets if t not in DENY_MODULES]
                if any(reasons) and isinstance(n, ast.Name) and call is None and (
                        n.id not in aliases):
                    local = _locals(tree) if local is None else local
                    if n.id in local:  # as a value, what it binds, not the builtin it
                        # shadows (`input = input_ids.reshape(...)`)
                        reasons = [denied(t) for t in bound.get(n.id, [])]
            elif isinstance(n, ast.Call):
                reasons = _attribute_reach(n, aliases, stars, bound, id(n) in calls)
            else:
                continue
            bad += [r for r in reasons if r and r not in bad]
    return Judged(imports, bad, frozenset(named))


def _typing(tree: ast.Module) -> set[int]:
    """The nodes of the source's annotations (what they call runs; what they name is kept)."""
    roots = [a.annotation for a in ast.walk(tree) if isinstance(a, ast.arg | ast.AnnAssign)
             and a.annotation is not None]
    roots += [f.returns for f in ast.walk(tree) if isinstance(f, _FUNCTIONS) and f.returns]
    return {id(n) for root in roots for n in ast.walk(root)}


def _locals(tree: ast.Module) -> frozenset[str]:
    """The names a source assigns or takes as parameters anywhere."""
    return frozenset(n.id if isinstance(n, ast.Name) else n.arg for n in ast.walk(tree)
                     if isinstance(n, ast.arg) or (isinstance(n, ast.Name)
                                                   and isinstance(n.ctx, ast.Store)))


def _attribute_reach(call: ast.Call, aliases: dict[str, str], stars: list[str],
                     bound: dict[str, list[str]], called: bool) -> list[str]:
    """Why `getattr(m, name)`, `vars(m)` or `inspect.getmembers(m)` of a module reaches a
    capability (`m.__dict__` is judged as a reference): a literal name is judged as `m.name`
    would be; a computed one, or all at once, may be any of the module's callables, which is
    a capability where m is builtins or lies under a module the deny list names whole, or,
    called at once (`getattr(torch, name)(...)`), where m holds a denied callable."""
    if not call.args or not set(_dotted(call.func, aliases, stars, bound)) & _REACH_ATTRIBUTES:
        return []
    name = call.args[1] if len(call.args) > 1 else None
    literal = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) \
        else None
    out = []
    for module in _dotted(call.args[0], aliases, stars, bound, bare=False):
        if literal is not None:
            out.append(denied(f"{module}.{literal}"))
        elif holds_capability(module) or (called and module in HOLDERS):
            out.append(f"{ast.unparse(call)[:80]}: hands out {module}'s callables (by a name "
                       f"computed at load, or all at once), and {_holds(module)}")
    return out


def _holds(module: str) -> str:
    """What a module's callables can do, as the deny list says it."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        entry = DENY.get(".".join(parts[:i]))
        if entry is not None and entry.entry in DENY_MODULES:
            return f"{entry.entry} {entry.text}"
    held = sorted(k for k in DENY if k.rsplit(".", 1)[0] == module and k not in DENY_MODULES)
    return f"{module} holds {', '.join(held[:4])}"
