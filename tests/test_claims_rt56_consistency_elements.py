"""Every element a consistency probe's reply names is checked here against the file's bytes
(`sandbox.host.claims.consistency_elements`): a device copy's or a round trip's changed
element has the file's value as `expected`, its position the index unravelled, its bits (and
their kinds) the ones `expected` and `actual` differ in; a repeat's first mismatch lies in
its row's output and runs, its bits its values'; the first NaN / Inf named is the one read
here; each row's status is what its own checks give; and a fault asked for must be in the
device copy's differences. A reply that fails is `claim_refuted` (exit 6).

Each lie runs as hostile code inside a real `consistency` job (the jail's self-test hook): the
job's own reply shows the lie, beside the honest answer for the same file.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from inspector.cli import main
from inspector.sandbox.host.consistency_job import ConsistencyRequest
from inspector.sandbox.host.jobs import run_job

REFUTED = 6
"""`consistency`'s exit code for a refused answer."""
INCONSISTENT = 1
RUN = ["--device", "cpu", "--repeats", "3"]

EDIT = """
    import inspector.sandbox.worker.consistency.op as op
    real = op.weights_probe
    def lying(checkpoint, device, repeats=10, seed=0, inject=None, *a, **k):
        out = real(checkpoint, device, repeats, seed, None if SKIP_FAULT else inject, *a, **k)
        rows = {r["key"]: r for r in out["tensors"]}
        BODY
        return out
    op.weights_probe = lying
"""
"""A worker whose probe answer is edited by BODY (`out`, `rows` by key); with SKIP_FAULT it
never makes the fault it was asked for."""
W5 = 0.6920091509819031
"""The file's w[0, 5] (`_file`), as float32."""


def _lie(hostile, body: str, skip_fault: bool = False) -> None:
    source = textwrap.dedent(EDIT).replace("BODY", textwrap.indent(
        textwrap.dedent(body), " " * 4).strip())
    hostile(f"SKIP_FAULT = {skip_fault!r}\n" + source)


def _file(tmp_path, nan: bool = False):
    """A 16x16 weight matrix and a bias (the red team's c.pt; with `nan`, w[2, 3] NaN)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 16, generator=g)
    if nan:
        w[2, 3] = float("nan")
    path = tmp_path / "c.pt"
    torch.save({"w": w, "b": torch.randn(16, generator=g)}, path)
    return path


def _reply(path, inject: dict | None = None) -> dict:
    """The job's own answer, unchecked."""
    return run_job(ConsistencyRequest(str(path), device="cpu", repeats=3,
                                      inject=inject).to_request(), timeout=300)


def _refused(path, capsys, *extra: str) -> str:
    assert main(["consistency", str(path), *RUN, *extra]) == REFUTED
    captured = capsys.readouterr()
    assert "CONSISTENT" not in captured.out
    return captured.err


FAULT = {"key": "w", "index": 5, "bit": 30, "iteration": 2}


def test_a_fault_asked_but_never_made_is_refused(tmp_path, hostile, capsys) -> None:
    path = _file(tmp_path)
    assert main(["consistency", str(path), *RUN, "--inject", "w:5:30"]) == INCONSISTENT
    out = capsys.readouterr().out  # honest: the flip is found where it was made
    assert "w[0,5] (element 5): 0.6920092 -> 2.354785e+38, bit 30 (exponent)" in out
    _lie(hostile, "pass", skip_fault=True)
    reply = _reply(path, FAULT)
    assert reply["injected"] == FAULT and reply["consistent"]  # "injected", yet all passed
    err = _refused(path, capsys, "--inject", "w:5:30")
    assert "bit 30 of w element 5 was asked to be flipped" in err
    assert "the fault was not made" in err


def test_a_fault_made_with_another_bit_is_refused(tmp_path, hostile, capsys) -> None:
    """The worker flips bit 29 where bit 30 was asked, and its record says what it did."""
    path = _file(tmp_path)
    hostile("""
        import inspector.sandbox.worker.consistency.weights_probe as wp
        real = wp.flip_bit
        wp.flip_bit = lambda t, index, bit: real(t, index, 29)
    """)
    reply = _reply(path, FAULT)
    assert reply["injected"] == FAULT
    assert reply["resident_mismatches"][0]["elements"][0]["bits"] == [29]
    assert "bit 30 of w element 5 was asked" in _refused(path, capsys, "--inject", "w:5:30")


INVENTED = {"index": 5, "position": [0, 5], "bits": [3], "kinds": ["mantissa"],
            "expected": 0.125, "actual": 0.12500001}


@pytest.mark.parametrize("element, said", [
    ({}, "the device copy of w element 5 is 0.6920091509819031, reported as 0.125"),
    ({"expected": W5, "actual": 0.5},
     "the device copy of w element 5 with bits [3] flipped is 0.6920096278190613, reported "
     "as 0.5"),
    ({"expected": W5, "actual": 0.6920096278190613, "position": [5, 0]},
     "the device copy of w element 5 is at [0, 5], reported at [5, 0]"),
    ({"expected": W5, "actual": 0.6920096278190613, "kinds": ["exponent"]},
     "the device copy of w element 5's bits [3] are ['mantissa'], reported as ['exponent']"),
    ({"expected": W5, "actual": 0.6920096278190613, "bits": [3, 40]},
     "the device copy of w element 5's bits [3, 40] are no bits of a float32 element"),
    ({"index": 256, "position": [16, 0]},
     "the device copy of w element 256 lies outside its 256 elements"),
], ids=["expected", "actual", "position", "kinds", "bits", "index"])
def test_an_invented_device_copy_difference_is_refused(tmp_path, hostile, capsys,
                                                       element, said) -> None:
    path = _file(tmp_path)
    record = {**INVENTED, **element}
    _lie(hostile, f"""
        rows["w"]["status"] = "fail"
        out["consistent"] = False
        out["resident_mismatches"] = [{{"key": "w", "changed_elements": 1,
                                       "elements": [{record!r}]}}]
    """)
    reply = _reply(path)
    assert reply["resident_mismatches"][0]["elements"] == [record]  # the lie, unchecked
    assert said in _refused(path, capsys)


def test_an_invented_round_trip_difference_is_refused(tmp_path, hostile, capsys) -> None:
    """The bias (never probed, only copied there and back) said to come back changed."""
    path = _file(tmp_path)
    element = {"index": 2, "position": [2], "bits": [0], "kinds": ["mantissa"],
               "expected": 1.5, "actual": 1.5000001192092896}
    _lie(hostile, f"""
        rows["b"].update(status="fail", roundtrip_ok=False, roundtrip_mismatch={{
            "key": "b", "changed_elements": 1, "elements": [{element!r}]}})
        out["consistent"] = False
    """)
    assert _reply(path)["tensors"][1]["roundtrip_mismatch"]["elements"] == [element]
    err = _refused(path, capsys)
    assert "b's round trip element 2 is " in err and "reported as 1.5" in err


@pytest.mark.parametrize("first, said", [
    ({"iteration": 2, "index": 3, "position": [0, 3], "bits": [30], "kinds": ["exponent"],
      "expected": 1.0, "actual": 5.0},
     "w's first mismatch element 3 with bits [30] flipped is inf, reported as 5.0"),
    ({"iteration": 2, "index": 9, "position": [0, 9], "bits": [0], "kinds": ["mantissa"],
      "expected": 1.0, "actual": 1.0000001192092896},
     "w's first mismatch element 9 is at [1, 1], reported at [0, 9]"),
    ({"iteration": 7, "index": 9, "position": [1, 1], "bits": [0], "kinds": ["mantissa"],
      "expected": 1.0, "actual": 1.0000001192092896},
     "w's first mismatch is no output of w in runs 2 to 3"),
    ({"iteration": 2, "index": 9, "position": [1, 1], "bits": [0], "kinds": ["mantissa"],
      "expected": 0.1, "actual": 0.1},
     "w's first mismatch element 9's expected 0.1 is no float32 value"),
], ids=["bits", "position", "iteration", "expected"])
def test_an_invented_first_mismatch_is_refused(tmp_path, hostile, capsys, first, said) -> None:
    path = _file(tmp_path)
    _lie(hostile, f"""
        rows["w"].update(status="fail", repeat_mismatches=1, max_abs_diff=4.0,
                         first_mismatch={{"key": "w", **{first!r}}})
        out["consistent"] = False
    """)
    assert _reply(path)["tensors"][0]["first_mismatch"]["iteration"] == first["iteration"]
    assert said in _refused(path, capsys)


@pytest.mark.parametrize("body, lie, said", [
    ('rows["w"]["status"] = "fail"\nout["consistent"] = False', (0, "status", "fail"),
     "w passed its checks, reported as fail"),
    ('rows["b"]["status"] = "skipped"', (1, "status", "skipped"),
     "b passed its checks, reported as skipped"),
    ('rows["w"]["reference_ok"] = True\nrows["w"]["reference_error_ratio"] = 9.0',
     (0, "reference_error_ratio", 9.0), "w's reference_ok does not agree with its own record"),
    ('rows["w"]["compute_dtype"] = "float64"', (0, "compute_dtype", "float64"),
     "w (float32) is multiplied in float32, reported in float64"),
], ids=["failed-for-nothing", "skipped", "reference", "compute-dtype"])
def test_a_row_its_own_checks_do_not_give_is_refused(tmp_path, hostile, capsys, body, lie,
                                                     said) -> None:
    path = _file(tmp_path)
    _lie(hostile, body)
    row, name, value = lie
    assert _reply(path)["tensors"][row][name] == value
    assert said in _refused(path, capsys)


def test_the_first_nan_named_is_the_files(tmp_path, hostile, capsys) -> None:
    path = _file(tmp_path, nan=True)
    assert main(["consistency", str(path), *RUN]) == 7  # honest: not judged, element 35
    assert "(1 value, first at element 35)" in capsys.readouterr().out
    _lie(hostile, """
        for r in out["tensors"]:
            if r.get("nonfinite"):
                r["first_nonfinite"] = 200
    """)
    assert _reply(path)["tensors"][0]["first_nonfinite"] == 200
    assert "w's first NaN/Inf is element 35, reported as 200" in _refused(path, capsys)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64,
                                   torch.float8_e4m3fn])
@pytest.mark.parametrize("fault", ["w:5:3@1", "w:17:1@3"])
def test_an_honest_fault_in_each_float_dtype_passes(tmp_path, capsys, dtype, fault) -> None:
    """Every float the probe multiplies in as it is, and float8 (multiplied in float32): the
    values read here are the worker's, bit for bit."""
    g = torch.Generator().manual_seed(3)
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(8, 4, generator=g).to(dtype)}, path)
    assert main(["consistency", str(path), *RUN, "--inject", fault]) == INCONSISTENT
    out = capsys.readouterr().out
    assert "device copy of w differs from the checkpoint in 1 element:" in out


def test_a_fault_never_made_in_a_file_not_read_here_is_refused(tmp_path, hostile,
                                                               capsys) -> None:
    """A file holding a `torch.dtype` is not read here, yet the fault's effect needs none of
    its bytes: the device copy's differences must hold it."""
    g = torch.Generator().manual_seed(0)
    path = tmp_path / "d.pt"
    torch.save({"w": torch.randn(16, 16, generator=g), "dtype": torch.float16}, path)
    assert main(["consistency", str(path), *RUN, "--inject", "w:5:30"]) == INCONSISTENT
    capsys.readouterr()
    _lie(hostile, "pass", skip_fault=True)
    assert _reply(path, FAULT)["consistent"]
    assert "the fault was not made" in _refused(path, capsys, "--inject", "w:5:30")
