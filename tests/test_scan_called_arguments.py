"""A call is judged wherever it happens: what an allowed callable calls among its arguments
(`calls.CALLS_ARGUMENTS`) is judged as a REDUCE target is.

The declarations are held to the allowed callables' own source (read here with `inspect`, never
by the scanner). The hostile samples that abuse them are proven and scanned in
`test_scan_load_time.py`."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest
from factories import MARK, PROTO2, REDUCE, STOP, TUPLE, p_global, p_unicode

from inspector.scan.engine import scan_bytes, scan_file
from inspector.scan.pickles.calls import CALL_ALLOWED, CALLS_ARGUMENTS
from inspector.scan.pickles.policy import KNOWN_DATA, call_allowed, weights_only_rules
from inspector.scan.pickles.presets import PRESET_GLOBALS

# Methods a class's construction runs with the arguments of the call that builds it.
_CONSTRUCTION = ("__new__", "__init__")


def _resolve(dotted: str) -> object | None:
    """The object a dotted allow-list entry names, or None where it cannot be imported here."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


def _functions(obj: object) -> list[tuple[object, int]]:
    """The Python functions a call of `obj` runs with its arguments, each with how many leading
    parameters are not the call's arguments (`self`/`cls` of a class's methods)."""
    if not inspect.isclass(obj):
        return [(obj, 0)]
    # the __new__ and __init__ a call of the class runs: the first in its MRO (a base's, reached
    # through super() with its own parameters, is that base's entry where it is allowed itself)
    found = []
    for name in _CONSTRUCTION:
        method = next((k.__dict__[name] for k in obj.__mro__[:-1] if name in k.__dict__), None)
        if method is not None:
            found.append((getattr(method, "__func__", method), 1))
    return found


def _called_parameters(func: object, skip: int) -> dict[str, tuple[int, set[str]]] | None:
    """Each parameter `func`'s source calls or calls a method of: its position among the call's
    arguments and the methods called on it ('' for a call of the parameter itself). None where
    there is no Python source (a C function)."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source).body[0]
    if not isinstance(tree, ast.FunctionDef):
        return None
    params = [a.arg for a in tree.args.posonlyargs + tree.args.args]
    positions = {name: i - skip for i, name in enumerate(params) if i >= skip}
    positions.update({a.arg: -1 for a in tree.args.kwonlyargs})
    called: dict[str, tuple[int, set[str]]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target, chain = node.func, []
        while isinstance(target, ast.Attribute):
            chain.append(target.attr)
            target = target.value
        if isinstance(target, ast.Name) and target.id in positions:
            entry = called.setdefault(target.id, (positions[target.id], set()))
            entry[1].add(chain[-1] if chain else "")
    return called


def _allowed_entries() -> list[str]:
    return sorted(set(weights_only_rules().allowed) | CALL_ALLOWED | PRESET_GLOBALS | KNOWN_DATA)


def test_every_call_of_a_parameter_is_declared():
    """An allowed callable whose source calls one of its parameters (or a method of it) must
    declare that argument; the check reads every entry that has Python source."""
    undeclared, read = [], 0
    for entry in _allowed_entries():
        obj = _resolve(entry)
        if obj is None:
            continue
        declared = {(d.position, d.name): d.method for d in CALLS_ARGUMENTS.get(entry, ())}
        for func, skip in _functions(obj):
            called = _called_parameters(func, skip)
            if called is None:
                continue
            read += 1
            for name, (position, methods) in called.items():
                method = declared.get((position, name))
                # a declaration without a method judges the argument itself, which covers
                # every method called on it
                if method is None or (method and methods - {method}):
                    undeclared.append(f"{entry}: {name} (position {position}) {sorted(methods)}")
    assert read > 20, "too few allowed callables had readable source"
    assert not undeclared, undeclared


def test_declarations_name_allowed_callables_and_their_own_parameters():
    """Each declaration is an allowed callable's, and where its source can be read the position
    holds the parameter the declaration names."""
    for entry, declared in CALLS_ARGUMENTS.items():
        assert call_allowed(entry), entry
        obj = _resolve(entry)
        if obj is None:
            continue
        for func, skip in _functions(obj):
            try:
                signature = inspect.signature(func)
            except (TypeError, ValueError):
                continue
            params = list(signature.parameters.values())[skip:]
            for d in declared:
                # a C callable's `*args` signature names no parameter to hold the entry to
                if d.position < len(params) and params[d.position].kind in (
                        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                    assert params[d.position].name == d.name, (entry, d, params)


def _handed(entry: str, position: int, handed: bytes) -> bytes:
    """A pickle calling `entry` with `handed` at `position` and plain text elsewhere."""
    args = [p_unicode(f"arg{i}") for i in range(position + 1)]
    args[position] = handed
    module, _, name = entry.rpartition(".")
    return PROTO2 + p_global(module, name) + MARK + b"".join(args) + TUPLE + REDUCE + STOP


CASES = [(entry, d) for entry, declared in sorted(CALLS_ARGUMENTS.items()) for d in declared]


@pytest.mark.parametrize(("entry", "declared"), CASES, ids=[e for e, _ in CASES])
def test_a_callable_handed_to_a_declared_position_is_judged_as_a_call(entry, declared):
    """An import that is only suspicious as a name is dangerous once an allowed callable calls
    it; an allowed one handed there adds nothing."""
    res = scan_bytes(_handed(entry, declared.position, p_global("mailbox", "mbox")))
    found = [f for f in res.findings if f.code == "call-outside-allowlist"]
    assert res.verdict == "dangerous", res.to_json()
    assert any(entry in f.message and "mailbox.mbox" in f.message for f in found), found
    benign = scan_bytes(_handed(entry, declared.position, p_global("builtins", "dict")))
    assert not [f for f in benign.findings if f.code == "call-outside-allowlist"], benign.to_json()


def test_a_computed_callable_handed_to_an_allowed_caller_is_dangerous():
    """What arrives at a called position as the result of another call cannot be checked."""
    computed = p_global("collections", "OrderedDict") + MARK + TUPLE + REDUCE
    res = scan_bytes(_handed("torch._tensor._rebuild_from_type_v2", 0, computed))
    assert res.verdict == "dangerous"
    assert any(f.code == "indirect-call" and "_rebuild_from_type_v2 calls its argument func"
               in f.message for f in res.findings), res.to_json()


def test_torch_rebuilds_through_rebuild_from_type_stay_safe(tmp_path):
    """A real save that goes through _rebuild_from_type_v2 (a tensor carrying a Python
    attribute) hands it torch's own rebuild function: safe, no call finding."""
    import torch

    tensor = torch.ones(3)
    tensor.note = "kept"
    path = tmp_path / "attr.pt"
    torch.save({"w": tensor}, path)
    res = scan_file(path)
    assert res.verdict == "safe", res.to_json()
    assert "torch._tensor._rebuild_from_type_v2" in {g.import_name for g in res.globals}
    assert not [f for f in res.findings if f.code == "call-outside-allowlist"], res.to_json()


def test_a_benign_defaultdict_keeps_its_plain_factory(tmp_path):
    """collections.defaultdict(list) in a plain pickle: its factory is a plain container."""
    import collections
    import pickle

    path = tmp_path / "counts.pkl"
    path.write_bytes(pickle.dumps({"d": collections.defaultdict(list, {"a": [1]})}, protocol=2))
    res = scan_file(path)
    assert res.verdict != "dangerous", res.to_json()
    assert not [f for f in res.findings if f.code == "call-outside-allowlist"]
