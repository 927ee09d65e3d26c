"""Plain data types are judged by what they do, not by their module's name (round 55).

A benign torch.save of `x.max(0)`, a run id `uuid.UUID`, a `types.SimpleNamespace` config or a
compiled regex was called dangerous: `uuid` and `types` are denied whole, and a call of
torch's struct-sequence types or of `re._compile` is outside the call allow-list. Each is now
suspicious (weights_only refuses it; nothing of its module's capability is reached). What each
type does is read here in the installed type (the scanner keeps it as data, `calls.py`), and
every sibling that gives a capability stays dangerous. Hostile samples that hand the allowed
names hostile arguments or states are proven under `pickle.load` (a canary appears) and scanned
(dangerous, and the canary never appears)."""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import types
import uuid
from pathlib import Path

import pytest
from factories import (
    BUILD,
    EMPTY_TUPLE,
    MARK,
    NEWOBJ,
    PROTO2,
    REDUCE,
    SETITEM,
    STOP,
    TUPLE,
    module_on_path,
    p_global,
    p_int,
    p_unicode,
)
from proofs import run_each_forked

from inspector.scan.engine import scan_bytes, scan_file
from inspector.scan.pickles.calls import DATA_CLASSES, LITERAL_CALLS, STRUCT_SEQUENCES
from inspector.scan.pickles.policy import DENY_MODULES, classify

EMPTY_DICT = b"}"
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class statement's type, not a static C one
GADGETS = "rt55_pickle_gadgets"
# Each gadget writes the canary in the folder the load runs in, from the protocol the allowed
# type's own code runs on what the pickle handed it.
GADGET_SOURCE = '''
def _touch():
    open("canary", "w").close()


class Indexed:
    def __getitem__(self, key):
        _touch()
        return 1

    def __contains__(self, key):
        return False


class Hashed:
    def __hash__(self):
        _touch()
        return 1


class Iterated:
    def __iter__(self):
        _touch()
        return iter((1, 2))


class Holder:
    def __setstate__(self, state):
        self.value = state["value"]
'''


# --- what each type is, read in the installed type ----------------------------------------


def test_struct_sequences_are_the_installed_torch_s_c_tuple_types():
    """Every listed name is a C struct-sequence tuple type (no Python code of its own), and
    every struct sequence the installed torch has is listed."""
    import torch

    installed = {f"torch.return_types.{n}" for n in dir(torch._C._return_types)
                 if not n.startswith("__")}
    assert installed == STRUCT_SEQUENCES
    for entry in sorted(STRUCT_SEQUENCES):
        kind = getattr(torch.return_types, entry.rsplit(".", 1)[1])
        assert type(kind) is type and kind.__mro__ == (kind, tuple, object), entry
        assert isinstance(kind.n_fields, int) and isinstance(kind.n_sequence_fields, int), entry
        assert not [v for v in vars(kind).values() if inspect.isfunction(v)], entry
    assert "torch.return_types.pytree_register_structseq" not in STRUCT_SEQUENCES


def test_simple_namespace_is_the_c_namespace_type():
    """types.SimpleNamespace is the static C type of sys.implementation: no Python code."""
    assert type(sys.implementation) is types.SimpleNamespace
    assert not types.SimpleNamespace.__flags__ & _HEAP_TYPE
    assert not [v for v in vars(types.SimpleNamespace).values() if inspect.isfunction(v)]


def _names_used(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def test_uuid_class_reaches_none_of_its_module_s_functions():
    """uuid.UUID's methods name none of uuid's functions (the program-running getnode helpers),
    and its __setstate__ only sets fields (object.__setattr__) and looks up a SafeUUID."""
    functions = {n for n, v in vars(uuid).items() if inspect.isfunction(v)}
    assert "_get_command_stdout" in functions
    assert not _names_used(uuid.UUID) & functions
    tree = ast.parse(textwrap.dedent(inspect.getsource(uuid.UUID.__setstate__)))
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert called == {"object.__setattr__", "SafeUUID"}


def test_re_compile_is_what_a_compiled_pattern_pickles_as():
    """A compiled pattern pickles as `re._compile(text, flags)`, the one literal call admitted."""
    import copyreg

    func, args = copyreg.dispatch_table[re.Pattern](re.compile(r"\w+"))
    assert f"{func.__module__}.{func.__name__}" in LITERAL_CALLS
    assert args == (r"\w+", re.UNICODE)


@pytest.mark.parametrize("entry", sorted(DATA_CLASSES))
def test_data_classes_are_classes_of_denied_modules(entry):
    """Each entry is a class of a module the deny list names whole (else it needs no entry)."""
    module, _, name = entry.rpartition(".")
    assert module in DENY_MODULES
    assert inspect.isclass(getattr(__import__(module), name))


# --- benign saves beside plain twins --------------------------------------------------------


def _benign(kind: str) -> tuple[object, object]:
    """A value a benign save holds, and the same data as plain types."""
    import torch

    x = torch.arange(9, dtype=torch.float32).reshape(3, 3)
    if kind == "return_types":
        made = {"max": x.max(0), "topk": x.topk(2), "sort": x.sort()}
        return made, {k: tuple(v) for k, v in made.items()}
    if kind == "uuid":
        run_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
        return {"run_id": run_id}, {"run_id": str(run_id)}
    if kind == "namespace":
        return {"cfg": types.SimpleNamespace(lr=0.1, depth=4)}, {"cfg": {"lr": 0.1, "depth": 4}}
    return {"pattern": re.compile(r"\w+-[0-9]{2}", re.I)}, {"pattern": r"\w+-[0-9]{2}"}


@pytest.mark.parametrize("kind", ["return_types", "uuid", "namespace", "regex"])
def test_a_benign_save_is_suspicious_and_its_twin_safe(tmp_path, kind):
    """Not weights_only-loadable, so suspicious; nothing in it reaches a capability."""
    import torch

    value, twin = _benign(kind)
    torch.save(value, tmp_path / "value.pt")
    torch.save(twin, tmp_path / "twin.pt")
    res = scan_file(tmp_path / "value.pt")
    assert res.verdict == "suspicious", res.to_json()
    assert not [f for f in res.findings if f.severity == "dangerous"]
    assert scan_file(tmp_path / "twin.pt").verdict == "safe"


# --- the siblings stay dangerous ------------------------------------------------------------


@pytest.mark.parametrize(("module", "name"), [
    ("types", "FunctionType"), ("types", "CodeType"), ("types", "MethodType"),
    ("types", "ModuleType"), ("types", "new_class"), ("types", "SimpleNamespace.__init__"),
    ("types", "SimpleNamespace.mro"), ("uuid", "_get_command_stdout"), ("uuid", "getnode"),
    ("uuid", "_unix_getnode"), ("uuid", "UUID.__init__"), ("uuid", "UUID.hex"),
    ("uuid", "_UuidCreate"), ("foo", "uuid.UUID"),
])
def test_dangerous_siblings_stay_dangerous(module, name):
    assert classify(module, name).severity == "dangerous"


def _reduce(module: str, name: str, *args: bytes) -> bytes:
    return PROTO2 + p_global(module, name) + MARK + b"".join(args) + TUPLE + REDUCE + STOP


@pytest.mark.parametrize("pickled", [
    _reduce("torch.return_types", "pytree_register_structseq", p_global("torch.return_types",
                                                                        "max")),
    _reduce("re", "sub", p_unicode("x"), p_unicode("y"), p_unicode("x")),
    _reduce("re", "compile", p_unicode("x")),
    _reduce("re", "_compile", p_unicode("x"), p_global("re", "sub")),
    _reduce("re", "_compile", p_global("builtins", "str"), p_int(0)),
    _reduce("re", "_compile", p_unicode("x"), p_int(0), p_int(0)),
    _reduce("types", "SimpleNamespace", p_global("os", "system")),
], ids=["structseq-helper", "re.sub", "re.compile", "import-flags", "import-pattern",
        "three-arguments", "namespace-of-import"])
def test_calls_outside_what_benign_saves_do_stay_dangerous(pickled):
    """Only a literal `re._compile(text, int)` and the types themselves are admitted."""
    assert scan_bytes(pickled).verdict == "dangerous"


# --- hostile arguments and states, proven ---------------------------------------------------


@pytest.fixture(scope="module")
def gadgets(tmp_path_factory):
    """The gadgets' module, importable while this module's tests run."""
    folder = tmp_path_factory.mktemp("rt55-gadgets")
    with module_on_path(folder, GADGETS, GADGET_SOURCE):
        yield folder


def _instance(name: str) -> bytes:
    return p_global(GADGETS, name) + EMPTY_TUPLE + NEWOBJ


def _hostile(kind: str, canary: Path) -> bytes:
    """Each allowed name handed what makes the load write `canary` (the gadgets write the
    file `canary` in the folder the load runs in)."""
    if kind == "uuid-getnode-helper":
        return _reduce("uuid", "_get_command_stdout", p_unicode("touch"), p_unicode(str(canary)))
    if kind == "namespace-stored-setstate":
        # a first BUILD stores __setstate__ on the namespace; the second calls it
        stored = EMPTY_DICT + p_unicode("__setstate__") + p_global("os", "system") + SETITEM
        return (PROTO2 + p_global("types", "SimpleNamespace") + EMPTY_TUPLE + REDUCE + stored
                + BUILD + p_unicode(f"touch '{canary}'") + BUILD + STOP)
    if kind == "uuid-state-indexed":
        return PROTO2 + p_global("uuid", "UUID") + EMPTY_TUPLE + NEWOBJ + _instance(
            "Indexed") + BUILD + STOP
    if kind == "uuid-is-safe-hashed":
        state = (MARK + p_unicode("int") + p_int(1) + p_unicode("is_safe") + _instance("Hashed")
                 + b"d")
        return PROTO2 + p_global("uuid", "UUID") + EMPTY_TUPLE + NEWOBJ + state + BUILD + STOP
    if kind == "structseq-iterated":
        return _reduce("torch.return_types", "max", _instance("Iterated"), EMPTY_DICT)
    if kind == "regex-pattern-hashed":
        return _reduce("re", "_compile", _instance("Hashed"), p_int(0))
    # any class's own __setstate__ indexes its state: the state's __getitem__ runs
    return PROTO2 + p_global(GADGETS, "Holder") + EMPTY_TUPLE + NEWOBJ + _instance(
        "Indexed") + BUILD + STOP


HOSTILE = ["uuid-getnode-helper", "namespace-stored-setstate", "uuid-state-indexed",
           "uuid-is-safe-hashed", "structseq-iterated", "regex-pattern-hashed",
           "setstate-state-indexed"]
# argv: the gadgets' folder, the sample; a load's error after its payload ran is expected
_LOAD = ("import pickle, sys\nsys.path.insert(0, sys.argv[1])\ntry:\n    pickle.load(open("
         "sys.argv[2], 'rb'))\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n")


@pytest.fixture(scope="module")
def proven(tmp_path_factory, gadgets, python_exe):
    """Every hostile sample, each in a folder of its own, proven to write its canary under
    pickle.load (the canary is removed again before the scan)."""
    work = tmp_path_factory.mktemp("rt55-hostile")
    samples = {}
    for kind in HOSTILE:
        (work / kind).mkdir()
        sample = work / f"{kind}.pkl"
        sample.write_bytes(_hostile(kind, work / kind / "canary"))
        samples[kind] = (sample, work / kind / "canary")
    outputs = run_each_forked(python_exe, _LOAD, [[str(gadgets), str(p)] for p, _ in
                                                  samples.values()],
                              [work / kind for kind in HOSTILE], ("torch",))
    for (kind, (_, canary)), (_, output) in zip(samples.items(), outputs, strict=True):
        assert canary.exists(), f"{kind}: the payload did not run under pickle.load: {output}"
        canary.unlink()
    return samples


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_use_of_an_allowed_type_is_dangerous_and_never_run(proven, kind):
    sample, canary = proven[kind]
    res = scan_file(sample)
    assert res.verdict == "dangerous", res.to_json()
    assert not canary.exists()
