"""Integrity answers found wrong by a hunt with a failing disk's inputs: each test builds the
input, asks the tool, and checks its answer against a plain torch/numpy computation."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from inspector.checkpoint.health import Health, assess
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.sandbox.worker.diff import diff_checkpoints
from inspector.tensors.describe import describe_tensors
from inspector.tensors.sources import open_checkpoint


def _assess(rows) -> Health:
    """The health of the contract's tensor records (dicts, as the worker writes them)."""
    return assess(map(TensorStats.from_json, rows))


def _health(state: dict[str, torch.Tensor]):
    return _assess(describe_tensors(list(state.items()), lambda event: None, threads=1))


def _flip_top_exponent_bit(t: torch.Tensor, index: int) -> torch.Tensor:
    """t with the most significant exponent bit of element `index` (of its float view) set."""
    out = t.clone()
    floats = out.view(torch.float32) if out.is_complex() else out
    ints = floats.reshape(-1).view(torch.int32)
    ints[index] |= 1 << 30
    return out


# --- complex weights were never judged: NaN, Inf or a flipped exponent bit in a complex64
# weight gave health `ok` (exit 0) although the record itself counted the NaN/Inf.


def test_nonfinite_complex_weight_is_a_problem() -> None:
    w = torch.randn(8, 8, dtype=torch.complex64)
    w[2, 3] = complex(float("inf"), 0.0)
    w[4, 4] = complex(0.0, float("nan"))
    assert (~torch.isfinite(w)).sum() == 2  # what plain torch says
    health = _health({"layer.weight": w})
    assert health.status == "problem"
    assert [f.code for f in health.findings] == ["nonfinite-weights"]


def test_flipped_exponent_bit_in_complex_weight_is_a_problem() -> None:
    g = torch.Generator().manual_seed(3)
    clean = (torch.randn(64, 64, dtype=torch.complex64, generator=g) * 0.02)
    assert _health({"layer.weight": clean}).status == "ok"
    flipped = _flip_top_exponent_bit(clean, 101)  # the imaginary half of element 50
    assert flipped.abs().max() > 1e30 and torch.isfinite(flipped).all()
    health = _health({"layer.weight": flipped})
    assert health.status == "problem"
    assert "magnitude-outlier" in [f.code for f in health.findings]


# --- a zero-size tensor has no bytes, yet two of them in one safetensors file (same data
# offset, same stride) were taken for tied weights: B lacking `b` altogether was 'identical'.


def test_zero_size_tensors_are_not_tied_weights(tmp_path) -> None:
    save_file({"a": torch.zeros(0), "b": torch.zeros(0)}, tmp_path / "two.safetensors")
    save_file({"a": torch.zeros(0)}, tmp_path / "one.safetensors")
    result = diff_checkpoints(open_checkpoint(str(tmp_path / "two.safetensors")),
                              open_checkpoint(str(tmp_path / "one.safetensors")))
    assert not result["identical"]
    assert {r["key"]: r["status"] for r in result["tensors"]} == {"a": "identical",
                                                                   "b": "only_in_a"}
    assert result["aliases"] == []


# --- a flipped exponent bit where the relative rule has nothing to compare with: a 1-element
# weight, or a weight whose other values are all zero, at 6.8e36 (float32) was 'ok'.


def _one_flipped(dtype: torch.dtype, value: float = 0.02) -> torch.Tensor:
    bits = {torch.float32: (torch.int32, 30), torch.bfloat16: (torch.int16, 14),
            torch.float64: (torch.int64, 62)}[dtype]
    t = torch.tensor([value], dtype=dtype)
    ints = t.view(bits[0])
    ints |= 1 << bits[1]
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_flipped_exponent_bit_in_a_one_element_weight_is_a_problem(dtype) -> None:
    flipped = _one_flipped(dtype)
    assert flipped.abs().item() > 1e30  # 0.02 * 2**128 (2**1024 in float64)
    health = _health({"layer.scale": flipped.reshape(1, 1)})
    assert health.status == "problem"
    assert [f.code for f in health.findings] == ["magnitude-outlier"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_flipped_exponent_bit_among_zeros_is_a_problem(dtype) -> None:
    w = torch.zeros(64, 64, dtype=dtype)
    w[3, 5] = _one_flipped(dtype)[0]
    w[7, 1] = 0.01
    assert _health({"layer.weight": torch.zeros(64, 64, dtype=dtype)}).status == "warning"
    health = _health({"layer.weight": w})
    assert health.status == "problem"
    assert "magnitude-outlier" in [f.code for f in health.findings]


@pytest.mark.parametrize("value", [-1e4, 3.0e9, float(torch.finfo(torch.float32).min)])
def test_large_but_plausible_scalars_stay_ok(value) -> None:
    # attention-mask sentinels (finfo.min) and large constants are not flips
    assert _health({"attn.masked_bias": torch.tensor(value)}).status == "ok"


# --- a quantized or sparse tensor's part names (`KEY::scale`, `KEY::values`) beside a real
# key of that name: convert failed with an internal SafetensorError ("invalid offset"), and
# diff with "q::scale is stored in A and A"; a plain `KEY::extra` beside an encoded KEY was
# dropped by `decode_file`.


def _quantized() -> torch.Tensor:
    return torch.quantize_per_tensor(torch.linspace(-1, 1, 16).reshape(4, 4), 0.1, 3,
                                     torch.qint8)


def test_part_name_taken_by_a_real_key_is_a_key_collision(tmp_path, capsys) -> None:
    from inspector.cli import main

    source = tmp_path / "q.pt"
    torch.save({"q": _quantized(), "q::scale": torch.tensor(0.7, dtype=torch.float64)}, source)
    out = tmp_path / "q.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--json"]) == 10
    assert not out.exists()
    assert "q::scale" in capsys.readouterr().err


def test_part_name_collision_is_refused_in_expand() -> None:
    from inspector.core.errors import CodedError
    from inspector.tensors.encoded import expand

    sparse = torch.eye(3).to_sparse()
    with pytest.raises(CodedError) as refused:
        expand([("s", sparse), ("s::values", torch.ones(3))])
    assert refused.value.code == "key_collision"
    # no collision: every name distinct after encoding
    names = [k for k, _ in expand([("s", sparse), ("s::other", torch.ones(3))])[0]]
    assert len(names) == len(set(names)) == 3


def test_decode_file_keeps_a_plain_key_under_an_encoded_prefix() -> None:
    from inspector.tensors.encoded import decode_file, expand, metadata_entry

    q = _quantized()
    parts, specs = expand([("q", q), ("q::extra", torch.ones(2))])
    back = decode_file(dict(parts), metadata_entry(specs))
    assert sorted(back) == ["q", "q::extra"]
    assert torch.equal(back["q"].int_repr(), q.int_repr())
    assert torch.equal(back["q::extra"], torch.ones(2))


# --- quantized weights were never judged: a NaN or Inf scale (every dequantized value NaN
# or Inf, as plain torch shows) gave health `ok`.


@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_quantized_weight_with_nonfinite_scale_is_a_problem(scale) -> None:
    q = torch._make_per_tensor_quantized_tensor(
        torch.arange(-8, 8, dtype=torch.int8).reshape(4, 4), scale, 0)
    assert not torch.isfinite(q.dequantize()[q.int_repr() != 0]).any()
    health = _health({"layer.weight": q})
    assert health.status == "problem"
    assert [f.code for f in health.findings] == ["nonfinite-weights"]


def test_quantized_weight_with_a_nonfinite_channel_scale_is_a_problem() -> None:
    scales = torch.tensor([0.1, float("nan"), 0.1, 0.1], dtype=torch.float64)
    q = torch._make_per_channel_quantized_tensor(
        torch.arange(16, dtype=torch.uint8).reshape(4, 4), scales,
        torch.zeros(4, dtype=torch.int64), 0)
    assert torch.isnan(q.dequantize()[1]).all()
    assert _health({"layer.weight": q}).status == "problem"
    finite = torch._make_per_channel_quantized_tensor(
        q.int_repr(), torch.full((4,), 0.1, dtype=torch.float64),
        torch.zeros(4, dtype=torch.int64), 0)
    assert _health({"layer.weight": finite}).status == "ok"


def test_quantized_weight_with_a_nonfinite_late_channel_scale_is_a_problem() -> None:
    scales = torch.full((32,), 0.1, dtype=torch.float64)
    scales[20] = float("nan")
    q = torch._make_per_channel_quantized_tensor(
        torch.ones(32, 4, dtype=torch.uint8), scales, torch.zeros(32, dtype=torch.int64), 0)
    assert _health({"layer.weight": q}).status == "problem"


# --- sparse weights got no statistics (`nan` null), so NaN or a flipped exponent bit in their
# values was never judged: health `ok`. They are judged on their stored values now.


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_weight_with_nan_is_a_problem(layout) -> None:
    w = torch.eye(8)
    w[2, 3] = float("nan")
    sparse = w.to_sparse() if layout == "coo" else w.to_sparse_csr()
    assert torch.isnan(sparse.to_dense()).sum() == 1
    assert _health({"layer.weight": sparse}).status == "problem"


# --- a weight whose storage is shared with a training-state key listed before it was skipped
# as "already judged", so its NaN counted only as training-state `info`: health `ok`.


def test_nan_weight_tied_to_earlier_training_state_is_a_problem() -> None:
    w = torch.randn(8, 8)
    w[1, 2] = float("nan")
    health = _health({"optimizer.snapshot": w, "model.layer.weight": w})
    assert health.status == "problem"
    assert [(f.key, f.code) for f in health.findings if f.severity == "problem"] == [
        ("model.layer.weight", "nonfinite-weights")]
    # the weight first: judged once, as a weight
    assert _health({"model.layer.weight": w, "optimizer.snapshot": w}).status == "problem"


# --- more flipped values than the rule's tail (one in 1,000) moved the "bulk" up to them:
# two flipped top exponent bits in a 32x32 float32 weight (0.02 -> ~7e36) were `ok`. A few
# (`health.outlier_tail`) always count as outliers now.


def test_two_flipped_exponent_bits_in_a_small_weight_are_a_problem() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 32, generator=g) * 0.02
    w.view(-1).view(torch.int32)[[100, 700]] |= 1 << 30
    assert (w.abs() > 1e30).sum() == 2 and (w.abs() < 1).sum() == 1022
    assert _health({"layer.weight": w}).status == "problem"


# --- safetensors `__metadata__` is free text, yet every entry whose value named a tensor was
# read as a converter's alias: a file holding only `weight`, with metadata note="weight",
# was 'identical' to a checkpoint that also holds a separate tensor `note`. Only the aliases
# a converter lists under `ckpt-inspector.aliases` are read now.


def test_free_text_metadata_is_not_a_tensor(tmp_path) -> None:
    x = torch.arange(4.0)
    save_file({"weight": x}, tmp_path / "b.safetensors", metadata={"note": "weight"})
    torch.save({"weight": x, "note": x.clone()}, tmp_path / "a.pt")
    result = diff_checkpoints(open_checkpoint(str(tmp_path / "a.pt")),
                              open_checkpoint(str(tmp_path / "b.safetensors")))
    assert {r["key"]: r["status"] for r in result["tensors"]} == {"weight": "identical",
                                                                   "note": "only_in_a"}
    assert not result["identical"]


# --- a tensor named `__metadata__` (safetensors' reserved header key): convert failed with an
# internal SafetensorError ("invalid JSON in header", exit 5) instead of a clear refusal.


def test_tensor_named_metadata_is_refused_clearly(tmp_path, capsys) -> None:
    from inspector.cli import main

    source = tmp_path / "m.pt"
    torch.save({"__metadata__": torch.ones(3), "w": torch.zeros(2)}, source)
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--json"]) == 10
    assert not out.exists()
    capsys.readouterr()
    assert main(["convert", str(source), "-o", str(out)]) == 10
    assert "a tensor is named __metadata__" in capsys.readouterr().err


# --- a flip's before/after values were printed to 9 significant digits: in float64 and
# complex128 a low mantissa flip showed two equal numbers ("1.39454713e-235" twice).


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_flip_values_in_float64_differ_as_text(dtype) -> None:
    import numpy as np

    from inspector.checkpoint.bitflip import decode_value

    before = np.array([1.394547134567891e-235 + (0.1j if dtype == "complex128" else 0)],
                      dtype=dtype)
    after = before.copy()
    after.view(np.uint64)[0] ^= np.uint64(1 << 4)  # a low mantissa bit of the real part
    raw_b, raw_a = (int.from_bytes(x.tobytes(), "little") for x in (before, after))
    text_b, text_a = decode_value(raw_b, dtype), decode_value(raw_a, dtype)
    assert text_b != text_a
    parse = complex if dtype == "complex128" else float
    assert parse(text_b.strip("()")) == before[0] and parse(text_a.strip("()")) == after[0]


# --- diff compared an encoded (sparse or quantized) tensor by its parts alone; what only the
# rebuild spec holds (a sparse tensor's dense shape, a per-channel axis, CSR vs CSC) was never
# compared, so tensors torch calls different were 'identical'. The spec is a part now
# (`KEY::spec`), read from a converted file's metadata too.


def _diff_pt(tmp_path, a: dict, b: dict) -> dict:
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    return diff_checkpoints(open_checkpoint(str(tmp_path / "a.pt")),
                            open_checkpoint(str(tmp_path / "b.pt")))


def test_sparse_tensors_of_different_shape_differ(tmp_path) -> None:
    i, v = torch.tensor([[0, 1], [1, 2]]), torch.tensor([1.0, 2.0])
    a = torch.sparse_coo_tensor(i, v, (4, 4)).coalesce()
    b = torch.sparse_coo_tensor(i, v, (4, 8)).coalesce()
    assert a.shape != b.shape
    assert not _diff_pt(tmp_path, {"s": a}, {"s": b})["identical"]


def test_per_channel_quantized_tensors_on_different_axes_differ(tmp_path) -> None:
    r = torch.arange(16, dtype=torch.uint8).reshape(4, 4)
    scales = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    zeros = torch.zeros(4, dtype=torch.int64)
    a = torch._make_per_channel_quantized_tensor(r, scales, zeros, 0)
    b = torch._make_per_channel_quantized_tensor(r, scales, zeros, 1)
    assert not torch.equal(a.dequantize(), b.dequantize())
    assert not _diff_pt(tmp_path, {"q": a}, {"q": b})["identical"]


def test_csr_and_csc_with_the_same_parts_differ(tmp_path) -> None:
    m = torch.tensor([[1.0, 2.0], [0.0, 3.0]])
    a = m.to_sparse_csr()
    b = torch.sparse_csc_tensor(a.crow_indices(), a.col_indices(), a.values(), (2, 2))
    assert not torch.equal(a.to_dense(), b.to_dense())
    assert not _diff_pt(tmp_path, {"m": a}, {"m": b})["identical"]
