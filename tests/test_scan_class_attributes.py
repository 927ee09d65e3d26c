"""`getattr(<import>, '<literal>')` in a pickle is the dotted import `module.Class.name`, judged
as a dotted STACK_GLOBAL is: protocol 2 pickles a class's staticmethod so (a whole CyclicLR's
default scale_fn), which is no longer dangerous; a lookup that reaches a denied callable is, and
so is any getattr with a computed owner or name. The hostile lookup is proven to run its payload
under pickle.loads in a throwaway process, after the scan ran nothing."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from factories import PROTO2, REDUCE, STOP, TUPLE1, TUPLE2, p_binget, p_binput, p_global, p_unicode

from inspector.scan.engine import scan_bytes


def _scan(path: Path) -> dict:
    """`ckpt-inspector scan --json`: the walk and the real readings together."""
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(path)],
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.splitlines()[0])


def _dangerous(record: dict) -> list[str]:
    return ([f["message"] for f in record["findings"] if f["severity"] == "dangerous"]
            + [g["import"] for g in record["globals"] if g["severity"] == "dangerous"])


def test_a_whole_cyclic_lr_saved_with_torch_is_suspicious(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
    path = tmp_path / "scheduler.pt"
    torch.save(torch.optim.lr_scheduler.CyclicLR(optimizer, 0.01, 0.1), path)
    assert b"getattr" in path.read_bytes()  # torch's zip stores its pickle uncompressed
    record = _scan(path)
    assert (record["verdict"], _dangerous(record)) == ("suspicious", []), record
    assert any("CyclicLR._triangular_scale_fn" in g["import"] for g in record["globals"])
    assert torch.load(path, weights_only=False).scale_fn(1.0) == 1.0


def _lookup(owner: bytes, name: bytes) -> bytes:
    return p_global("builtins", "getattr") + owner + name + TUPLE2 + REDUCE


def test_a_literal_lookup_that_reaches_a_denied_callable_is_dangerous_and_runs(
        tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    data = (PROTO2 + _lookup(p_global("posixpath", "os"), p_unicode("system"))
            + p_unicode(f"touch {canary}") + TUPLE1 + REDUCE + STOP)
    path = tmp_path / "lookup.pkl"
    path.write_bytes(data)
    record = _scan(path)
    assert record["verdict"] == "dangerous", record
    assert any("posixpath.os.system" in d for d in _dangerous(record)), _dangerous(record)
    assert not canary.exists()
    run = subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(open(sys.argv"
                          "[1], 'rb').read())", str(path)], capture_output=True, timeout=60)
    assert run.returncode == 0 and canary.exists(), run.stderr


@pytest.mark.parametrize("shape", ["computed name", "computed owner", "memo reused"])
def test_any_other_getattr_stays_dangerous(shape: str) -> None:
    owner = p_global("torch.optim.lr_scheduler", "CyclicLR")
    computed = p_global("builtins", "str") + p_unicode("system") + TUPLE1 + REDUCE
    data = {
        "computed name": _lookup(owner, computed),
        "computed owner": _lookup(p_global("builtins", "str") + p_unicode("x") + TUPLE1
                                  + REDUCE, p_unicode("join")),
        # the memoised getattr, once a literal lookup, then called with a computed name
        "memo reused": p_global("builtins", "getattr") + p_binput(0) + owner
        + p_unicode("_triangular_scale_fn") + TUPLE2 + REDUCE + p_binget(0) + owner + computed
        + TUPLE2 + REDUCE + TUPLE2,
    }[shape]
    res = scan_bytes(PROTO2 + data + STOP)
    assert res.verdict == "dangerous", res.to_json()
    literal = PROTO2 + _lookup(owner, p_unicode("_triangular_scale_fn")) + STOP
    assert scan_bytes(literal).verdict == "suspicious"  # the twin: one literal lookup
    assert pickle.loads(literal)(1.0) == 1.0
