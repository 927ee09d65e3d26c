"""Common objects benign saves hold are suspicious, not dangerous (round 56).

A torch.save of a torch.Generator (torch._C, denied whole), `time.localtime()`, a
`random.Random`, `platform.uname()` (platform, denied whole), a datetime in a ZoneInfo zone, an
`array.array` or a `numpy.rec` record array was called dangerous. What each does was read in
the installed type or its source (here, never by running a pickle): each only stores values,
or for the Generator sets an RNG state; weights_only refuses them, so suspicious. The same
names handed hostile arguments stay dangerous, proven under pickle.load (a canary appears) and
scanned (the canary never appears): a list's items handed to an allowed call now have their
protocols judged (`array('f', [x])` asks x's __float__), and an array subclass rebuilt by
NumPy's `_reconstruct` is judged by what its source's __array_finalize__ reaches."""

from __future__ import annotations

import array
import datetime
import inspect
import os
import platform
import random
import time
import zoneinfo
from pathlib import Path

import pytest
from factories import (
    BUILD,
    EMPTY_TUPLE,
    MARK,
    NEWOBJ,
    PROTO2,
    REDUCE,
    STOP,
    TUPLE,
    module_on_path,
    p_global,
    p_int,
    p_unicode,
)
from proofs import run_each_forked

from inspector.scan.engine import scan_file
from inspector.scan.pickles.calls import DATA_CLASSES, LITERAL_CALLS, STDLIB_STRUCT_SEQUENCES
from inspector.scan.pickles.class_source import array_subclass
from inspector.scan.pickles.policy import classify

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class statement's type, not a static C one


# --- what each type is, read in the installed type ---------------------------------------

@pytest.mark.parametrize("entry", sorted(STDLIB_STRUCT_SEQUENCES))
def test_stdlib_struct_sequences_are_c_tuple_types(entry):
    module, _, name = entry.rpartition(".")
    kind = getattr(__import__(module), name)
    assert kind.__mro__ == (kind, tuple, object), entry
    assert isinstance(kind.n_sequence_fields, int), entry
    assert not [v for v in vars(kind).values() if inspect.isfunction(v)], entry


def test_the_generator_is_torch_s_c_type_and_pickles_as_a_device_and_a_state():
    import torch

    assert torch.Generator is torch._C.Generator
    assert "torch._C.Generator" in DATA_CLASSES
    assert not torch.Generator.__flags__ & _HEAP_TYPE
    func, args, state = torch.Generator().manual_seed(0).__reduce__()
    assert func is torch.Generator and args == (torch.device("cpu"),)
    assert [type(v) for v in state] == [int, type(None), torch.Tensor]


def test_random_pickles_as_a_call_with_nothing_and_sets_its_state_in_c():
    cls, args = random.Random(0).__reduce__()[:2]
    assert (cls, args) == (random.Random, ())
    assert "self.setstate(state)" in inspect.getsource(random.Random.__setstate__)
    assert "super().setstate(internalstate)" in inspect.getsource(random.Random.setstate)
    assert "random.Random" in LITERAL_CALLS


def test_uname_result_pickles_as_five_texts_and_runs_only_a_fixed_uname():
    func, args = platform.uname().__reduce__()
    assert func is platform.uname_result and len(args) == 5
    assert all(isinstance(a, str) for a in args)
    source = inspect.getsource(platform._Processor.from_subprocess)
    assert "['uname', '-p']" in source  # the program reading `processor` runs, fixed


def test_a_zone_pickles_as_its_key_through_unpickle():
    func, args = zoneinfo.ZoneInfo("UTC").__reduce__()
    assert func == zoneinfo.ZoneInfo._unpickle and args == ("UTC", 1)
    with pytest.raises(ValueError):
        zoneinfo.ZoneInfo("/etc/passwd")  # the key is checked against paths


def test_recarray_is_an_ndarray_subclass_by_its_source():
    assert array_subclass("numpy.rec", "recarray") is not None
    assert array_subclass("mailbox", "mbox") is None


# --- benign saves beside plain twins ------------------------------------------------------

def _benign(kind: str) -> tuple[object, object | None]:
    """A value a benign save holds, and the same data in plain types (None: no twin loads
    with weights_only either)."""
    import numpy as np
    import torch

    if kind == "generator":
        made = torch.Generator().manual_seed(0)
        return {"gen": made}, {"gen": made.get_state()}
    if kind == "struct_time":
        return {"saved_at": time.localtime(0)}, {"saved_at": tuple(time.localtime(0))}
    if kind == "stat_result":
        return {"stat": os.stat(__file__)}, {"stat": tuple(os.stat(__file__))}
    if kind == "random":
        return {"rng": random.Random(0)}, {"rng": random.Random(0).getstate()}
    if kind == "uname":
        return {"env": platform.uname()}, {"env": tuple(platform.uname())}
    if kind == "zoneinfo":
        return {"t": datetime.datetime(2024, 1, 1, tzinfo=zoneinfo.ZoneInfo("UTC"))}, None
    if kind == "array":
        return {"a": array.array("f", [1.0, 2.0])}, {"a": [1.0, 2.0]}
    return {"r": np.rec.fromrecords([(1, 2.0)], names="a,b")}, None


BENIGN = ["generator", "struct_time", "stat_result", "random", "uname", "zoneinfo", "array",
          "recarray"]


@pytest.mark.parametrize("kind", BENIGN)
def test_a_benign_save_is_suspicious_and_its_twin_safe(tmp_path, kind):
    import torch

    value, twin = _benign(kind)
    torch.save(value, tmp_path / "value.pt")
    res = scan_file(tmp_path / "value.pt")
    assert res.verdict == "suspicious", res.to_json()
    assert not [f for f in res.findings if f.severity == "dangerous"], res.to_json()
    if twin is not None:
        torch.save(twin, tmp_path / "twin.pt")
        assert scan_file(tmp_path / "twin.pt").verdict == "safe"


@pytest.mark.parametrize(("module", "name"), [
    ("torch._C", "_jit_pass_inline"), ("torch._C", "Generator.manual_seed.__call__"),
    ("platform", "popen"), ("platform", "_syscmd_ver"), ("platform", "uname"),
    ("os", "system"), ("posix", "stat_result.__new__"), ("time", "sleep.__call__"),
])
def test_siblings_of_the_admitted_types_stay_dangerous(module, name):
    assert classify(module, name).severity == "dangerous"


# --- hostile arguments through the same names, proven --------------------------------------

GADGETS = "rt56_precision_gadgets"
GADGET_SOURCE = '''
import numpy


def _touch():
    open("canary", "w").close()


class Floaty:
    def __float__(self):
        _touch()
        return 1.0


class Iterated:
    def __iter__(self):
        _touch()
        return iter(range(11))


class Indexed:
    def __getitem__(self, key):
        _touch()
        return 3


class Finalised(numpy.ndarray):
    def __array_finalize__(self, obj):
        _touch()
'''
BINBYTES1 = b"C"


def _instance(name: str) -> bytes:
    return p_global(GADGETS, name) + EMPTY_TUPLE + NEWOBJ


def _reduce(module: str, name: str, *args: bytes) -> bytes:
    return p_global(module, name) + MARK + b"".join(args) + TUPLE + REDUCE


def _hostile(kind: str) -> bytes:
    if kind == "array-item-float":
        items = b"]" + MARK + _instance("Floaty") + b"e"
        return PROTO2 + _reduce("array", "array", p_unicode("f"), items) + STOP
    if kind == "struct-time-iterated":
        return PROTO2 + _reduce("time", "struct_time", _instance("Iterated"), b"}") + STOP
    if kind == "random-state-indexed":  # Random.__setstate__ indexes its state
        return PROTO2 + _reduce("random", "Random") + _instance("Indexed") + BUILD + STOP
    # NumPy's rebuild of an array subclass runs the subclass's __array_finalize__
    core = "numpy._core.multiarray"
    return PROTO2 + _reduce(core, "_reconstruct", p_global(GADGETS, "Finalised"),
                            MARK + p_int(0) + TUPLE, BINBYTES1 + b"\x01b") + STOP


HOSTILE = ["array-item-float", "struct-time-iterated", "random-state-indexed",
           "array-subclass-finalised"]
_LOAD = ("import pickle, sys\nsys.path.insert(0, sys.argv[1])\ntry:\n    pickle.load(open("
         "sys.argv[2], 'rb'))\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n")


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    gadgets = tmp_path_factory.mktemp("rt56-precision-gadgets")
    work = tmp_path_factory.mktemp("rt56-precision")
    samples: dict[str, tuple[Path, Path]] = {}
    for kind in HOSTILE:
        (work / kind).mkdir()
        samples[kind] = (work / f"{kind}.pkl", work / kind / "canary")
        samples[kind][0].write_bytes(_hostile(kind))
    with module_on_path(gadgets, GADGETS, GADGET_SOURCE):
        outputs = run_each_forked(python_exe, _LOAD, [[str(gadgets), str(p)] for p, _ in
                                                      samples.values()],
                                  [work / kind for kind in HOSTILE], ("numpy",))
        for (kind, (_, canary)), (_, output) in zip(samples.items(), outputs, strict=True):
            assert canary.exists(), f"{kind}: the payload did not run under pickle.load: {output}"
            canary.unlink()
        yield samples


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_use_of_an_admitted_name_is_dangerous_and_never_run(proven, kind):
    sample, canary = proven[kind]
    res = scan_file(sample)
    assert res.verdict == "dangerous", res.to_json()
    assert not canary.exists()
