"""Tensor statistics and content digests, computed in bounded chunks.

Runs where torch does: inside the sandbox worker (`describe` runs it over every tensor on a pool
of threads), and for the ledger's digests inside the training process. Every statistic is over
the finite values; NaN and Inf are counted separately. Complex tensors are summarised on their
magnitude, quantized tensors on their integer representation (scale and zero point are
reported), bool tensors as 0/1. The digest is SHA-256 of the tensor's bytes laid out
contiguously in row-major order, as stored (quantized: the integer representation), so it
matches a safetensors file holding the same tensor.

Overflow: moments are combined in float64 (Chan's parallel combination of per-chunk mean and
sum of squared deviations; within a chunk of up to 4 MiB, float32 pairwise sums, relative
error about 1e-7); a chunk whose squares could overflow float32 is summed in float64 after
scaling by a power of two, so a flipped exponent bit (a value near 3e38, or 1.7e308 in
float64) still gives finite, accurate results. min, max and absmax are the stored values
exactly. `std` is the population standard deviation (ddof=0) and `std_sample` the sample
one (ddof=1, what `torch.std()` returns).
`exponents` counts the finite non-zero values by binary exponent, floor(log2|x|), as
[[exponent, count], ...]; `checkpoint.health` judges magnitude outliers from it. It costs a
pass, so it is only written when the histogram cannot rule outliers out (see
`outliers_ruled_out`); a record without it has none. Non-finite numbers never appear in a
record: see `core.strict_json`.
"""

from __future__ import annotations

import hashlib
import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from inspector.checkpoint.health import MIN_JUDGED, outlier_gap
from inspector.core.progress import CancelToken, check
from inspector.core.strict_json import strict_float
from inspector.tensors.plain.segments import HIST_BINS, outliers_ruled_out, refused_dtype
from inspector.tensors.records import dtype_name

CHUNK_BYTES = 16 * 1024 * 1024
"""Bound on the bytes one thread touches at a time; also the granularity of page release."""
STATS_CHUNK_BYTES = 4 * 1024 * 1024
"""Statistics make several passes over each chunk: chunk and scratch buffers of this size
stay in the L3 cache beside the hashing threads (a third less CPU than 16 MiB)."""

Release = Callable[[int, int], None]
"""release(address, nbytes): the caller is done with those bytes of a mapped checkpoint."""


class Digest(Protocol):
    """What a tensor's bytes are hashed into: a SHA-256, here or on a hashing thread."""

    def update(self, data: memoryview, /) -> None:
        """Hash `data` after what came before."""

    def hexdigest(self) -> str:
        """The digest of everything hashed."""


_SMALL_EXACT = {torch.bool, torch.int8, torch.uint8, torch.int16, torch.uint16}
_WIDE_INT = {torch.int32, torch.uint32, torch.int64}
_FLOAT_TO_F32 = {torch.float16, torch.bfloat16, torch.float32} | {
    getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n)
}


def logical_chunks(t: torch.Tensor, max_elems: int) -> Iterator[torch.Tensor]:
    """Row-major pieces of t (flattened), each at most max_elems elements; views where possible."""
    if t.numel() == 0:
        return
    # Parameters load with requires_grad; autograd refuses out= buffers and .numpy() on them.
    t = t.detach()
    if t.is_contiguous() and not t.is_quantized:
        flat = t.reshape(-1)
        for start in range(0, flat.numel(), max_elems):
            yield flat[start : start + max_elems]
        return
    if t.numel() <= max_elems or t.dim() == 0:
        yield t.contiguous().reshape(-1)
        return
    rows = max(1, max_elems // max(1, t[0].numel()))
    for start in range(0, t.shape[0], rows):
        part = t[start : start + rows]
        if rows == 1:
            part = part[0]
        yield from logical_chunks(part, max_elems)


def _chunk_bytes(chunk: torch.Tensor) -> memoryview:
    """The stored bytes of one contiguous chunk (quantized: its integer representation)."""
    raw = chunk.int_repr() if chunk.is_quantized else chunk
    return memoryview(raw.view(torch.uint8).numpy()).cast("B")


def byte_chunks(t: torch.Tensor, release: Release | None = None) -> Iterator[memoryview]:
    """The tensor's bytes, contiguous and row-major, in bounded pieces."""
    per = max(1, CHUNK_BYTES // max(1, t.element_size()))
    storage_ptr = t.untyped_storage().data_ptr()
    for chunk in logical_chunks(t, per):
        # a training process digests its tensors where they live (`inspector.ledger`): a chunk
        # on an accelerator is copied to the CPU, one chunk at a time
        yield _chunk_bytes(chunk if chunk.device.type == "cpu" else chunk.cpu())
        if release is not None and chunk.untyped_storage().data_ptr() == storage_ptr:
            release(chunk.data_ptr(), chunk.numel() * chunk.element_size())


def tensor_digest(t: torch.Tensor, release: Release | None = None,
                  cancel: CancelToken | None = None) -> str:
    """SHA-256 of the tensor's bytes, contiguous and row-major, as stored."""
    digest = hashlib.sha256()
    for piece in byte_chunks(t, release):
        check(cancel)
        digest.update(piece)
    return digest.hexdigest()


@dataclass
class _Moments:
    """Chan et al.'s parallel combination of count, mean and sum of squared deviations.

    mean and m2 are kept in units of 2**exp (exp grows with the largest chunk seen), so
    neither overflows even for values near the float64 maximum.
    """

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    exp: int = 0

    def add(self, n: int, mean: float, m2: float, exp: int = 0) -> None:
        if n == 0:
            return
        if exp > self.exp:
            self.mean = math.ldexp(self.mean, self.exp - exp)
            self.m2 = math.ldexp(self.m2, 2 * (self.exp - exp))
            self.exp = exp
        elif exp < self.exp:
            mean = math.ldexp(mean, exp - self.exp)
            m2 = math.ldexp(m2, 2 * (exp - self.exp))
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total

    def std(self, ddof: int) -> float | None:
        """Standard deviation with ddof, in the values' own units (None without enough values)."""
        if self.n - ddof <= 0:
            return None
        return math.ldexp(math.sqrt(max(self.m2, 0.0) / (self.n - ddof)), self.exp)


def _value_domain(chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, str]:
    """(values as floats, the same as exact integers when floats would round, what they are)."""
    if chunk.is_quantized:
        chunk, what = chunk.int_repr(), "int_repr"
    else:
        what = "values"
    dt = chunk.dtype
    if dt in _SMALL_EXACT:
        return chunk.to(torch.float32), None, what
    if dt in _WIDE_INT:
        exact = chunk.to(torch.int64)
        return exact.to(torch.float64), exact, what
    if dt == torch.uint64:
        return chunk.to(torch.float64), chunk, what
    if dt in _FLOAT_TO_F32:
        return chunk.to(torch.float32), None, what
    if dt == torch.float64:
        return chunk, None, what
    if dt.is_complex:
        wide = torch.complex128 if dt == torch.complex128 else torch.complex64
        return chunk.to(wide).abs(), None, "magnitude"
    raise TypeError(statistics_refused(dt))


def statistics_refused(dtype: torch.dtype) -> str | None:
    """Why values of this (unquantized) dtype get no statistics; None when they do."""
    if (dtype in _SMALL_EXACT or dtype in _WIDE_INT or dtype in _FLOAT_TO_F32
            or dtype in (torch.uint64, torch.float64) or dtype.is_complex):
        return None
    return refused_dtype(dtype_name(dtype))


def _exact_minmax(exact: torch.Tensor) -> tuple[int, int]:
    if exact.dtype == torch.uint64:
        arr = exact.numpy()
        return int(arr.min()), int(arr.max())
    lo, hi = torch.aminmax(exact)
    return int(lo), int(hi)


def tensor_stats(t: torch.Tensor, cancel: CancelToken | None = None,
                 digest: Digest | None = None) -> dict:
    """min, max, mean, std, absmax, NaN/Inf/zero counts and a 64-bin histogram of finite values.

    `digest` is fed the tensor's bytes as `tensor_digest` hashes them, in the same pass, while
    each chunk is hot in the cache; after an exception it holds only part of them.
    """
    per = max(1, STATS_CHUNK_BYTES // max(4, t.element_size()) // 2)
    moments = _Moments()
    nan = inf = zeros = 0
    lo = hi = None
    what = "values"
    chunks, last_finite = 0, None
    seen, first_bad = 0, None  # logical elements before this chunk; the first NaN/Inf's index
    for chunk in logical_chunks(t, per):
        check(cancel)
        if digest is not None:
            digest.update(_chunk_bytes(chunk))
        values, exact, what = _value_domain(chunk)
        finite, c_nan, c_inf, bounds = _finite(values)
        if (c_nan or c_inf) and first_bad is None:
            first_bad = seen + _first_nonfinite(values) // max(1, values.numel() // chunk.numel())
        seen += chunk.numel()
        nan += c_nan
        inf += c_inf
        zeros += _zeros(values)
        chunks += 1
        last_finite = finite
        if finite.numel():
            c_lo, c_hi = bounds if exact is None else _exact_minmax(exact)
            lo = c_lo if lo is None else min(lo, c_lo)
            hi = c_hi if hi is None else max(hi, c_hi)
            moments.add(finite.numel(), *_mean_m2(finite, c_lo, c_hi))
    rec = {"stats_on": what, "nan": nan, "inf": inf, "first_nonfinite": first_bad,
           "zeros": zeros, "min": lo, "max": hi,
           "mean": None, "std": None, "std_sample": None, "absmax": None, "histogram": None}
    if lo is None:
        return rec
    rec["mean"] = strict_float(math.ldexp(moments.mean, moments.exp))
    rec["std"] = strict_float(moments.std(0))
    rec["std_sample"] = strict_float(moments.std(1))
    rec["absmax"] = max(abs(lo), abs(hi))
    integral = not (t.dtype.is_floating_point or t.dtype.is_complex)
    rec["min"], rec["max"] = (int(lo), int(hi)) if integral else (float(lo), float(hi))
    # A one-chunk tensor (the common case) reuses its values instead of reading them again.
    def finite_chunks() -> Iterable[torch.Tensor]:
        return [last_finite] if chunks == 1 else _finite_chunks(t, per, nan + inf > 0, cancel)

    rec["histogram"] = _histogram(finite_chunks(), float(lo), float(hi))
    gap = outlier_gap(dtype_name(t.dtype))
    nonzero = moments.n - zeros
    if gap is not None and nonzero >= MIN_JUDGED and not outliers_ruled_out(
            rec["histogram"], rec["absmax"], nonzero, gap):
        counts = _ExponentCounts()
        for finite in finite_chunks():
            counts.add(finite)
        rec["exponents"] = counts.pairs()
    return rec


_scratch_local = threading.local()


_FRESH_ELEMENTS = 4096
"""Up to this many elements a chunk is worked on in fresh arrays: the per-thread buffers'
bookkeeping then costs more than allocating (a checkpoint of 12,000 tiny tensors)."""


def _scratch(like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A per-thread buffer shaped like `like`; fresh multi-MB allocations cost page faults."""
    dtype = dtype or like.dtype
    if like.numel() <= _FRESH_ELEMENTS:
        return torch.empty(like.shape, dtype=dtype)
    pool = _scratch_local.__dict__.setdefault("buffers", {})
    buf = pool.get(dtype)
    if buf is None or buf.numel() < like.numel():
        buf = pool[dtype] = torch.empty(like.numel(), dtype=dtype)
    return buf[: like.numel()].view(like.shape)


_SQUARES_LIMIT = 1e36
"""Bound on n * absmax**2 for the float32 fast path (float32 overflows at 3.4e38)."""


def _mean_m2(finite: torch.Tensor, lo: float, hi: float) -> tuple[float, float, int]:
    """Mean and sum of squared deviations of one chunk, in units of 2**exp; and exp.

    Sum and sum of squares (pairwise summation) take two cheap passes; when the mean is large
    against the spread their difference would cancel, so the chunk is centred first instead.
    Values whose squares could overflow are scaled by a power of two in float64 first.
    """
    n = finite.numel()
    absmax = max(abs(lo), abs(hi))
    if n * absmax * absmax > _SQUARES_LIMIT:
        exp = math.frexp(absmax)[1]
        scaled = torch.ldexp(finite.to(torch.float64), torch.tensor(-exp, dtype=torch.int32))
        mean = float(scaled.sum()) / n
        return mean, float((scaled - mean).square_().sum()), exp
    mean = float(finite.sum()) / n
    work = _scratch(finite)
    squares = float(torch.mul(finite, finite, out=work).sum())
    m2 = squares - n * mean * mean
    if m2 < 1e-2 * squares:
        m2 = float(torch.sub(finite, mean, out=work).square_().sum())
    return mean, m2, 0


_HIGH_HALF = 1 if sys.byteorder == "little" else 0


class _ExponentCounts:
    """Finite non-zero values counted by floor(log2|x|), from the float32 exponent field."""

    def __init__(self) -> None:
        self.counts = torch.zeros(256, dtype=torch.int64)
        self.wide: dict[int, int] = {}

    def add(self, finite: torch.Tensor) -> None:
        """Count one chunk of finite values."""
        zeros = _zeros(finite)
        if finite.dtype == torch.float64:
            big = finite.abs() >= 2.0**128
            if bool(big.any()):
                # Beyond float32's range: exact exponents from frexp, counted apart.
                for e in (torch.frexp(finite[big])[1] - 1).tolist():
                    self.wide[e] = self.wide.get(e, 0) + 1
                finite = finite[~big]
            # Values below float32's range become zero: no longer magnitudes to count.
            narrow = finite.to(torch.float32)
            zeros += int((narrow == 0).sum()) - int((finite == 0).sum())
            finite = narrow
        # The high 16 bits of each float32 hold sign and exponent; a shift by 7 and a
        # truncation to 8 bits leave the exponent field (4x cheaper than on the full words).
        high = finite.reshape(-1).view(torch.int16)[_HIGH_HALF::2]
        self.counts += torch.bincount((high >> 7).to(torch.uint8), minlength=256)
        # Zeros are not magnitudes; float32 subnormals (field 0) are counted as 2**-127.
        self.counts[0] -= zeros

    def pairs(self) -> list[list[int]]:
        """[[exponent, count], ...] in increasing exponent order, non-zero counts only."""
        out = {int(e) - 127: int(c) for e, c in enumerate(self.counts.tolist()) if c}
        for e, c in self.wide.items():
            out[e] = out.get(e, 0) + c
        return [[e, out[e]] for e in sorted(out)]


def _zeros(values: torch.Tensor) -> int:
    """How many values are zero (NaN is not); NumPy's equality and count take a quarter of
    the time torch.count_nonzero does on CPU."""
    return int(np.count_nonzero(values.resolve_neg().numpy() == 0))


def _finite(values: torch.Tensor) -> tuple[torch.Tensor, int, int, tuple[float, float]]:
    """(finite values, NaN count, Inf count, (min, max) of the finite values)."""
    if values.numel() == 0:
        return values, 0, 0, (math.nan, math.nan)
    lo, hi = (float(v) for v in torch.aminmax(values))
    # NaN propagates through aminmax, so finite bounds prove the chunk is all finite.
    if math.isfinite(lo) and math.isfinite(hi):
        return values, 0, 0, (lo, hi)
    nan_mask = torch.isnan(values)
    inf_mask = torch.isinf(values)
    finite = values[~(nan_mask | inf_mask)]
    bounds = tuple(float(v) for v in torch.aminmax(finite)) if finite.numel() else (0.0, 0.0)
    return finite, int(nan_mask.sum()), int(inf_mask.sum()), bounds


def _first_nonfinite(values: torch.Tensor) -> int:
    """The flat index of the first NaN or Inf among `values` (which hold at least one)."""
    return int((~torch.isfinite(values.reshape(-1))).nonzero()[0, 0])


def histogram_edges(lo: float, hi: float) -> tuple[float, float]:
    """The histogram range; a single value gets a unit-wide range, as NumPy does."""
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)


def _finite_chunks(t: torch.Tensor, per: int, filter_nonfinite: bool,
                   cancel: CancelToken | None) -> Iterator[torch.Tensor]:
    for chunk in logical_chunks(t, per):
        check(cancel)
        values = _value_domain(chunk)[0]
        yield _finite(values)[0] if filter_nonfinite else values


def _histogram(finite_chunks: Iterable[torch.Tensor], lo: float, hi: float) -> dict:
    first, last = histogram_edges(lo, hi)
    # A range wider than the values' dtype can hold (a flipped exponent bit gives one) is
    # binned in float64, halved if even float64 overflows; both are exact for in-range values.
    halve = not math.isfinite(last - first)
    base = first / 2 if halve else first
    width = ((last / 2 - first / 2) if halve else (last - first)) / HIST_BINS
    wide = halve or last - first > float(torch.finfo(torch.float32).max)
    counts = np.zeros(HIST_BINS + 1, dtype=np.int64)
    for finite in finite_chunks:
        if wide and finite.numel():
            finite = finite.to(torch.float64) * (0.5 if halve else 1.0)
        if finite.numel():
            # Dividing by the bin width (not multiplying by its inverse) puts a value that sits
            # exactly on an edge, as integers and low-precision floats often do, in the bin
            # NumPy puts it in; truncation gives the bin; the top edge joins the last bin.
            # NumPy does the same IEEE operations as torch here, in about half the time.
            values = finite.resolve_neg().numpy()
            scalar = values.dtype.type
            if values.size <= _FRESH_ELEMENTS:  # the same operations on fresh NumPy arrays
                scaled = np.subtract(values.reshape(-1), scalar(base))
                np.divide(scaled, scalar(width), out=scaled)
                found = np.bincount(scaled.astype(np.uint8), minlength=HIST_BINS + 1)
            else:
                scaled = np.subtract(values, scalar(base), out=_scratch(finite).numpy())
                np.divide(scaled, scalar(width), out=scaled)
                index = _scratch(finite, torch.uint8)
                np.copyto(index.numpy(), scaled, casting="unsafe")
                found = torch.bincount(index, minlength=HIST_BINS + 1).numpy()
            counts += found[: HIST_BINS + 1]
    counts[HIST_BINS - 1] += counts[HIST_BINS]
    return {"bins": HIST_BINS, "lo": first, "hi": last, "counts": counts[:HIST_BINS].tolist()}
