"""1,000 random single-bit flips across dtypes, each found and localised by the diff engine.

The loop runs in-process on tensors read back from raw bytes, through the same streaming
function the worker's `diff` op uses (`diff_raw` over `stats.byte_chunks`), so it takes about a
second; `test_diff_e2e.py` flips bits in real `.pt` and `.safetensors` files through the jailed
worker for a smaller number of cases.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from inspector.sandbox.worker.diff import CHANGED, IDENTICAL, diff_checkpoints, diff_raw
from inspector.tensors import stats
from inspector.tensors.sources import open_checkpoint
from inspector.tensors.stats import byte_chunks

# (exponent bits, mantissa bits) written out independently of inspector.checkpoint.bitflip
FLOAT_FIELDS = {
    torch.float64: (11, 52),
    torch.float32: (8, 23),
    torch.float16: (5, 10),
    torch.bfloat16: (8, 7),
    torch.float8_e4m3fn: (4, 3),
    torch.float8_e5m2: (5, 2),
    torch.float8_e4m3fnuz: (4, 3),
    torch.float8_e5m2fnuz: (5, 2),
}
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16]


def _expected_kind(dtype: torch.dtype, bit: int) -> tuple[str, str | None]:
    if dtype.is_complex:
        half = dtype.itemsize * 4
        real = {torch.complex64: torch.float32, torch.complex128: torch.float64}[dtype]
        return _expected_kind(real, bit % half)[0], "real" if bit < half else "imag"
    if dtype in FLOAT_FIELDS:
        exponent, mantissa = FLOAT_FIELDS[dtype]
        if bit < mantissa:
            return "mantissa", None
        return ("exponent" if bit < mantissa + exponent else "sign"), None
    if dtype == torch.bool:
        return ("value" if bit == 0 else "padding"), None
    signed = dtype.is_signed
    return ("sign" if signed and bit == dtype.itemsize * 8 - 1 else "value"), None


def _pool() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    shapes = [(7,), (3, 5), (2, 3, 4), (1,), (64, 9)]
    tensors = []
    for i, dtype in enumerate(
        [*FLOAT_FIELDS, torch.complex64, torch.complex128, torch.bool, *INTS]
    ):
        shape = shapes[i % len(shapes)]
        if dtype.is_floating_point or dtype.is_complex:
            t = (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dtype)
        elif dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=g).bool()
        else:
            t = torch.randint(0, 100, shape, generator=g).to(dtype)
        tensors.append(t)
    return tensors


def _split(raw: np.ndarray, itemsize: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Cut a byte buffer into random whole-element chunks, as the worker's streaming would."""
    n = raw.size // itemsize
    cuts = sorted(set(rng.integers(0, n + 1, size=3).tolist()) | {0, n})
    return [raw[a * itemsize : b * itemsize] for a, b in itertools.pairwise(cuts)]


def test_thousand_random_single_bit_flips_are_localised() -> None:
    rng = np.random.default_rng(20261129)
    pool = _pool()
    for trial in range(1000):
        t = pool[trial % len(pool)]
        raw = np.frombuffer(b"".join(byte_chunks(t)), dtype=np.uint8)
        itemsize = t.element_size()
        index = int(rng.integers(0, t.numel()))
        bit = int(rng.integers(0, 8 * itemsize))
        flipped = raw.copy()
        flipped[index * itemsize + bit // 8] ^= 1 << (bit % 8)

        diff = diff_raw(
            f"t{trial}",
            t.dtype,
            t.shape,
            _split(raw, itemsize, rng),
            _split(flipped, itemsize, rng),
        )
        record = diff.to_json()
        context = (trial, t.dtype, index, bit)
        assert record["status"] == CHANGED, context
        assert record["changed_elements"] == 1 and record["single_bit_flips"] == 1, context
        (flip,) = record["bitflips"]
        assert (flip["index"], flip["bit"]) == (index, bit), context
        assert (flip["kind"], flip.get("part")) == _expected_kind(t.dtype, bit), context
        assert flip["position"] == [int(i) for i in np.unravel_index(index, tuple(t.shape))]
        assert record["summary"].startswith(f"1 single-bit flip in `t{trial}`, in ")


def test_numeric_differences_of_a_changed_tensor() -> None:
    a = torch.tensor([[1.0, -2.0], [0.0, 8.0]])
    b = torch.tensor([[1.0, -2.5], [0.25, float("inf")]])
    diff = diff_raw("w", a.dtype, a.shape, byte_chunks(a), byte_chunks(b)).to_json()
    assert diff["changed_elements"] == 3
    assert diff["max_abs_diff"] == 0.5
    assert diff["max_rel_diff"] == 1.0  # 0 -> 0.25 is a full change relative to the larger side
    assert diff["nonfinite_changes"] == 1
    assert diff["multi_bit_elements"] == 3 - diff["single_bit_flips"]


def test_identical_and_non_contiguous_views_compare_as_row_major(monkeypatch) -> None:
    monkeypatch.setattr(stats, "CHUNK_BYTES", 24)  # several chunks, boundaries unlike the copy
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base.t()
    copy = view.contiguous()
    same = diff_raw("v", view.dtype, view.shape, byte_chunks(view), [copy.numpy().tobytes()])
    assert same.status == IDENTICAL and same.to_json()["bitflips"] == []
    copy.view(-1).view(torch.int32)[7] ^= 1
    changed = diff_raw("v", view.dtype, view.shape, byte_chunks(view), byte_chunks(copy))
    assert [(f.index, f.bit) for f in changed.tally.flips] == [(7, 0)]


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_quantized_tensors_compare_on_their_integers() -> None:
    q = torch.quantize_per_tensor(torch.randn(10), 0.1, 3, torch.qint8)
    flipped = bytearray(b"".join(byte_chunks(q)))
    flipped[4] ^= 0x80
    diff = diff_raw("q", q.dtype, q.shape, byte_chunks(q), [flipped]).to_json()
    assert [(f["index"], f["bit"], f["kind"]) for f in diff["bitflips"]] == [(4, 7, "sign")]
    assert diff["max_abs_diff"] == 128.0  # on the integer representation


def test_mismatched_lengths_are_an_error() -> None:
    with pytest.raises(ValueError, match="lengths differ"):
        diff_raw("x", torch.float32, (2,), [np.zeros(8, np.uint8)], [np.zeros(4, np.uint8)])


def _safetensors(path: Path, header: dict, payload: bytes) -> Path:
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + payload)
    return path


def test_dtypes_without_a_bit_layout_compare_by_bytes(tmp_path: Path) -> None:
    header = {
        "packed": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]},
        "w": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]},
    }
    a = _safetensors(tmp_path / "a.safetensors", header, b"\x12\x34" + struct.pack("<f", 1.0))
    b = _safetensors(tmp_path / "b.safetensors", header, b"\x12\x35" + struct.pack("<f", 1.0))
    result = diff_checkpoints(open_checkpoint(str(a)), open_checkpoint(str(b)))
    assert result["counts"] == {"changed": 1, "identical": 1}
    assert result["summary"] == [
        "`packed` differs (no bit layout for F4: only byte equality compared)"
    ]
    same = diff_checkpoints(open_checkpoint(str(a)), open_checkpoint(str(a)))
    assert same["identical"] is True


def test_a_copy_damaged_to_nan_leads_with_nan_not_drift() -> None:
    a = torch.linspace(-1, 1, 64).reshape(8, 8)
    b = a.clone()
    b[1, 2] = float("nan")
    b[3, 4] = float("nan")
    diff = diff_raw("w", a.dtype, a.shape, byte_chunks(a), byte_chunks(b)).to_json()
    assert diff["nonfinite_changes"] == 2
    assert diff["summary"].startswith("2 changed elements are NaN or Inf on one side in `w`")
    assert "drift" not in diff["summary"]
    b[5, 5] = 7.25  # a finite change in several bits stays drift, after the NaN
    diff = diff_raw("w", a.dtype, a.shape, byte_chunks(a), byte_chunks(b)).to_json()
    lead, rest = diff["summary"].split("; ", 1)
    assert "NaN" in lead and rest == "1 finite element differs in several bits (drift, not a flip)"


def test_diff_leads_with_nan_then_flips_then_drift_across_tensors(tmp_path: Path, capsys) -> None:
    from inspector.cli import main

    good = {name: torch.linspace(-1, 1, 64).reshape(8, 8) for name in ("a", "b", "c", "d")}
    bad = {name: t.clone() for name, t in good.items()}
    bad["a"][0, 0] = 0.123  # drift: several bits of one element
    flipped = bad["b"].view(torch.int32)
    flipped[1, 1] ^= 1 << 30  # one exponent bit
    bad["c"][2, 2] = float("nan")
    torch.save(good, tmp_path / "good.pt")
    torch.save(bad, tmp_path / "suspect.pt")
    assert main(["diff", str(tmp_path / "good.pt"), str(tmp_path / "suspect.pt")]) == 1
    out = capsys.readouterr().out.splitlines()
    head = next(n for n, line in enumerate(out) if line.startswith("CHANGED: "))
    sentences = [line.strip() for line in out[head + 1:]  # one per tensor, its details under it
                 if line.startswith("  ") and not line.startswith("    ")]
    keys = [re.search(r"`(\w)`", s).group(1) for s in sentences]
    assert keys == ["c", "b", "a"], out  # file order is a, b, c
    assert "NaN" in sentences[0] and "single-bit" in sentences[1] and "drift" in sentences[2]
