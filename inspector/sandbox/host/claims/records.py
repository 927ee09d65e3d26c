"""How a worker's tensor records disagree with the tensors measured here."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.checkpoint.health import (
    MIN_JUDGED,
    magnitude_outliers,
    outlier_tail,
)
from inspector.core.dtypes import BY_NAME
from inspector.core.termtext import escape
from inspector.layout.spans import overlapping
from inspector.rawtensors.readers import RawTensor

if TYPE_CHECKING:
    from inspector.rawtensors.orders import Tops
    from inspector.rawtensors.values import Measured


def record_problems(measured: list[tuple[RawTensor, Measured]], records: list[dict],
                     derived: dict[str, str], shape: RecordShape) -> list[str]:
    """How the worker's tensor records disagree with the file's tensors measured here: each
    once, with its dtype, shape and digest (its counts replaced by the ones measured here);
    `derived`: keys the file names without storing them, with their digests."""
    by_key: dict[str, list[dict]] = {}
    for rec in records:
        by_key.setdefault(str(rec.get("key")), []).append(rec)
    problems = []
    # the host's own sharing: tensors whose bytes overlap in the file (none without elements)
    shared = overlapping({None: [(*t.reach, t.key) for t, _ in measured
                                 if t.reach[0] < t.reach[1]]})
    for t, m in measured:
        found = by_key.pop(t.key, [])
        if len(found) != 1:
            problems.append(f"{escape(t.key)} reported {len(found)} times")
            continue
        problems += _tensor_problems(t, m, found[0], shape) or shape.layout(
            t, found[0], shared.get(t.key, []))
    for key, found in by_key.items():
        if key not in derived:
            problems.append(f"{escape(key)} is no tensor of the file")
        elif [r.get(shape.digest) for r in found] != [derived[key]]:
            problems.append(f"{escape(key)}'s digest differs")
    return problems


def _tensor_problems(t: RawTensor, measured: Measured, rec: dict,
                     shape: RecordShape) -> list[str]:
    """How one worker record disagrees with the tensor read here; sets its checked counts."""
    key = escape(t.key)
    if not same_dtype(rec.get("dtype"), t.dtype) or list(rec.get("shape") or ()) != list(t.shape):
        return [f"{key} is {t.dtype} {list(t.shape)}, reported as "
                f"{escape(str(rec.get('dtype')))} {escape(str(rec.get('shape')))}"]
    if rec.get(shape.digest) != measured.digest:
        return [f"{key}'s digest differs"]
    return shape.counts(t, measured, rec)


def same_dtype(told: object, here: str) -> bool:
    """Whether a worker's dtype name is the tensor's read here: torch's name, or for a dtype
    torch lacks (safetensors' F4, F6) the file's own code, which the worker's loader keeps
    (`dtypes.SAFETENSORS_NAMES`) where the readers here name it in torch's style."""
    record = BY_NAME.get(here)
    return told == here or (record is not None and not record.in_torch
                            and record.safetensors is not None and told == record.safetensors)


def _layout_problems(t: RawTensor, rec: dict, twins: list[str]) -> list[str]:
    """An inspect record's layout facts, which health, resume, the contents and shard aliases
    judge and print, must be the ones the tensor's checked dtype, shape and place in the file
    give: its element and byte counts, a plain strided tensor on the CPU (none of the file's
    readers here locates a quantized, sparse, nested or meta one, and the worker moves no
    tensor, so a record saying so is a lie), the stride, storage offset and contiguity the
    loader gives it (`RawTensor.placed`), and the tensors it shares bytes with (`twins`,
    found here: a sharing left out would make tied weights a duplicate warning), which
    replace the worker's list."""
    key, numel = escape(t.key), math.prod(t.shape)
    dtype = BY_NAME.get(t.dtype)
    facts = {"numel": numel, "nbytes": None if dtype is None else numel * dtype.itemsize,
             "layout": "strided", "flags": [], "device": "cpu",
             "stride": list(t.placed.stride), "storage_offset": t.placed.storage_offset,
             "contiguous": t.placed.contiguous}
    wrong = [f"{key} has {name} {value}, reported as {escape(str(rec.get(name)))}"
             for name, value in facts.items() if value is not None and rec.get(name) != value]
    if rec.get("quantization") is not None:
        wrong.append(f"{key} is {t.dtype}, reported as quantized")
    told = rec.get("shared_with")
    if told is not None and not isinstance(told, list):
        wrong.append(f"{key}'s shared storage is not a list")
    elif sorted(map(str, told or ())) != sorted(twins):
        wrong.append(f"{key} shares its bytes with {escape(str(twins))}, reported as "
                     f"{escape(str(told or []))}")
    if twins:
        rec["shared_with"] = twins
    return wrong[:1]


def _inspected(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """An inspect record's NaN and Inf counts, replaced by the ones counted here, and its
    values' binary orders (what health judges a flipped exponent bit from) held against the
    file's."""
    if measured.nan is None:
        return _unsummarised(t, rec)
    claimed = (rec.get("nan", 0), rec.get("inf", 0))
    rec.update(nan=measured.nan, inf=measured.inf)
    if claimed != (measured.nan, measured.inf):
        return [f"{escape(t.key)} holds {measured.nan} NaN and {measured.inf} Inf, reported as "
                f"{escape(str(claimed[0]))} and {escape(str(claimed[1]))}"]
    return (_span_problems(t, measured, rec) or _order_problems(t, measured, rec)
            or (_moment_problems(t, rec) if measured.span is not None else []))


def _unsummarised(t: RawTensor, rec: dict) -> list[str]:
    """A dtype decoded neither here nor by the loader's statistics (`bits8`, packed float4):
    an honest worker states none of its values, so any it states are invented (and health
    would judge them)."""
    from inspector.rawtensors.values import COUNTERS  # NumPy's import, beside the worker's start

    if t.dtype in COUNTERS or (rec.get("stats_on") is None and "nan" not in rec):
        return []
    return [f"{escape(t.key)} is {t.dtype}, whose values no loader summarises, reported with "
            "statistics"]


def _span_problems(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """A tensor's least and greatest finite values, its largest magnitude, its zeros and its
    first NaN or Inf (what health judges a wiped or constant weight from) must be the ones
    read here; a complex tensor's magnitudes within one unit in the last place, and the ones
    computed here replace the worker's (`orders.ROUNDED`)."""
    from inspector.rawtensors.orders import ROUNDED  # NumPy's import, beside the worker's start

    span = measured.span
    if span is None:
        return []
    absmax = None if span.low is None or span.high is None else max(abs(span.low),
                                                                     abs(span.high))
    exact = {"min": span.low, "max": span.high, "absmax": absmax, "zeros": span.zeros,
             "first_nonfinite": span.first_nonfinite}
    rounded = t.dtype in ROUNDED
    wrong = [f"{escape(t.key)} has {name} {value}, reported as {escape(str(rec.get(name)))}"
             for name, value in exact.items() if rec.get(name) != value
             and not (rounded and _one_ulp(value, rec.get(name), t.dtype == "complex128"))]
    if not wrong and rounded:
        rec.update(exact)
    return wrong[:1]


def _moment_problems(t: RawTensor, rec: dict) -> list[str]:
    """The worker's mean and standard deviations, which nothing here computes (the radar's
    std view shows them), must be possible for the checked range: a mean within [min, max],
    a std within [0, max - min] (population std is at most half the range, the sample one
    at most that times sqrt(n / (n - 1))), none without a finite value; a slack of a
    thousandth of the range's magnitude for the worker's rounding."""
    low, high = rec.get("min"), rec.get("max")
    moments = {name: rec.get(name) for name in ("mean", "std", "std_sample")}
    if low is None or high is None:
        told = {k: v for k, v in moments.items() if v is not None}
        return [f"{escape(t.key)} has no finite value, reported with {escape(str(told))}"
                ] if told else []
    slack = 1e-3 * max(abs(low), abs(high))
    bounds = {"mean": (low - slack, high + slack), "std": (0.0, high - low + slack),
              "std_sample": (0.0, high - low + slack)}
    return [f"{escape(t.key)} has {name} {escape(str(value))}, outside [{lo:.6g}, {hi:.6g}] "
            f"for its values' range" for name, (lo, hi) in bounds.items()
            if (value := moments[name]) is not None
            and not (isinstance(value, (int, float)) and lo <= value <= hi)][:1]


def _one_ulp(here: object, told: object, wide: bool) -> bool:
    """Whether two non-negative magnitudes (float64 where `wide`, else float32) are at most
    one representable value apart."""
    if not all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in (here, told)):
        return False
    pattern = "<d" if wide else "<f"
    try:
        a, b = (int.from_bytes(struct.pack(pattern, v), "little") for v in (here, told))
    except OverflowError:
        return False
    return abs(a - b) <= 1 and (wide or struct.unpack("<f", struct.pack("<f", told))[0] == told)


def clear(tops: Tops) -> bool:
    """Whether a tensor's top orders prove it free of outliers: more than the tail of its
    values lie within the gap of its top (a lower bound, so never a tensor that holds one)."""
    return not tops.exact_only and tops.near > outlier_tail(tops.values)


def _order_problems(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """The record's largest magnitude must be of the file's top order; where the file's values
    may hold an outlier, its orders were counted here and replace the worker's `exponents`;
    elsewhere the worker's, if any, must show none."""
    from inspector.rawtensors.orders import order_of  # NumPy's import, beside the worker's start

    tops, key, absmax = measured.tops, escape(t.key), rec.get("absmax")
    if tops is None:
        return []
    if tops.top is not None and not (isinstance(absmax, (int, float)) and absmax
                                     and order_of(absmax) == tops.top):
        return [f"{key}'s largest value is of order 2^{tops.top}, reported as "
                f"{escape(str(absmax))}"]
    if measured.orders is not None:
        # the worker's form: counts only where enough values are non-zero to judge them
        if sum(c for _, c in measured.orders) >= MIN_JUDGED:
            rec["exponents"] = measured.orders
        else:
            rec.pop("exponents", None)
        return []
    told = rec.get("exponents")
    if told and magnitude_outliers(told, tops.gap)[0]:
        return [f"{key} reported with outliers its bytes do not hold"]
    return []


def _probed(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """A weights-probe row: probed when the worker must probe it (a floating tensor of 2+
    dims), and its non-finite count, which keeps the device from being judged on it,
    replaced by the one counted here."""
    dtype = BY_NAME.get(t.dtype)
    must = dtype is not None and dtype.kind == "float" and len(t.shape) >= 2 and all(t.shape)
    if must and "repeats" not in rec:
        return [f"{escape(t.key)} was not probed"]
    if "repeats" not in rec or measured.nan is None:
        return []
    claimed, counted = rec.get("nonfinite", 0), measured.nan + measured.inf
    if counted:
        rec["nonfinite"] = counted
    else:
        rec.pop("nonfinite", None)
        rec.pop("first_nonfinite", None)
    if claimed != counted:
        return [f"{escape(t.key)} holds {counted} NaN/Inf, reported as {escape(str(claimed))}"]
    return []


@dataclass(frozen=True)
class RecordShape:
    """Where a kind of worker record keeps a tensor's digest, and how its counts are checked."""

    digest: str
    counts: Callable[[RawTensor, Measured, dict], list[str]]
    layout: Callable[[RawTensor, dict, list[str]], list[str]] = (
        lambda _t, _rec, _twins: [])
    """How the record's layout facts disagree with the tensor's (none for a record without
    them)."""


INSPECTED = RecordShape("digest", _inspected, _layout_problems)
"""An `inspect` tensor record."""

DIGESTS = RecordShape("digest", _inspected)
"""A `digests` reply's record: key, dtype, shape and digest only."""

PROBED = RecordShape("sha256", _probed)
