"""Statistics and digests of many small tensors at once, for `describe_tensors`.

A checkpoint of thousands of tiny tensors (biases, norms, a GGUF or safetensors file of 12,000
four-element tensors) spent most of its `inspect` time in the fixed cost of `stats.tensor_stats`
per tensor: a dozen torch calls, each worth more than the values. Here the tensors of one dtype
are joined into one array and every statistic is taken per segment in a few NumPy passes
(`segments.describe_joined`: `reduceat`, one `bincount` for all the histograms), giving the
record `tensor_stats` gives:

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

import torch

from inspector.tensors.plain.segments import describe_joined
from inspector.tensors.records import dtype_name

SMALL_ELEMENTS = 4096
"""Tensors up to this many elements are described together."""
BATCH_ELEMENTS = 1 << 20
"""Elements joined into one array at most (bounds the scratch arrays to a few MiB)."""
BATCHED = frozenset({torch.bool, torch.int8, torch.uint8, torch.int16, torch.uint16,
                     torch.float16, torch.bfloat16, torch.float32} | {
    getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n)})
"""Dtypes whose every value float32 holds exactly (the value domain of `tensor_stats`)."""


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
    found = describe_joined(joined.view(torch.uint8).numpy(), joined.to(torch.float32).numpy(),
                            [p.numel() for p in parts], dtype_name(joined.dtype),
                            not joined.dtype.is_floating_point)
    for i, rec in zip(batch, found, strict=True):
        out[i] = rec


