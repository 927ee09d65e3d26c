"""Bit layouts and single-bit flip classification on raw bytes, checked against torch's decoding."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from inspector.checkpoint.bitflip import LAYOUTS, FlipTally, compare_raw, layout_for
from inspector.core.dtypes import canonical_dtype

FLOATS = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


def _raw(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.uint8).numpy().copy()


@pytest.mark.parametrize("name", [n for n in LAYOUTS if hasattr(torch, n)])
def test_layout_width_matches_torch_itemsize(name: str) -> None:
    assert layout_for(name).itemsize == getattr(torch, name).itemsize
    assert len(layout_for(name).kinds) == 8 * layout_for(name).itemsize


@pytest.mark.parametrize("name", FLOATS)
def test_float_bit_kinds_match_what_the_bit_does(name: str) -> None:
    """Flip each bit of 1.0 and decode with torch: sign negates, mantissa stays in [1, 2)."""
    layout = layout_for(name)
    one = _raw(torch.ones(1, dtype=getattr(torch, name)))
    for bit in range(8 * layout.itemsize):
        flipped = one.copy()
        flipped[bit // 8] ^= 1 << (bit % 8)
        value = float(torch.from_numpy(flipped).view(getattr(torch, name)).double())
        kind = layout.describe(bit)[0]
        if kind == "sign":
            assert value == -1.0, (name, bit)
        elif kind == "mantissa":
            assert 1.0 < value < 2.0, (name, bit, value)
        else:
            assert kind == "exponent" and (value != value or value >= 2.0 or value < 1.0)


def test_integer_and_bool_layouts() -> None:
    assert layout_for("int16").describe(15) == ("sign", None)
    assert layout_for("int16").describe(14) == ("value", None)
    assert layout_for("uint16").describe(15) == ("value", None)
    assert layout_for("bool").describe(0) == ("value", None)
    assert layout_for("bool").describe(3) == ("padding", None)
    assert layout_for("complex64").describe(63) == ("sign", "imag")
    assert layout_for("complex64").describe(23) == ("exponent", "real")


def test_dtype_names_from_torch_and_safetensors() -> None:
    assert canonical_dtype(torch.bfloat16) == "bfloat16"
    assert canonical_dtype("BF16") == "bfloat16"
    assert canonical_dtype("F8_E4M3") == "float8_e4m3fn"
    with pytest.raises(ValueError, match="no bit layout"):
        layout_for("float128")


@pytest.mark.parametrize("name", sorted(n for n in LAYOUTS if hasattr(torch, n)))
def test_every_random_single_flip_is_found(name: str) -> None:
    layout = layout_for(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    base = rng.integers(0, 256, size=layout.itemsize * 257, dtype=np.uint8)
    for _ in range(40):
        index = int(rng.integers(0, 257))
        bit = int(rng.integers(0, 8 * layout.itemsize))
        flipped = base.copy()
        flipped[index * layout.itemsize + bit // 8] ^= 1 << (bit % 8)
        diff = compare_raw(base, flipped, layout)
        assert diff.changed.tolist() == [index]
        assert diff.bits.tolist() == [bit]


def test_multi_bit_changes_are_not_called_flips() -> None:
    a = _raw(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    b = _raw(torch.tensor([1.0, 2.5, 3.0, 3.3]))  # 2.0 -> 2.5 sets mantissa bit 21 alone
    diff = compare_raw(a, b, layout_for("float32"))
    assert diff.changed.tolist() == [1, 3]
    assert diff.bits.tolist() == [21, -1]
    tally = FlipTally(layout_for("float32"))
    tally.add(diff, start=0)
    assert tally.changed == 2 and tally.single_bit == 1 and tally.multi_bit == 1


def test_tally_offsets_summary_and_bounded_list() -> None:
    layout = layout_for("float32")
    a = np.zeros(4 * 100, dtype=np.uint8)
    b = a.copy()
    for index in (3, 50, 99):
        b[index * 4 + 3] ^= 0x40  # bit 30: exponent
    tally = FlipTally(layout, limit=2)
    for start in range(0, 100, 10):  # stream in chunks of 10 elements
        chunk = slice(start * 4, start * 4 + 40)
        tally.add(compare_raw(a[chunk], b[chunk], layout), start)
    assert tally.single_bit == 3 and len(tally.flips) == 2
    flips = [(f.index, f.bit, f.kind) for f in tally.flips]
    assert flips == [(3, 30, "exponent"), (50, 30, "exponent")]
    assert tally.summary("layer4.1.conv2.weight") == (
        "3 single-bit flips in `layer4.1.conv2.weight`, all in exponent bits"
    )


def test_summary_mixed_kinds_and_drift() -> None:
    layout = layout_for("bfloat16")
    a = np.zeros(2 * 10, dtype=np.uint8)
    b = a.copy()
    b[1] ^= 0x80  # element 0, bit 15: sign
    b[2] ^= 0x01  # element 1, bit 0: mantissa
    b[4] ^= 0x01  # element 2, bit 0: mantissa
    b[6:8] = 0xFF  # element 3: many bits
    tally = FlipTally(layout)
    tally.add(compare_raw(a, b, layout), 0)
    assert tally.summary("w") == (
        "3 single-bit flips in `w`: 2 in mantissa bits, 1 in a sign bit; "
        "1 element differs in several bits (drift, not a flip)"
    )
    assert FlipTally(layout).summary("w") == "`w` is bit-identical"


def test_rejects_chunks_of_partial_elements() -> None:
    with pytest.raises(ValueError, match="not equal whole float32 elements"):
        compare_raw(b"\0" * 6, b"\0" * 6, layout_for("float32"))
