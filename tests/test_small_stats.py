"""Small tensors described together (`tensors.small_stats`) get the record `tensor_stats` gives
each alone: every field equal, mean and std within float32 rounding of the largest value; and
the tensors it must leave to `tensor_stats` (NaN, Inf, a range past float32, outliers to count)
are left to it."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from inspector.tensors.describe import describe_tensors
from inspector.tensors.small_stats import BATCHED, batchable, describe_small
from inspector.tensors.stats import tensor_stats

APPROX = ("mean", "std", "std_sample")


def _alone(t: torch.Tensor) -> dict:
    digest = hashlib.sha256()
    return {**tensor_stats(t, None, digest), "digest": digest.hexdigest()}


def _same(together: dict, alone: dict) -> None:
    assert together.keys() == alone.keys()
    assert {k: v for k, v in together.items() if k not in APPROX} == {
        k: v for k, v in alone.items() if k not in APPROX}
    for key in APPROX:
        if alone[key] is None:
            assert together[key] is None
        else:
            # both sum in order of the values' magnitude: float32 chunks there, float64 here
            bound = 1e-6 * alone["absmax"]
            assert together[key] == pytest.approx(alone[key], rel=1e-5, abs=bound), key


def _mixed() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    out = [torch.randn(n, generator=g) * scale for n, scale in
           [(1, 1.0), (2, 3.0), (4, 0.02), (17, 1e-3), (300, 1.0), (4096, 5.0)]]
    out += [torch.full((4,), 0.1), torch.zeros(8), torch.tensor([-0.0, 0.0, 2.5]),
            torch.tensor([1e-40, -1e-42, 3.0]),  # float32 subnormals
            torch.arange(24, dtype=torch.float32).reshape(2, 3, 4),
            torch.tensor([1e30, -1e30, 5.0])]
    out += [(torch.randn(64, generator=g) * 4).to(dtype) for dtype in
            (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)]
    out += [torch.randint(-128, 127, (50,), generator=g, dtype=torch.int8),
            torch.randint(0, 255, (33,), generator=g, dtype=torch.uint8),
            torch.randint(-30000, 30000, (40,), generator=g, dtype=torch.int16),
            torch.randint(0, 60000, (40,), generator=g, dtype=torch.int32).to(torch.uint16),
            torch.tensor([True, False, True]), torch.tensor([7], dtype=torch.int8)]
    return out


def test_tensors_described_together_get_the_record_each_gets_alone():
    tensors = _mixed()
    assert all(batchable(t) for t in tensors)
    assert {t.dtype for t in tensors} <= BATCHED
    together = describe_small(tensors)
    assert all(r is not None for r in together)
    for t, record in zip(tensors, together, strict=True):
        _same(record, _alone(t))


def test_what_only_tensor_stats_can_say_is_left_to_it():
    g = torch.Generator().manual_seed(3)
    outlier = torch.randn(200, generator=g)
    outlier[17] = 1e12  # 2**40 above the bulk: the exponent counts decide
    nan = torch.tensor([1.0, math.nan, 2.0])
    inf = torch.tensor([math.inf, 1.0])
    past_f32 = torch.tensor([3e38, -3e38])
    plain = torch.randn(10, generator=g)
    together = describe_small([outlier, nan, plain, inf, past_f32])
    assert together[:2] == [None, None] and together[3:] == [None, None]
    assert "exponents" in _alone(outlier)
    assert _alone(nan)["first_nonfinite"] == 1
    _same(together[2], _alone(plain))


def test_what_is_not_small_or_plain_is_not_batched():
    assert not batchable(torch.zeros(0))
    assert not batchable(torch.zeros(5000))
    assert not batchable(torch.zeros(4, dtype=torch.float64))
    assert not batchable(torch.zeros(4, dtype=torch.int64))
    assert not batchable(torch.zeros(4, 4).t())
    assert not batchable(torch.zeros(4, dtype=torch.complex64))


def test_describe_tensors_gives_small_tensors_their_own_records():
    tensors = [*_mixed(), torch.randn(100_000), torch.tensor([math.nan, 1.0])]
    items = [(f"t{i}", t) for i, t in enumerate(tensors)]
    for threads in (1, 2):
        records = describe_tensors(items, lambda event: None, threads=threads)
        for (_key, t), record in zip(items, records, strict=True):
            _same({k: record[k] for k in _alone(t)}, _alone(t))
