"""Statistics and digests of many small tensors joined into one array, torch-free.

The per-segment passes `small_stats` runs over the joined values of tensors of one dtype, kept
free of torch so the worker's `inspect` of a safetensors or GGUF file of small tensors
(`tensors.plain`) needs no torch at all; also the histogram's bin count and the outlier rule
`stats.tensor_stats` shares with them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inspector.checkpoint.health import MIN_JUDGED, outlier_gap, outlier_tail
from inspector.core.strict_json import strict_float

HIST_BINS = 64
_F32_MAX = float(np.finfo(np.float32).max)


def refused_dtype(name: str) -> str:
    """The note of a dtype that gets no statistics (`bits8`, the raw blocks of GGUF types)."""
    return f"no statistics for dtype {name}"


def describe_joined(raw: np.ndarray, values: np.ndarray, counts: Sequence[int], dtype: str,
                    integral: bool) -> list[dict | None]:
    """Each segment's statistics and digest, or None where `stats.tensor_stats` must describe
    it: `raw` is the segments' bytes end to end, `values` the same elements as float32,
    `counts` the elements per segment, `dtype` their dtype's name."""
    sizes = np.asarray(counts, dtype=np.int64)
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    item = raw.size // max(1, values.size)
    with np.errstate(invalid="ignore", over="ignore"):  # segments left out may hold NaN
        seg = _Segments.of(values, sizes, starts)
    gap = outlier_gap(dtype)
    out = seg.records(integral)
    for j, (rec, n, start) in enumerate(zip(out, sizes.tolist(), starts.tolist(), strict=True)):
        if rec is None:
            continue
        nonzero = n - rec["zeros"]
        if gap is not None and nonzero >= MIN_JUDGED and not outliers_ruled_out(
                rec["histogram"], rec["absmax"], nonzero, gap):
            out[j] = None  # the exponent counts are `tensor_stats`' to make
            continue
        rec["digest"] = hashlib.sha256(raw[start * item:(start + n) * item]).hexdigest()
    return out


def outliers_ruled_out(histogram: dict, absmax: float, nonzero: int, gap: int) -> bool:
    """True when more than the outlier rule's tail of values (`health.outlier_tail`) lie within
    2**(gap-1) of absmax.

    Then the bulk top of `checkpoint.health.magnitude_outliers` is at least absmax / 2**(gap - 1),
    so no value can be 2**gap above it and the exponent pass is skipped. A bin counts only if
    its edge nearest zero is at least twice that bound (a margin for values rounded into a
    neighbouring bin).
    """
    tail = outlier_tail(nonzero)
    first, width = histogram["lo"], (histogram["hi"] - histogram["lo"]) / histogram["bins"]
    floor = 2 * absmax / 2.0 ** (gap - 1)
    above = 0
    for k, count in enumerate(histogram["counts"]):
        a, b = first + k * width, first + (k + 1) * width
        if (a >= floor) or (b <= -floor):
            above += count
    return above > tail


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

    def records(self, integral: bool) -> list[dict | None]:
        """Each segment's record, as `stats.tensor_stats` words it; None where not `ok`
        (the columns are made Python numbers once, not per segment)."""
        out: list[dict | None] = []
        for ok, n, low, high, zeros, mean, m2, first, last, counts in zip(
                self.ok.tolist(), self.counts.tolist(), self.lo.tolist(), self.hi.tolist(),
                self.zeros.tolist(), self.mean.tolist(), self.m2.tolist(),
                self.first.tolist(), self.last.tolist(),
                self.histograms[:, :HIST_BINS].tolist(), strict=True):
            if not ok:
                out.append(None)
                continue
            m2 = max(m2, 0.0)
            out.append({
                "stats_on": "values", "nan": 0, "inf": 0, "first_nonfinite": None,
                "zeros": zeros,
                "min": int(low) if integral else low, "max": int(high) if integral else high,
                "mean": strict_float(mean), "std": strict_float(math.sqrt(m2 / n)),
                "std_sample": strict_float(math.sqrt(m2 / (n - 1))) if n > 1 else None,
                "absmax": max(abs(low), abs(high)),
                "histogram": {"bins": HIST_BINS, "lo": first, "hi": last, "counts": counts}})
        return out


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
