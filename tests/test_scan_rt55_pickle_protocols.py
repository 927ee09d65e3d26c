"""What the loader reads of an instance it is handed is judged from the instance's source
(round 55): NumPy's dtype and array conversions read a `dtype` attribute or run `__array__`
(numpy.dtype(x), ndarray(shape, x), _reconstruct's dtype, a masked array's data), and
torch.load's storage loader reads the persistent id's `storage_type.dtype`. A property or
method there ran a program while the scan said suspicious. Each hostile sample is proven under
its real loader (a canary appears), then scanned: dangerous, and the canary never appears."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from factories import (
    EMPTY_TUPLE,
    MARK,
    NEWOBJ,
    PROTO2,
    REDUCE,
    STOP,
    TUPLE,
    _rewrite_zip,
    _torch_zip_bytes,
    p_global,
    p_int,
    p_unicode,
)
from proofs import run_each_forked

from inspector.scan.engine import scan_bytes, scan_file

GADGETS = "rt55_protocol_gadgets"
# Each gadget writes the canary in the folder the load runs in, from what the loader reads.
GADGET_SOURCE = '''
def _touch():
    open("canary", "w").close()


class DtypeProperty:
    @property
    def dtype(self):
        _touch()
        return "f4"


class ArrayMethod:
    def __array__(self, dtype=None, copy=None):
        _touch()
        import numpy
        return numpy.zeros(2)
'''


def _instance(name: str) -> bytes:
    return p_global(GADGETS, name) + EMPTY_TUPLE + NEWOBJ


def _reduce(module: str, name: str, *args: bytes) -> bytes:
    return PROTO2 + p_global(module, name) + MARK + b"".join(args) + TUPLE + REDUCE + STOP


def _storage_id(storage_type: bytes) -> bytes:
    """A tensor whose storage's persistent id holds `storage_type`."""
    pid = MARK + p_unicode("storage") + storage_type + p_unicode("0") + p_unicode("cpu") + p_int(
        2) + TUPLE + b"Q"
    size = p_int(2) + b"\x85" + p_int(1) + b"\x85"
    return (PROTO2 + p_global("torch._utils", "_rebuild_tensor_v2") + MARK + pid + p_int(0)
            + size + b"\x89" + p_global("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE
            + TUPLE + REDUCE + STOP)


def _hostile(kind: str, work: Path) -> tuple[str, bytes]:
    """The sample's file name and bytes."""
    if kind == "dtype-of-instance":
        return "s.pkl", _reduce("numpy", "dtype", _instance("DtypeProperty"))
    if kind == "ndarray-dtype":
        return "s.pkl", _reduce("numpy", "ndarray", p_int(2) + b"\x85", _instance(
            "DtypeProperty"))
    if kind == "reconstruct-dtype":
        return "s.pkl", _reduce("numpy.core.multiarray", "_reconstruct",
                                p_global("numpy", "ndarray"), p_int(0) + b"\x85",
                                _instance("DtypeProperty"))
    if kind == "masked-array-data":
        return "s.pkl", _reduce("numpy.ma.core", "MaskedArray", _instance("ArrayMethod"))
    data = _rewrite_zip(_torch_zip_bytes(work), {"/data.pkl": _storage_id(_instance(
        "DtypeProperty"))})
    return "s.pt", data


HOSTILE = ["dtype-of-instance", "ndarray-dtype", "reconstruct-dtype", "masked-array-data",
           "storage-type-dtype"]
# argv: the gadgets' folder, the sample; a load's error after its payload ran is expected
_LOAD = ("import pickle, sys, torch\nsys.path.insert(0, sys.argv[1])\ntry:\n"
         "    p = sys.argv[2]\n"
         "    torch.load(p, weights_only=False) if p.endswith('.pt') else "
         "pickle.load(open(p, 'rb'))\n"
         "except Exception as exc:\n    print(type(exc).__name__, exc)\n")


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """The gadgets on sys.path (a fresh module name: the source reader caches) and every
    hostile sample, proven to write its canary under its loader (removed again)."""
    gadgets = tmp_path_factory.mktemp("rt55-protocol-gadgets")
    (gadgets / f"{GADGETS}.py").write_text(GADGET_SOURCE)
    work = tmp_path_factory.mktemp("rt55-protocols")
    samples = {}
    for kind in HOSTILE:
        (work / kind).mkdir()
        name, data = _hostile(kind, work)
        sample = work / kind / name
        sample.write_bytes(data)
        samples[kind] = (sample, work / kind / "canary")
    outputs = run_each_forked(python_exe, _LOAD, [[str(gadgets), str(p)] for p, _ in
                                                  samples.values()],
                              [work / kind for kind in HOSTILE], ("torch", "numpy"))
    for (kind, (_, canary)), (_, output) in zip(samples.items(), outputs, strict=True):
        assert canary.exists(), f"{kind}: the payload did not run under its loader: {output}"
        canary.unlink()
    sys.path.insert(0, str(gadgets))
    try:
        yield samples
    finally:
        sys.path.remove(str(gadgets))
        sys.modules.pop(GADGETS, None)


@pytest.mark.parametrize("kind", HOSTILE)
def test_what_the_loader_reads_of_an_instance_is_judged(proven, kind):
    sample, canary = proven[kind]
    res = scan_file(sample)
    assert res.verdict == "dangerous", res.to_json()
    assert any(f.code == "implicit-call" for f in res.findings), res.to_json()
    assert not canary.exists()


@pytest.mark.parametrize("value", [
    np.dtype("f4"), np.arange(4, dtype=np.int16), np.ma.masked_array([1.0, 2.0], mask=[0, 1],
                                                                     fill_value=7.0),
    np.array(["a", 3], dtype=object),
], ids=["dtype", "array", "masked", "object-array"])
def test_numpy_values_keep_their_verdict(value):
    """NumPy's own pickles hand its conversions plain text, numbers and its own objects."""
    res = scan_bytes(pickle.dumps(value, protocol=2))
    assert res.verdict == "suspicious", res.to_json()
    assert not [f for f in res.findings if f.code == "implicit-call"], res.to_json()
