"""Tensor statistics and digests against a NumPy reference, for every dtype and layout."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import torch

from inspector.core.flatten import flatten, unique_keys
from inspector.tensors import describe, stats
from inspector.tensors.describe import describe_tensors
from inspector.tensors.stats import HIST_BINS, tensor_digest, tensor_stats

FLOATS = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
          "float8_e4m3fnuz", "float8_e5m2fnuz"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: None}


def _random(dtype_name: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype_name)
    if dtype_name in FLOATS:
        scale = 1.0 if "float8" in dtype_name else 100.0
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    if dtype_name.startswith("complex"):
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype_name == "bool":
        return torch.rand(shape, generator=g) > 0.5
    info = torch.iinfo(dtype)
    if dtype_name == "uint64":
        hi = np.random.default_rng(seed).integers(0, 2**64 - 1, size=shape, dtype=np.uint64)
        return torch.from_numpy(hi)
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def _reference_values(t: torch.Tensor) -> np.ndarray:
    """The values statistics are defined on, as float64 (or exact ints), by NumPy."""
    if t.is_quantized:
        return t.int_repr().numpy().astype(np.int64)
    if t.dtype.is_complex:
        return np.abs(t.numpy())
    if t.dtype == torch.bool:
        return t.numpy().astype(np.int64)
    if t.dtype.is_floating_point:
        return t.to(torch.float64).numpy()
    return t.numpy()


def _reference_bytes(t: torch.Tensor) -> bytes:
    raw = t.int_repr() if t.is_quantized else t
    if raw.dtype.is_complex:
        return np.ascontiguousarray(raw.numpy()).tobytes()
    as_int = _SAME_SIZE_INT[raw.element_size()]
    return np.ascontiguousarray(raw.view(as_int).numpy()).tobytes()


def _check(t: torch.Tensor) -> None:
    fused = hashlib.sha256()
    got = tensor_stats(t, digest=fused)
    values = _reference_values(t).reshape(-1)
    assert tensor_digest(t) == hashlib.sha256(_reference_bytes(t)).hexdigest()
    assert fused.hexdigest() == tensor_digest(t)
    is_float = values.dtype.kind == "f"
    finite = values[np.isfinite(values)] if is_float else values
    assert got["nan"] == (int(np.isnan(values).sum()) if is_float else 0)
    assert got["inf"] == (int(np.isinf(values).sum()) if is_float else 0)
    assert got["zeros"] == int((values == 0).sum())
    if finite.size == 0:
        assert got["min"] is None and got["histogram"] is None
        return
    if t.dtype.is_complex:  # |z| may round differently in the last bit
        assert got["min"] == pytest.approx(finite.min(), rel=1e-6)
        assert got["max"] == pytest.approx(finite.max(), rel=1e-6)
    else:
        assert got["min"] == finite.min() and got["max"] == finite.max()
    if values.dtype.kind in "iu":
        assert isinstance(got["min"], int) and got["min"] == int(finite.min())
    f64 = finite.astype(np.float64)
    scale = max(float(np.abs(f64).max()), 1e-30)
    assert got["mean"] == pytest.approx(f64.mean(), rel=1e-5, abs=1e-6 * scale)
    assert got["std"] == pytest.approx(f64.std(), rel=1e-4, abs=1e-6 * scale)
    if finite.size > 1:
        assert got["std_sample"] == pytest.approx(f64.std(ddof=1), rel=1e-4, abs=1e-6 * scale)
    json.dumps(got, allow_nan=False)
    assert got["absmax"] == pytest.approx(float(np.abs(f64).max()))
    hist = got["histogram"]
    lo, hi = f64.min(), f64.max()
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    ref, _ = np.histogram(f64, bins=HIST_BINS, range=(lo, hi))
    assert hist["bins"] == HIST_BINS and len(hist["counts"]) == HIST_BINS
    assert sum(hist["counts"]) == finite.size
    # Values within rounding of a bin edge may land on either side; nothing moves further.
    moved = np.abs(np.array(hist["counts"]) - ref).sum()
    assert moved <= max(2, finite.size // 10_000), (hist["counts"], ref.tolist())


@pytest.fixture(params=[1 << 24, 256], ids=["one-chunk", "many-chunks"])
def chunking(request, monkeypatch):
    """Run each check with whole tensors and with tiny chunks (the bounded-memory path)."""
    monkeypatch.setattr(stats, "CHUNK_BYTES", request.param)
    monkeypatch.setattr(stats, "STATS_CHUNK_BYTES", request.param)
    return request.param


@pytest.mark.parametrize("name", FLOATS + INTS + ["bool", "complex64", "complex128"])
def test_every_dtype_matches_numpy(name, chunking):
    _check(_random(name, (37, 29)))


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float64"])
def test_nan_and_inf_are_counted_and_excluded(name, chunking):
    t = _random(name, (50, 20))
    flat = t.view(-1)
    flat[::7] = float("nan")
    flat[3::11] = float("inf")
    flat[5::13] = -float("inf")
    flat[1::17] = 0
    _check(t)


def test_all_nan_tensor_has_no_value_statistics(chunking):
    t = torch.full((10,), float("nan"))
    got = tensor_stats(t)
    assert got["nan"] == 10 and got["mean"] is None and got["histogram"] is None


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,)])
def test_empty_and_zero_dimensional(shape, chunking):
    _check(_random("float32", shape))
    _check(_random("int64", shape))


def test_constant_tensor_uses_a_unit_range(chunking):
    t = torch.full((100,), 2.5)
    _check(t)
    assert tensor_stats(t)["histogram"]["counts"][HIST_BINS // 2] == 100


@pytest.mark.parametrize("make", [
    lambda t: t.t(),
    lambda t: t[::2, 1::3],
    lambda t: t[5:9],
    lambda t: t.unsqueeze(0).expand(3, -1, -1),
    lambda t: t.permute(1, 0)[2:],
], ids=["transpose", "strided", "row-slice", "expand", "permute-slice"])
def test_non_contiguous_views(make, chunking):
    base = _random("float32", (40, 30))
    view = make(base)
    _check(view)
    assert tensor_digest(view) == hashlib.sha256(view.contiguous().numpy().tobytes()).hexdigest()


def test_quantized_stats_are_on_the_integer_representation(chunking):
    g = torch.Generator().manual_seed(3)
    q = torch.quantize_per_tensor(torch.randn(20, 10, generator=g), 0.05, 3, torch.quint8)
    _check(q)
    assert tensor_stats(q)["stats_on"] == "int_repr"
    scales = torch.rand(6, generator=g) + 0.1
    qc = torch.quantize_per_channel(torch.randn(6, 5, generator=g), scales,
                                    torch.zeros(6, dtype=torch.long), 0, torch.qint8)
    _check(qc)


def test_complex_stats_are_on_the_magnitude():
    t = torch.tensor([3 + 4j, 0j, -5j], dtype=torch.complex64)
    got = tensor_stats(t)
    assert got["stats_on"] == "magnitude"
    assert (got["min"], got["max"], got["zeros"]) == (0.0, 5.0, 1)


def test_describe_flags_shared_sparse_meta_nested_and_streams_each_tensor():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    items = [
        ("w", base), ("tied", base), ("row", base[1]),
        ("sparse", torch.eye(3).to_sparse()), ("meta", torch.empty(4, device="meta")),
        ("nested", torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])),
        ("q", torch.quantize_per_tensor(torch.ones(4), 0.5, 1, torch.qint8)),
    ]
    events = []
    records = describe_tensors(items, events.append)
    assert sorted(e["key"] for e in events) == sorted(k for k, _ in items)
    by_key = {r["key"]: r for r in records}
    assert sorted(by_key["w"]["shared_with"]) == ["row", "tied"]
    assert by_key["row"]["storage_offset"] == 4 and by_key["row"]["contiguous"]
    assert by_key["w"]["stride"] == [4, 1]
    assert "sparse" in by_key["sparse"]["flags"] and "digest" not in by_key["sparse"]
    assert "meta" in by_key["meta"]["flags"] and "digest" not in by_key["meta"]
    assert "nested" in by_key["nested"]["flags"]
    assert by_key["q"]["quantization"] == {"scheme": "per_tensor_affine", "scale": 0.5,
                                           "zero_point": 1}
    assert by_key["w"]["digest"] == hashlib.sha256(base.numpy().tobytes()).hexdigest()
    assert by_key["w"]["mean"] == pytest.approx(5.5)


def test_unsupported_dtype_gets_a_digest_and_a_note():
    t = torch.zeros(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    (rec,) = describe_tensors([("f4", t)], lambda e: None)
    assert rec["digest"] == hashlib.sha256(bytes(4)).hexdigest()
    assert "no statistics" in rec["note"]


def test_a_dtype_known_to_have_no_statistics_is_read_once_with_tensor_stats_words(monkeypatch):
    blocks = torch.arange(36, dtype=torch.uint8).view(torch.bits8).reshape(2, 18)
    with pytest.raises(TypeError) as refused:
        tensor_stats(blocks)
    monkeypatch.setattr(describe, "tensor_stats", lambda *a: pytest.fail("read for stats"))
    (rec,) = describe_tensors([("q4", blocks)], lambda e: None)
    assert rec["note"] == f"no statistics: {refused.value}"
    assert rec["digest"] == hashlib.sha256(bytes(range(36))).hexdigest()


def test_flatten_gives_dotted_keys_for_nested_containers():
    import argparse
    from collections import OrderedDict

    obj = {"model": OrderedDict(w=1), "opt": {"state": {0: {"m": 2}}, "groups": [{"lr": 0.1}]},
           "hp": argparse.Namespace(lr=3), "pair": (4, 5), "size": torch.Size([2]), "e": {}}
    keys = dict(flatten(obj))
    assert keys == {"model.w": 1, "opt.state.0.m": 2, "opt.groups.0.lr": 0.1, "hp.lr": 3,
                    "pair.0": 4, "pair.1": 5, "size": torch.Size([2]), "e": {}}
    assert [k for k, _ in unique_keys(flatten({"a.b": 1, "a": {"b": 2}}))] == ["a.b", "a.b#2"]


def test_self_referencing_container_terminates():
    loop: list = [1]
    loop.append(loop)
    assert [k for k, _ in flatten(loop)] == ["0", "1"]


def test_population_and_sample_std_definitions():
    t = torch.tensor([1.0, 3.0])
    got = tensor_stats(t)
    assert got["std"] == 1.0 and got["mean"] == 2.0 and not math.isnan(got["std"])
    assert got["std_sample"] == pytest.approx(float(t.std()))
    single = tensor_stats(torch.tensor([5.0]))
    assert single["std"] == 0.0 and single["std_sample"] is None


@pytest.mark.parametrize("name, huge", [
    ("float32", 1e37), ("float32", 3.4e38), ("bfloat16", 3.3e38), ("float16", 65504.0),
    ("float64", 1.7e308),
])
def test_huge_values_never_overflow_the_statistics(name, huge, chunking):
    """A flipped top exponent bit gives values near the dtype's maximum: exact, finite stats."""
    dtype = getattr(torch, name)
    t = (torch.randn(300, 7, generator=torch.Generator().manual_seed(2)) * 0.02).to(dtype)
    flat = t.view(-1)
    flat[11], flat[1000], flat[2000] = huge, -huge, huge
    got = tensor_stats(t)
    json.dumps(got, allow_nan=False)
    ref = t.to(torch.float64).numpy().reshape(-1)
    assert got["max"] == ref.max() and got["min"] == ref.min() and got["absmax"] == ref.max()
    assert got["inf"] == 0 and got["nan"] == 0
    # float64 reference by scaling (NumPy's own std overflows at 1.7e308)
    s = float(np.abs(ref).max())
    # chunks in range are summed pairwise in float32, scaled ones in float64
    assert got["mean"] == pytest.approx((ref / s).mean() * s, rel=1e-6, abs=1e-9 * s)
    assert got["std"] == pytest.approx((ref / s).std() * s, rel=1e-6)
    assert got["std_sample"] == pytest.approx((ref / s).std(ddof=1) * s, rel=1e-6)
    assert sum(got["histogram"]["counts"]) == ref.size
    counts = got["histogram"]["counts"]
    assert counts[0] == 1 and counts[-1] == 2 and sum(counts[1:-1]) == ref.size - 3


@pytest.mark.parametrize("name", ["float32", "float64", "bfloat16"])
def test_exponent_counts_match_frexp(name, chunking):
    t = (torch.randn(40, 30, generator=torch.Generator().manual_seed(4)) * 3).to(
        getattr(torch, name))
    t.view(-1)[::9] = 0
    t.view(-1)[5] = 1e30  # one value far above the rest: the histogram cannot rule it out
    got = dict(tensor_stats(t)["exponents"])
    values = t.to(torch.float64).numpy().reshape(-1)
    values = values[values != 0]
    ref: dict[int, int] = {}
    for e in (np.frexp(values)[1] - 1).tolist():
        ref[e] = ref.get(e, 0) + 1
    assert got == ref


def test_parameters_that_require_grad_are_described(chunking):
    # torch.load restores nn.Parameter with requires_grad=True; autograd must not get in the way.
    param = torch.nn.Parameter(_random("float32", (30, 20)))
    _check(param.detach())
    assert tensor_stats(param) == tensor_stats(param.detach())
    assert tensor_digest(param) == tensor_digest(param.detach())


def test_exponent_pass_is_skipped_only_when_the_histogram_rules_outliers_out(chunking):
    g = torch.Generator().manual_seed(6)
    clean = torch.randn(64, 64, generator=g) * 0.02
    assert "exponents" not in tensor_stats(clean)
    assert "exponents" not in tensor_stats(torch.zeros(64, 64))
    assert "exponents" not in tensor_stats(torch.ones(64))  # LayerNorm-style constants
    for scale in (1e6, 1e3):  # an outlier, and a value the linear histogram cannot place
        flipped = clean.clone()
        flipped[7, 7] = scale
        assert "exponents" in tensor_stats(flipped)
    many = clean.clone()
    many.view(-1)[:10] = 1e30  # ten values are more than the rule's tail of eight
    assert "exponents" not in tensor_stats(many)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_describe_gives_each_tensor_its_digest_on_any_pool(threads, chunking, monkeypatch):
    names = FLOATS + INTS + ["bool", "complex64"]
    items = [(name, _random(name, (37, 29), seed=i)) for i, name in enumerate(names)]
    items.append(("view", _random("float32", (40, 30)).t()[3:]))
    items.append(("q", torch.quantize_per_tensor(torch.randn(50, 7), 0.1, 2, torch.qint8)))
    # more than a thread's share of the bytes: hashed on a hashing thread beside its stats
    items.insert(3, ("big", _random("float32", (400, 300)).t()))
    piped = []
    monkeypatch.setattr(describe, "_PipedDigest",
                        lambda pool, cls=describe._PipedDigest: piped.append(1) or cls(pool))
    records = describe_tensors(items, lambda e: None, threads=threads)
    assert [r["digest"] for r in records] == [tensor_digest(t) for _, t in items]
    assert len(piped) == (threads > 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_tied_tensor_is_read_once_and_gets_the_same_record(threads, monkeypatch):
    base = _random("float32", (64, 48))
    other_view = base[:, :40]  # same storage and offset, other shape: its own statistics
    items = [("embed", base), ("head", base), ("slice", other_view),
             ("copy", base.clone()), ("bits", base.view(torch.int32)), ("again", base)]
    read = []
    described, together = describe._stats_and_digest, describe.describe_small
    monkeypatch.setattr(describe, "_stats_and_digest",
                        lambda t, *args: read.append(t) or described(t, *args))
    monkeypatch.setattr(describe, "describe_small",  # small tensors are described together
                        lambda ts: read.extend(ts) or together(ts))
    events = []
    records = describe_tensors(items, events.append, threads=threads)
    assert len(read) == 4  # embed (for head and again too), slice, copy, bits
    assert sorted(e["key"] for e in events) == sorted(k for k, _ in items)
    for rec, (_, t) in zip(records, items, strict=True):
        alone = tensor_stats(t)
        assert rec["digest"] == tensor_digest(t)
        # small tensors are described together: mean and std from float64 sums there
        moments = ("mean", "std", "std_sample")
        assert {k: rec[k] for k in alone if k not in moments} == {
            k: v for k, v in alone.items() if k not in moments}
        assert [rec[k] for k in moments] == pytest.approx([alone[k] for k in moments], rel=1e-5)
    by_key = {r["key"]: r for r in records}
    assert by_key["head"]["histogram"] is not by_key["embed"]["histogram"]
