"""Every float dtype health judges is measured here, not taken from the worker.

A complex tensor's values (its magnitudes, as the worker judges them) and every float8 type's
are read from the file's bytes by the user's process (`rawtensors.orders.VALUES`), so a worker
that hides a flipped exponent bit in one of them is caught as it is in float32: its range is
held against the bytes' and its binary orders are counted here.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from inspector.cli import main
from inspector.rawtensors.orders import FLOAT8_TABLES, VALUES

FLOAT8 = [name for name in FLOAT8_TABLES if hasattr(torch, name)]
COMPLEX = ["complex32", "complex64", "complex128"]


@pytest.mark.parametrize("name", FLOAT8)
def test_each_float8_pattern_reads_as_torch_widens_it(name) -> None:
    patterns = torch.arange(256, dtype=torch.uint8)
    wanted = patterns.view(getattr(torch, name)).to(torch.float32).numpy()
    got = VALUES[name](memoryview(patterns.numpy().tobytes()))
    assert got.dtype == np.float32
    assert np.array_equal(got, wanted, equal_nan=True)
    numbers = ~np.isnan(wanted)
    assert np.array_equal(np.signbit(got[numbers]), np.signbit(wanted[numbers]))


@pytest.mark.parametrize("name", COMPLEX)
def test_complex_magnitudes_are_torchs_within_one_unit(name) -> None:
    g = torch.Generator().manual_seed(3)
    z = torch.randn(50_001, dtype=torch.complex64, generator=g)
    for scale in (1.0, 1e-20, 1e-39, 1e30):
        t = (z * scale).to(getattr(torch, name))
        wanted = t.to(torch.complex128 if name == "complex128" else torch.complex64).abs()
        got = VALUES[name](memoryview(t.view(torch.uint8).numpy().tobytes()))
        assert got.dtype == wanted.numpy().dtype
        ints = np.int64 if got.dtype == np.float64 else np.int32
        apart = np.abs(got.view(ints).astype(np.int64) - wanted.numpy().view(ints))
        assert apart.max() <= 1


HIDING = """
    import inspector.tensors.describe as op
    real = op.describe_tensors
    def hiding(tensors, on_tensor, **options):
        def told(event):
            if event.get("key") == "w":
                event.pop("exponents", None)  # what health judges a flipped exponent bit from
                if SMALLER:
                    event.update(absmax=BULK, max=BULK)
            on_tensor(event)
        return real(tensors, told, **options)
    op.describe_tensors = hiding
"""


def _flipped(name: str) -> tuple[torch.Tensor, float]:
    """A 32x32 weight of dtype `name` with one value's top exponent bit set, and its bulk's
    largest magnitude."""
    g = torch.Generator().manual_seed(0)
    if name in COMPLEX:
        w = (torch.randn(32, 32, dtype=torch.complex64, generator=g) / 4).to(getattr(torch, name))
        bulk = float(w.to(torch.complex128).abs().max())
        half = {"complex32": torch.int16, "complex64": torch.int32, "complex128": torch.int64}[name]
        top = {"complex32": 1 << 14, "complex64": 1 << 30, "complex128": 1 << 62}[name]
        w.view(half).view(-1)[11] |= top
        return w, bulk
    w = (torch.rand(32, 32, generator=g) / 4 + 1 / 64).to(getattr(torch, name))
    bulk = float(w.to(torch.float32).abs().max())
    bits = w.view(torch.uint8)
    bits.view(-1)[11] = 0xFE if name == "float8_e8m0fnu" else bits.view(-1)[11] | 0x40
    return w, bulk


JUDGED = ["complex32", "complex64", "complex128",
          *[n for n in ("float8_e5m2fnuz", "float8_e8m0fnu") if n in FLOAT8]]


@pytest.mark.parametrize("smaller", [False, True], ids=["orders-dropped", "absmax-too"])
@pytest.mark.parametrize("name", JUDGED)
def test_a_worker_that_hides_a_flipped_exponent_in_any_float_is_caught(
        tmp_path, hostile, capsys, name, smaller) -> None:
    w, bulk = _flipped(name)
    path = tmp_path / "m.pt"
    torch.save({"w": w}, path)
    assert main(["inspect", str(path), "--json"]) == 7  # the honest worker: a problem
    honest = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in honest["health"]["findings"]] == ["magnitude-outlier"]
    hostile(f"SMALLER = {smaller}\nBULK = {bulk!r}\n" + textwrap.dedent(HIDING))
    code = main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    if smaller:  # a largest value the bytes do not hold: none of the answer is trusted
        assert report["error"]["code"] == "claim_refuted" and report["health"] is None
        assert "w has max" in report["error"]["message"]
    else:  # the orders counted here judge it
        assert code == 7 and report["claims"]["checked"] is True
        assert [f["code"] for f in report["health"]["findings"]] == ["magnitude-outlier"]


def test_an_honest_inspection_of_every_float_is_checked_here(tmp_path, capsys) -> None:
    g = torch.Generator().manual_seed(5)
    state = {}
    for name in (*FLOAT8, *COMPLEX):
        dtype = getattr(torch, name)
        base = torch.randn(40, 40, dtype=torch.complex64 if name in COMPLEX else torch.float32,
                           generator=g)
        t = base.to(dtype)
        t.view(-1)[7] = 0
        state[name] = t
    state["complex64"].view(-1)[30] = complex(float("inf"), float("nan"))
    state["complex64"].view(-1)[31] = complex(3e38, 3e38)  # Inf as a magnitude, as the worker's
    path = tmp_path / "m.pt"
    torch.save(state, path)
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["claims"] == {"checked": True, "tensors": len(state), "reason": None}
    rows = {r["key"]: r for r in report["tensors"]}
    assert rows["complex64"]["inf"] == 2 and rows["complex64"]["first_nonfinite"] == 30
    assert all(rows[n]["min"] >= 0 for n in COMPLEX)
