"""Bit-flip evidence a person can check: bits and values before and after, and the byte's
offset in each file (what `cmp -l` would print, less one)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from inspector.checkpoint.bitflip import FlipTally, compare_raw, decode_value, layout_for
from inspector.sandbox.worker.diff import diff_checkpoints
from inspector.tensors.sources import open_checkpoint


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8",
                                   "int32", "uint8", "complex64", "float8_e4m3fn"])
def test_every_flip_carries_its_bits_and_values(dtype):
    rng = random.Random(dtype)
    t = (torch.randn(64, dtype=torch.float32) * 3).to(getattr(torch, dtype))
    raw = bytearray(t.view(torch.uint8).numpy().tobytes())
    layout = layout_for(dtype)
    flipped = bytearray(raw)
    index, bit = rng.randrange(64), rng.randrange(8 * layout.itemsize)
    at = index * layout.itemsize + bit // 8
    flipped[at] ^= 1 << (bit % 8)
    tally = FlipTally(layout)
    tally.add(compare_raw(bytes(raw), bytes(flipped), layout), 0)
    (flip,) = tally.flips
    record = flip.to_json((64,))
    size = layout.itemsize
    before = int.from_bytes(raw[index * size:(index + 1) * size], "little")
    assert (record["index"], record["bit"], record["position"]) == (index, bit, [index])
    assert int(record["before_bits"], 16) == before
    assert int(record["after_bits"], 16) == before ^ (1 << bit)
    assert len(record["before_bits"]) == 2 * size
    element = t.view(-1)[index]
    if dtype.startswith("float8"):
        assert record["before_value"] is None  # no NumPy type: the bits alone are shown
    elif dtype == "complex64":
        assert complex(record["before_value"].strip("()")) == pytest.approx(complex(element))
    elif dtype.startswith(("int", "uint")):
        assert record["before_value"] == str(int(element))
    else:
        assert float(record["before_value"]) == pytest.approx(float(element), rel=1e-6)


def test_non_finite_values_are_text():
    assert decode_value(0x7F800000, "float32") == "inf"
    assert decode_value(0xFF800000, "float32") == "-inf"
    assert decode_value(0x7FC00000, "float32") == "nan"
    assert decode_value(0x7F80, "bfloat16") == "inf"
    assert decode_value(0x3F80, "bfloat16") == "1"
    assert decode_value(1, "quint8") is None


def _flip(path, offset: int, mask: int, out):
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    out.write_bytes(bytes(data))


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_flip_offsets_point_at_the_changed_byte_in_both_files(tmp_path, fmt):
    state = {"a.weight": torch.randn(8, 8), "b.bias": torch.randn(8)}
    original = tmp_path / f"x.{fmt}"
    if fmt == "safetensors":
        save_file(state, original)
    else:
        torch.save(state, original)
    sources = open_checkpoint(str(original)).tensors
    data_offset = {s.key: s.offset for s in sources}["a.weight"]
    assert data_offset is not None
    target = data_offset + 4 * 13 + 3  # element 13's top byte: sign and exponent bits
    flipped = tmp_path / f"y.{fmt}"
    _flip(original, target, 0x40, flipped)
    changed_bytes = np.flatnonzero(np.frombuffer(original.read_bytes(), np.uint8)
                                   != np.frombuffer(flipped.read_bytes(), np.uint8))
    assert changed_bytes.tolist() == [target]
    result = diff_checkpoints(open_checkpoint(str(original)), open_checkpoint(str(flipped)))
    (tensor,) = [t for t in result["tensors"] if t["status"] != "identical"]
    (flip,) = tensor["bitflips"]
    assert (flip["index"], flip["bit"], flip["kind"]) == (13, 30, "exponent")
    assert flip["file_offset_a"] == flip["file_offset_b"] == target
    assert float(flip["before_value"]) == pytest.approx(float(state["a.weight"].view(-1)[13]))
