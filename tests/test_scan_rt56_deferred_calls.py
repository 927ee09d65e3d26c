"""A type built to call a callable later is a call of that callable (round 56).

NEWOBJ runs `cls.__new__(cls, *args)`, which the scan took for a class rebuild: a pickle built
`map(torchrun_main, [argv])` that way and handed it to `builtins.list` (an allowed call), whose
iteration ran the program, while the scan said suspicious, as for `map(str, ...)`. Every such
type is now declared with the argument it calls (`calls.DEFERRED_CALLS`), and that argument is
judged as a REDUCE of it. The declarations are held here to the installed types: each public
type of the modules below is built, as NEWOBJ builds it, with a recording callable at each
position, then iterated, called, looked up and dropped (our own probe runs, never a pickle).
Hostile samples are proven under pickle.load and torch.load (a canary appears) and scanned
(dangerous, the canary never appears), each beside a twin that maps a plain builtin."""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import itertools
import json
import os
import zipfile
from pathlib import Path

import pytest
from factories import EMPTY_TUPLE, MARK, NEWOBJ, PROTO2, REDUCE, STOP, TUPLE, p_global, p_unicode
from proofs import run_each_forked

from inspector.scan.engine import scan_file
from inspector.scan.pickles.calls import CALLS_ARGUMENTS, DEFERRED_CALLS
from inspector.scan.pickles.policy import classify, deferred_calls

SWEPT = ("builtins", "itertools", "functools", "_functools", "collections", "_collections",
         "weakref", "_weakref", "operator", "heapq", "contextlib", "copyreg")
NEWOBJ_EX = b"\x92"
EMPTY_LIST, APPENDS, TUPLE1, TUPLE2 = b"]", b"e", b"\x85", b"\x86"


class _Items(list):
    """A filler argument: iterable, indexable and weakly referable."""


class _Probe:
    """A callable that records being called (with whatever arguments) and returns a truthy
    plain value, so predicates keep going."""

    def __init__(self) -> None:
        self.called = False

    def __call__(self, *args, **kwargs) -> int:
        self.called = True
        return 1


def _exercise(obj: object) -> None:
    """Use `obj` as code after a load may: iterate it, call it, look it up through a class,
    ask its cache, then drop it and what it referred to."""
    for use in (lambda: list(itertools.islice(obj, 6)), lambda: obj(),
                lambda: obj.__get__(_Items(), _Items), lambda: obj.__get__(_Items(), _Items)(),
                lambda: obj.__get__(None, _Items)(), lambda: obj.cache_info()):
        with contextlib.suppress(Exception):  # a use the type does not support
            use()


def _calls_at(kind: type) -> set[int]:
    """The argument positions of `kind(*args)` (one to four arguments; NEWOBJ's `__new__`
    alone stores no more than the whole construction) that the built object calls when
    exercised, or once what it refers to is collected."""
    found: set[int] = set()
    for arity in range(1, 5):
        for position in range(arity):
            probe = _Probe()
            args = [_Items([(1,), (2,)]) for _ in range(arity)]
            args[position] = probe
            try:
                obj = kind(*args)
            except Exception:  # not this shape of arguments
                continue
            _exercise(obj)
            del args  # what the object refers to dies first (no cycle: at once), as a
            del obj   # pickle's stack does
            if probe.called:
                found.add(position)
    return found


def _calls_at_apart(kind: type) -> set[int] | None:
    """`_calls_at` in a forked child (a type's own code may crash the interpreter on a use it
    does not support); None where the child died."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.write(write, json.dumps(sorted(_calls_at(kind))).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return set(json.loads(text)) if text else None


def _public_types() -> list[tuple[str, str, type]]:
    out = []
    for module in SWEPT:
        mod = importlib.import_module(module)
        for name in sorted(vars(mod)):
            kind = getattr(mod, name)
            if isinstance(kind, type) and not issubclass(kind, BaseException | type):
                out.append((module, name, kind))
    return out


def test_every_type_that_calls_an_argument_later_is_declared():
    """A type (not denied whole) whose built object calls an argument it was given declares
    that position, by its own name or by what its module re-exports it as."""
    undeclared, seen = [], 0
    for module, name, kind in _public_types():
        if classify(module, name).severity == "dangerous":
            continue  # its import is dangerous already (functools.partial, operator's)
        positions = _calls_at_apart(kind)
        if positions is None:
            continue  # its own code crashed on the probe's uses: nothing to compare
        seen += bool(positions)
        declared = {d.position for d in deferred_calls(module, name)} | {
            d.position for d in CALLS_ARGUMENTS.get(f"{module}.{name}", ())}
        if positions - declared:
            undeclared.append(f"{module}.{name} calls position(s) {sorted(positions - declared)}")
    assert seen >= 8, "the probe found too few types that call what they hold"
    assert not undeclared, undeclared


@pytest.mark.parametrize("entry", sorted(DEFERRED_CALLS))
def test_each_declaration_names_an_installed_type_and_its_parameter(entry):
    """Each entry is a type here, and where its signature can be read the position holds the
    parameter the declaration names."""
    import inspect

    module, _, name = entry.rpartition(".")
    kind = getattr(importlib.import_module(module), name)
    assert isinstance(kind, type), entry
    try:
        params = [p.name for p in inspect.signature(kind).parameters.values()]
    except (TypeError, ValueError):
        return
    for declared in DEFERRED_CALLS[entry]:
        if declared.position < len(params) and not params[declared.position].startswith("*"):
            assert params[declared.position] == declared.name, (entry, declared, params)


def test_aliases_and_subclasses_are_found_by_what_they_are(tmp_path):
    """`collections._starmap` is itertools.starmap, `weakref.ref` is `_weakref.ref`, and a class
    whose source derives from map is built by map's __new__."""
    assert deferred_calls("collections", "_starmap") == DEFERRED_CALLS["itertools.starmap"]
    assert deferred_calls("weakref", "ref") == DEFERRED_CALLS["_weakref.ref"]
    assert deferred_calls("functools", "_lru_cache_wrapper")
    assert deferred_calls("builtins", "list") == ()
    from factories import module_on_path

    with module_on_path(tmp_path, "rt56_lazy_base", "class Lazy(map):\n    pass\n"):
        assert deferred_calls("rt56_lazy_base", "Lazy") == DEFERRED_CALLS["builtins.map"]


def test_the_c_functools_partial_is_denied_as_functools_partial():
    for name in ("partial", "reduce"):
        assert classify("_functools", name).severity == "dangerous"


# --- hostile samples, proven ------------------------------------------------------------------

GADGETS = "rt56_deferred_gadgets"
GADGET_SOURCE = '''
def touch(*args):
    open("canary", "w").close()
    return True


class Lazy(map):
    pass


class Target:
    pass
'''


def _argv_list(items: list[str]) -> bytes:
    return EMPTY_LIST + MARK + b"".join(p_unicode(i) for i in items) + APPENDS


def _consumed(consumer: tuple[str, str], lazy: bytes) -> bytes:
    """`consumer(lazy)` (an allowed call that iterates it), as the whole pickle."""
    return PROTO2 + p_global(*consumer) + lazy + TUPLE1 + REDUCE + STOP


def _newobj(kind: tuple[str, str], *args: bytes) -> bytes:
    return p_global(*kind) + MARK + b"".join(args) + TUPLE + NEWOBJ


def _sample(kind: str, target: tuple[str, str]) -> bytes:
    """Each way of building a type that calls `target` later, handed to an allowed call."""
    func, items = p_global(*target), _argv_list(["a", "b"])
    if kind == "map-list":
        return _consumed(("builtins", "list"), _newobj(("builtins", "map"), func, items))
    if kind == "filter-tuple":
        return _consumed(("builtins", "tuple"), _newobj(("builtins", "filter"), func, items))
    if kind == "dropwhile-deque":
        return _consumed(("collections", "deque"),
                         _newobj(("itertools", "dropwhile"), func, items))
    if kind == "starmap-alias":
        rows = EMPTY_LIST + MARK + p_unicode("x") + TUPLE1 + APPENDS
        return _consumed(("builtins", "list"), _newobj(("collections", "_starmap"), func, rows))
    if kind == "groupby-keyword":
        keywords = b"}" + p_unicode("key") + func + b"s"
        lazy = p_global("itertools", "groupby") + items + TUPLE1 + keywords + NEWOBJ_EX
        return _consumed(("builtins", "list"), lazy)
    if kind == "subclass-of-map":
        return _consumed(("builtins", "list"), _newobj((GADGETS, "Lazy"), func, items))
    # a weak reference's callback runs once its referent (made here) is collected
    referent = p_global(GADGETS, "Target") + EMPTY_TUPLE + NEWOBJ
    return _consumed(("builtins", "list"), EMPTY_LIST + MARK + _newobj(
        ("weakref", "ref"), referent, func) + APPENDS)


KINDS = ["map-list", "filter-tuple", "dropwhile-deque", "starmap-alias", "groupby-keyword",
         "subclass-of-map", "weakref-callback"]
_LOAD = ("import pickle, sys, gc\nsys.path.insert(0, sys.argv[1])\ntry:\n    pickle.load(open("
         "sys.argv[2], 'rb'))\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
         "gc.collect()\n")
_TORCH_LOAD = ("import torch, sys\nsys.path.insert(0, sys.argv[1])\ntry:\n    torch.load("
               "sys.argv[2], weights_only=False)\nexcept Exception as exc:\n"
               "    print(type(exc).__name__, exc)\n")


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Each hostile sample (a bare pickle, and the map one also as a torch.save zip), proven
    to write its canary under pickle.load or torch.load(weights_only=False)."""
    from factories import module_on_path

    gadgets = tmp_path_factory.mktemp("rt56-gadgets")
    work = tmp_path_factory.mktemp("rt56-deferred")
    samples: dict[str, tuple[Path, Path]] = {}
    for kind in KINDS:
        (work / kind).mkdir()
        samples[kind] = (work / f"{kind}.pkl", work / kind / "canary")
        samples[kind][0].write_bytes(_sample(kind, (GADGETS, "touch")))
    (work / "zip").mkdir()
    archive = work / "map.pt"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", _sample("map-list", (GADGETS, "touch")))
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    with module_on_path(gadgets, GADGETS, GADGET_SOURCE):
        outputs = run_each_forked(python_exe, _LOAD, [[str(gadgets), str(p)] for p, _ in
                                                      samples.values()],
                                  [work / kind for kind in KINDS], ())
        torch_out = run_each_forked(python_exe, _TORCH_LOAD, [[str(gadgets), str(archive)]],
                                    work / "zip", ("torch",))
        for (kind, (_, canary)), (_, output) in zip(samples.items(), outputs, strict=True):
            assert canary.exists(), f"{kind}: the payload did not run under pickle.load: {output}"
            canary.unlink()
        assert (work / "zip" / "canary").exists(), torch_out
        (work / "zip" / "canary").unlink()
        samples["torch-zip"] = (archive, work / "zip" / "canary")
        yield samples


@pytest.mark.parametrize("kind", [*KINDS, "torch-zip"])
def test_a_deferred_call_is_dangerous_and_never_run(proven, kind):
    sample, canary = proven[kind]
    res = scan_file(sample)
    assert res.verdict == "dangerous", res.to_json()
    assert any(f.code in ("call-outside-allowlist", "indirect-call") for f in res.findings)
    assert not canary.exists()


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("subclass-of-map",
                                                                 "weakref-callback")])
def test_the_same_type_mapping_a_plain_builtin_is_not_dangerous(tmp_path, kind):
    """The twin: the same construction with builtins.str, whose call benign saves make."""
    path = tmp_path / "twin.pkl"
    path.write_bytes(_sample(kind, ("builtins", "str")))
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()


def test_an_allowed_callable_that_calls_its_arguments_is_unchecked_when_mapped(tmp_path):
    """map(copyreg._reconstructor, classes, bases, states): the rebuild is allowed, but what it
    is handed (items of lists the scan does not keep) cannot be checked."""
    lazy = _newobj(("builtins", "map"), p_global("copyreg", "_reconstructor"),
                   _argv_list(["a"]), _argv_list(["b"]), _argv_list(["c"]))
    path = tmp_path / "mapped.pkl"
    path.write_bytes(_consumed(("builtins", "list"), lazy))
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any(f.code == "indirect-call" and "copyreg._reconstructor" in f.message
               for f in res.findings)


def test_probe_helpers_see_a_known_case():
    """The sweep's own probe finds map's and filter's first position and nothing in list."""
    assert _calls_at(builtins.map) == {0}
    assert _calls_at(builtins.filter) == {0}
    assert _calls_at(builtins.list) == set()
    assert _calls_at(functools.partial) == {0}
