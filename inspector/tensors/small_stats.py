"""Statistics and digests of many small tensors at once, for `describe_tensors`.

A checkpoint of thousands of tiny tensors (biases, norms, a GGUF or safetensors file of 12,000
four-element tensors) spent most of its `inspect` time in the fixed cost of `stats.tensor_stats`
per tensor: a dozen torch calls, each worth more than the values. Here the tensors of one dtype
are joined into one array and every statistic is taken per segment in a few NumPy passes
(`reduceat`, one `bincount` for all the histograms), giving the record `tensor_stats` gives:

- min, max, absmax, zeros and the histogram exactly as there (the same float32 values and
  the same IEEE subtraction and division per bin, in the value's own type);
- mean, std and std_sample from float64 sums of the float32 values (two passes: the mean,
  then the squared deviations): their error is float64 rounding of the largest value's
  magnitude, where the float32 chunks there have float32 rounding.

A tensor this path cannot give exactly what `tensor_stats` would is left to it (None in the
answer): one holding NaN or Inf (`first_nonfinite`), one whose histogram range overflows
float32, one that needs the exponent counts (`outliers_ruled_out` fails), and every dtype
outside `BATCHED` (float64, wide integers, complex, quantized).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import torch

from inspector.checkpoint.health import MIN_JUDGED, outlier_gap
from inspector.core.strict_json import strict_float
from inspector.tensors.records import dtype_name
from inspector.tensors.stats import HIST_BINS, outliers_ruled_out

SMALL_ELEMENTS = 4096
"""Tensors up to this many elements are described together."""
BATCH_ELEMENTS = 1 << 20
"""Elements joined into one array at most (bounds the scratch arrays to a few MiB)."""
BATCHED = frozenset({torch.bool, torch.int8, torch.uint8, torch.int16, torch.uint16,
                     torch.float16, torch.bfloat16, torch.float32} | {
    getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n)})
"""Dtypes whose every value float32 holds exactly (the value domain of `tensor_stats`)."""
_F32_MAX = float(np.finfo(np.float32).max)


def batchable(t: torch.Tensor) -> bool:
    """Whether `t` may be described here: a small, non-empty, contiguous CPU tensor of a
    `BATCHED` dtype."""
    return (t.dtype in BATCHED and 0 < t.numel() <= SMALL_ELEMENTS and t.device.type == "cpu"
            and not t.is_quantized and t.is_contiguous() and not t.is_neg())


def describe_small(tensors: list[torch.Tensor]) -> list[dict | None]:
    """Each tensor's statistics and digest (the record `describe._stats_and_digest` makes), or
    None where `tensor_stats` must describe it itself; every tensor must be `batchable`."""
    out: list[dict | None] = [None] * len(tensors)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    for members in by_dtype.values():
        batch: list[int] = []
        size = 0
        for i in members:
            batch.append(i)
            size += tensors[i].numel()
            if size >= BATCH_ELEMENTS:
                _describe_batch(tensors, batch, out)
                batch, size = [], 0
        if batch:
            _describe_batch(tensors, batch, out)
    return out


def _describe_batch(tensors: list[torch.Tensor], batch: list[int],
                    out: list[dict | None]) -> None:
    parts = [tensors[i].detach().reshape(-1) for i in batch]
    joined = torch.cat(parts)
    counts = np.array([p.numel() for p in parts], dtype=np.int64)
    starts = np.zeros(len(parts), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    raw = joined.view(torch.uint8).numpy()
    item = joined.element_size()
    with np.errstate(invalid="ignore", over="ignore"):  # segments left out may hold NaN
        seg = _Segments.of(joined.to(torch.float32).numpy(), counts, starts)
    integral = not joined.dtype.is_floating_point
    gap = outlier_gap(dtype_name(joined.dtype))
    for j, i in enumerate(batch):
        if not seg.ok[j]:
            continue
        rec = seg.record(j, integral)
        nonzero = int(counts[j]) - rec["zeros"]
        if gap is not None and nonzero >= MIN_JUDGED and not outliers_ruled_out(
                rec["histogram"], rec["absmax"], nonzero, gap):
            continue  # the exponent counts are `tensor_stats`' to make
        begin = int(starts[j]) * item
        rec["digest"] = hashlib.sha256(raw[begin:begin + int(counts[j]) * item]).hexdigest()
        out[i] = rec


@dataclass(frozen=True)
class _Segments:
    """Per-segment statistics of a joined array of float32 values, one entry per tensor."""

    counts: np.ndarray
    ok: np.ndarray
    """All finite, with a histogram range float32 holds: the record is made here."""
    lo: np.ndarray
    hi: np.ndarray
    zeros: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    first: np.ndarray
    last: np.ndarray
    histograms: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray, counts: np.ndarray, starts: np.ndarray) -> _Segments:
        """Every segment's statistics, in a few passes over `values`."""
        segment = np.repeat(np.arange(len(counts)), counts)
        lo = np.minimum.reduceat(values, starts).astype(np.float64)
        hi = np.maximum.reduceat(values, starts).astype(np.float64)
        wide = values.astype(np.float64)
        mean = np.add.reduceat(wide, starts) / counts
        deviation = wide - mean[segment]
        first = np.where(lo == hi, lo - 0.5, lo)  # `stats.histogram_edges`
        last = np.where(lo == hi, hi + 0.5, hi)
        ok = np.logical_and.reduceat(np.isfinite(values), starts) & (last - first <= _F32_MAX)
        return cls(counts, ok, lo, hi, np.add.reduceat(values == 0, starts, dtype=np.int64),
                   mean, np.add.reduceat(deviation * deviation, starts), first, last,
                   _histograms(values, segment, ok, first, last))

    def record(self, j: int, integral: bool) -> dict:
        """Segment j's record, as `stats.tensor_stats` words it."""
        n, low, high, m2 = int(self.counts[j]), float(self.lo[j]), float(self.hi[j]), float(
            max(self.m2[j], 0.0))
        return {"stats_on": "values", "nan": 0, "inf": 0, "first_nonfinite": None,
                "zeros": int(self.zeros[j]),
                "min": int(low) if integral else low, "max": int(high) if integral else high,
                "mean": strict_float(float(self.mean[j])),
                "std": strict_float(math.sqrt(m2 / n)),
                "std_sample": strict_float(math.sqrt(m2 / (n - 1))) if n > 1 else None,
                "absmax": max(abs(low), abs(high)),
                "histogram": {"bins": HIST_BINS, "lo": float(self.first[j]),
                              "hi": float(self.last[j]),
                              "counts": self.histograms[j, :HIST_BINS].tolist()}}


def _histograms(values: np.ndarray, segment: np.ndarray, ok: np.ndarray, first: np.ndarray,
                last: np.ndarray) -> np.ndarray:
    """Each segment's HIST_BINS counts (and the top edge's, added to the last bin), the bins
    found as `stats._histogram` finds them: (value - first) / width, in float32."""
    base = np.where(ok, first, 0).astype(np.float32)
    width = np.where(ok, (last - first) / HIST_BINS, 1).astype(np.float32)
    scaled = (values - base[segment]) / width[segment]
    bins = np.where(ok[segment], scaled, 0).astype(np.uint8)
    kept = bins <= HIST_BINS  # `stats._histogram` keeps bins 0..HIST_BINS
    found = np.bincount((segment * (HIST_BINS + 1) + bins)[kept],
                        minlength=len(ok) * (HIST_BINS + 1)).reshape(len(ok), -1)
    found[:, HIST_BINS - 1] += found[:, HIST_BINS]
    return found
