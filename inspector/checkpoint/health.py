"""Weights health: a verdict on the tensors' values, beside the static scan's code safety.

Judged from the `inspect` tensor records alone (no torch), so the CLI, the GUI and the report
judge old and new results alike. Status is `problem` when a weight holds NaN or Inf or a
magnitude outlier, or a running variance is negative, `warning` for constant weight matrices
and exact duplicates, `ok` otherwise.

Rules:
- Weights are floating tensors (complex ones judged on their magnitude) outside training
  state. Training state is any key with a segment naming an optimizer, scheduler, scaler,
  callback or loop (`optimizer_states`, `lr_schedulers`, `callbacks`, ...) or a known
  counter or score (`best_model_score`, `kth_value`, `step`, ...). NaN or Inf there is
  listed as `info` and never a problem (Lightning's `ModelCheckpoint.kth_value` is `inf` by
  design).
- Magnitude outlier (a flipped exponent bit): from the record's `exponents` (values counted
  by floor(log2|x|)), the bulk top E is the binary order below which all but a tail of
  max(1, n // 1000) values lie; values at 2**(E + 1 + GAP) or above are outliers, where GAP is
  20 binary orders (about 10**6) for 8-bit and wider exponents and 8 (256x) for float16 and
  float8_e5m2. Setting the top exponent bit multiplies a value by 2**(bias+1) (2**128 for
  float32 and bfloat16, 2**16 for float16), far beyond GAP. Tensors of fewer than 16 finite
  non-zero values, and float8 types with 4 exponent bits, are not judged. A record without
  `exponents` had its outliers ruled out by `tensors.stats.outliers_ruled_out` (exactly: more
  than the tail lie within 2**(GAP-1) of absmax). A tensor of 8-bit or wider exponents too
  sparse to judge so (fewer than 16 finite non-zero values: a 1-element weight, one whose
  other values are zero) is a problem when its absmax is 2**64 or more, unless it is the
  dtype's largest finite value (a `finfo.min` mask sentinel). Measured with
  `benchmarks/bench_health_outliers.py`: no false problem on GPT-2, BERT, a Llama-shaped
  model, ViT, T5 (random initialisation) and a trained small GPT-2, in float32, float16 and
  bfloat16. Its limit: float16's 256x gap also flags Cauchy-tailed tensors (Student-t with
  df 1; df 2 rarely, df 3 never).
- A quantized weight (one whose dtype is quantized: a `quantization` record beside any other
  dtype is ignored) whose scale (per channel: any channel's, `nonfinite_scales`) is NaN or
  Inf is a problem: every value it dequantizes to is NaN or Inf.
- Negative variance: a normalisation layer's running variance (`*.running_var`) whose lowest
  value is below zero is a problem (a flipped sign bit: its magnitude is unchanged).
- Constant: a weight of two or more dimensions whose values are all equal (all zero, or one
  value) is a warning; 1-D and scalar tensors (biases, norm scales, running statistics, class
  tokens) are legitimately constant at initialisation and are not judged.
- Duplicate: two weights of at least 16 elements with equal digest, dtype and shape that do
  not share storage (tied weights share it) are a warning; constant tensors are excluded.

Each rule is one registered class (`@register`) with one `judge` method over a `TensorStats`;
a new rule is one class here and one test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from inspector.checkpoint.tensor_stats import TensorStats
from inspector.core.dtypes import lookup
from inspector.core.flatten import is_running_variance
from inspector.core.json_record import JsonRecord, typed_list, word
from inspector.core.termtext import counted
from inspector.core.vocabulary import HealthSeverity, HealthStatus

OK, WARNING, PROBLEM = HealthStatus.OK, HealthStatus.WARNING, HealthStatus.PROBLEM
INFO = HealthSeverity.INFO
_RANK = {OK: 0, INFO: 0, WARNING: 1, PROBLEM: 2}

OUTLIER_TAIL = 1000
"""One value in this many may sit above the bulk before it stops being an outlier."""
OUTLIER_FEW = 8
"""However small the tensor, this many values (at most one in 64) may sit above the bulk and
still be outliers: two flipped bits in a 32x32 weight are not its bulk."""
MIN_JUDGED = 16
WIDE_GAP, NARROW_GAP = 20, 8
ABSOLUTE_LIMIT = 2 ** 64
"""For dtypes of 8 or more exponent bits: a magnitude no weight reaches, and where setting the
top exponent bit of any value from 2**-64 (float32, bfloat16; 2**-960 float64) up lands."""

STATE_SEGMENTS = frozenset({
    "optimizer", "optimizers", "optimizer_states", "optimizer_state", "optim", "opt_state",
    "lr_scheduler", "lr_schedulers", "scheduler", "schedulers", "scaler", "grad_scaler",
    "callbacks", "loops", "amp", "hparams", "hyper_parameters", "rng_state", "rng_states",
})
STATE_LEAVES = frozenset({
    "step", "steps", "epoch", "global_step", "best_model_score", "kth_value", "best_score",
    "current_score", "num_batches_tracked", "iteration", "best_metric", "wait_count",
})


@dataclass
class HealthFinding(JsonRecord):
    """One observation about one tensor's values; what a finding adds (counts, the value,
    the tensor it duplicates) is in `extra`, as the contract's record holds it beside these."""

    code: str
    key: str
    severity: HealthSeverity | str = field(metadata=word(HealthSeverity))
    message: str


@dataclass
class Health(JsonRecord):
    """The weights-health verdict of one checkpoint (the `health` contract)."""

    status: HealthStatus | str = field(default=OK, metadata=word(HealthStatus))
    findings: list[HealthFinding] = field(default_factory=list,
                                          metadata=typed_list(HealthFinding))
    weights_checked: int = 0
    state_tensors: int = 0

    def add(self, finding: HealthFinding) -> None:
        """Record a finding; the status is the worst severity seen."""
        self.findings.append(finding)
        if _RANK[finding.severity] > _RANK[self.status]:
            self.status = HealthStatus(finding.severity)


def is_state_key(key: str) -> bool:
    """True for training state (optimizer, scheduler, callbacks, counters), not model weights."""
    parts = [p.lower() for p in key.split(".")]
    return bool(STATE_SEGMENTS.intersection(parts)) or parts[-1] in STATE_LEAVES or any(
        p.startswith(("modelcheckpoint", "earlystopping")) for p in parts)


_JUDGED_KINDS = ("float", "complex")
"""Complex weights are judged on their magnitude (what `tensors.stats` summarises), with the
exponent width of their real and imaginary halves."""


def _is_judged_kind(rec: TensorStats) -> bool:
    d = lookup(rec.dtype)
    return d is not None and d.kind in _JUDGED_KINDS


def _is_quantized(rec: TensorStats) -> bool:
    """A quantized tensor, judged by its scale: its dtype says so (a `quantization` record
    beside a float dtype is ignored, so its values are still judged)."""
    d = lookup(rec.dtype)
    return d is not None and d.kind == "quantized" and isinstance(rec.quantization, dict)


def _is_complex(rec: TensorStats) -> bool:
    d = lookup(rec.dtype)
    return d is not None and d.kind == "complex"


def outlier_gap(dtype: Any) -> int | None:
    """Binary orders above the bulk that make a value an outlier; None when not judged."""
    d = lookup(dtype)
    if d is None or d.fields is None or d.kind not in _JUDGED_KINDS or d.fields[1] < 5:
        return None
    return WIDE_GAP if d.fields[1] >= 8 else NARROW_GAP


def outlier_tail(nonzero: int) -> int:
    """How many of `nonzero` values may sit above the bulk and still count as outliers."""
    return max(1, nonzero // OUTLIER_TAIL, min(OUTLIER_FEW, nonzero // 64))


def magnitude_outliers(exponents: list[list[int]], gap: int) -> tuple[int, int | None]:
    """(number of outliers, bulk top exponent) from [[exponent, count], ...] pairs."""
    total = sum(c for _, c in exponents)
    if total < MIN_JUDGED:
        return 0, None
    tail = outlier_tail(total)
    above = 0
    bulk = exponents[0][0]
    for e, c in sorted(exponents, reverse=True):
        if above + c > tail:
            bulk = e
            break
        above += c
    limit = bulk + 1 + gap
    return sum(c for e, c in exponents if e >= limit), bulk


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


@dataclass
class Judging:
    """One checkpoint being judged: the verdict so far, the severity a value problem has for
    the tensor at hand (info in training state), and the first key of each content seen."""

    health: Health
    severity: str = PROBLEM
    seen: dict[tuple, str] = field(default_factory=dict)


class HealthRule(Protocol):
    """What `assess` asks of a rule."""

    scope: ClassVar[str]
    """"quantized" (quantized tensors), "values" (every judged tensor, training state as
    info) or "weights" (model weights only)."""

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """Add this rule's findings about one tensor to `judging.health`."""
        ...


RULES: list[HealthRule] = []
"""Every rule, in the order a tensor meets them (the order of its findings)."""


def register(cls: type) -> type:
    """Add one instance of a rule class to `RULES`."""
    RULES.append(cls())
    return cls


def assess(tensors: Iterable[TensorStats]) -> Health:
    """Judge every tensor record of an `inspect` result; see the module docstring."""
    judging = Judging(Health())
    health = judging.health
    judged: dict[str, tuple[str | None, bool]] = {}  # key: (digest, training state)
    for rec in tensors:
        state = is_state_key(rec.key)
        if _is_quantized(rec):
            judging.severity = INFO if state else PROBLEM
            _apply(judging, rec, ("quantized",))
            continue  # its integer representation has no NaN to count
        if not _is_judged_kind(rec) or not rec.has_stats:
            continue  # no statistics to judge (sparse, meta, or a dtype without them)
        # A tied view of a storage already judged (same bytes) is not reported twice; a
        # weight is judged as one even when training state listed first holds its bytes.
        if any(judged.get(k, ("", True))[0] == rec.digest
               and (state or not judged[k][1]) for k in rec.shared_with or ()):
            continue
        judged[rec.key] = (rec.digest, state)
        if state:
            health.state_tensors += 1
        else:
            health.weights_checked += 1
        judging.severity = INFO if state else PROBLEM
        _apply(judging, rec, ("values",) if state else ("values", "weights"))
    return health


def _apply(judging: Judging, rec: TensorStats, scopes: tuple[str, ...]) -> None:
    for rule in RULES:
        if rule.scope in scopes:
            rule.judge(rec, judging)


def _nonfinite_number(value: Any) -> bool:
    """NaN or Inf, as a float or as the strict-JSON text ("nan", "inf", "-inf")."""
    if isinstance(value, str):
        return value in ("nan", "inf", "-inf")
    return isinstance(value, float) and not math.isfinite(value)


def _finding_code(severity: str) -> str:
    return "nonfinite-state" if severity == INFO else "nonfinite-weights"


@register
class QuantizationScale:
    """A quantized tensor whose scale (any channel's, per channel) is NaN or Inf dequantizes
    to NaN or Inf there."""

    scope = "quantized"

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """A finding when a scale is NaN or Inf."""
        quantization = rec.quantization or {}
        scale = quantization.get("scale")
        scales = scale if isinstance(scale, list) else [scale]
        # every channel's, where the record counts them; else the listed ones (an older worker's)
        bad = quantization.get("nonfinite_scales")
        if not isinstance(bad, int):
            bad = sum(_nonfinite_number(v) for v in scales)
        if not bad:
            return
        what = "channel scales" if isinstance(scale, list) else "scale"
        judging.health.add(HealthFinding(
            _finding_code(judging.severity), rec.key, judging.severity,
            f"quantization {what} NaN or Inf ({bad:,}): the dequantized weights are NaN or Inf",
            extra={"nan": 0, "inf": 0, "bad_scales": bad}))


@register
class NonFiniteValues:
    """NaN or Inf among the values: a problem in weights, shown as info in training state."""

    scope = "values"

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """A finding counting the NaN and Inf."""
        nan, inf = _count(rec.nan), _count(rec.inf)
        if not nan and not inf:
            return
        what = " and ".join(p for p in (f"{nan:,} NaN" if nan else "",
                                        f"{inf:,} Inf" if inf else "") if p)
        numel = rec.numel or 0
        if judging.severity == INFO:
            message = f"{what} in training state (shown, not a weights problem)"
        else:
            message = f"{what} of {numel:,} values: the weights are corrupt or training diverged"
        first = rec.first_nonfinite
        if isinstance(first, int):
            message += f" (the first at flat index {first:,})"
        judging.health.add(HealthFinding(_finding_code(judging.severity), rec.key,
                                         judging.severity, message,
                                         extra={"nan": nan, "inf": inf, "first_index": first}))


@register
class MagnitudeOutlier:
    """Values far above the rest of their tensor: the signature of a flipped exponent bit."""

    scope = "weights"

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """A finding from the exponent counts, or from absmax in a tensor too sparse for them."""
        gap = outlier_gap(rec.dtype)
        if gap is None:
            return
        if not rec.exponents:
            self._few_values(rec, gap, judging)
            return
        count, bulk = magnitude_outliers(rec.exponents, gap)
        if count:
            judging.health.add(HealthFinding(
                "magnitude-outlier", rec.key, PROBLEM,
                f"{counted(count, 'value')} at least 2^{gap} times above the rest of the tensor "
                f"(absmax {_num(rec.absmax)}, the rest below 2^{bulk + 1}): the signature "
                f"of a flipped exponent bit",
                extra={"outliers": count, "absmax": rec.absmax, "bulk_exponent": bulk + 1}))

    @staticmethod
    def _few_values(rec: TensorStats, gap: int, judging: Judging) -> None:
        """A value no weight reaches, in a tensor too sparse for the relative rule (a 1-element
        weight, or one whose other values are zero): only a flipped exponent bit puts it there."""
        d = lookup(rec.dtype)
        absmax = rec.absmax
        if gap != WIDE_GAP or d is None or not isinstance(absmax, (int, float)):
            return
        finite = (rec.numel or 0) - _count(rec.nan) - _count(rec.inf)
        if finite - _count(rec.zeros) >= MIN_JUDGED or absmax < ABSOLUTE_LIMIT:
            return
        _, exp_bits, man_bits = d.fields
        if absmax == (2 - 2.0 ** -man_bits) * 2.0 ** (2 ** (exp_bits - 1) - 1):
            return  # the dtype's largest finite value: a deliberate sentinel (finfo.min masks)
        judging.health.add(HealthFinding(
            "magnitude-outlier", rec.key, PROBLEM,
            f"a value of {_num(absmax)} (at least 2^{ABSOLUTE_LIMIT.bit_length() - 1}) among "
            f"fewer than {MIN_JUDGED} non-zero values: no weight is that large; the signature "
            f"of a flipped exponent bit",
            extra={"outliers": 1, "absmax": absmax, "bulk_exponent": None}))


@register
class NegativeVariance:
    """A normalisation layer's running variance below zero: a running mean of variances never
    is, and in eval mode the layer divides by its square root, so that channel's every output
    is NaN (a flipped sign bit keeps the value's magnitude, so no outlier rule sees it)."""

    scope = "weights"

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """A problem naming the most negative value."""
        lo = rec.min
        if not is_running_variance(rec.key) or not isinstance(lo, (int, float)) or not lo < 0:
            return
        judging.health.add(HealthFinding(
            "negative-variance", rec.key, PROBLEM,
            f"a running variance holds {_num(lo)} (its lowest value): a running mean of "
            "variances is never negative; in eval mode, once it is below -eps (1e-5 by "
            "default), that channel's outputs are NaN",
            extra={"min": lo}))


def is_constant(rec: TensorStats) -> bool:
    """All values equal (for complex: all zero; equal magnitudes are unit phasors, not equal)."""
    lo, hi = rec.min, rec.max
    return lo is not None and lo == hi and not (_is_complex(rec) and lo != 0)


@register
class ConstantWeights:
    """A weight matrix whose values are all equal (1-D tensors are legitimately constant)."""

    scope = "weights"

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """A warning for a constant matrix without NaN or Inf."""
        shape, numel, lo = rec.shape or [], rec.numel or 0, rec.min
        if (not is_constant(rec) or len(shape) < 2 or numel < 2
                or _count(rec.nan) + _count(rec.inf)):
            return
        zero = lo == 0
        message = (f"all {numel:,} values are zero (expected only in freshly initialised "
                   f"LoRA-style layers)" if zero else f"all {numel:,} values equal {lo!r}")
        judging.health.add(HealthFinding("zero-weights" if zero else "constant-weights",
                                         rec.key, WARNING, message, extra={"value": lo}))


@register
class DuplicateWeights:
    """Two weights with equal bytes that do not share storage (tied weights share it)."""

    scope = "weights"

    def judge(self, rec: TensorStats, judging: Judging) -> None:
        """A warning naming the first weight with the same content."""
        if is_constant(rec) or not rec.digest or (rec.numel or 0) < MIN_JUDGED:
            return
        ident = (rec.digest, rec.dtype, tuple(rec.shape or ()))
        first = judging.seen.setdefault(ident, rec.key)
        if first != rec.key and first not in (rec.shared_with or ()):
            judging.health.add(HealthFinding(
                "duplicate-weights", rec.key, WARNING,
                f"bit-for-bit identical to {first} without sharing its storage (a copy where "
                f"distinct weights were expected, or tied weights saved twice)",
                extra={"duplicate_of": first}))
