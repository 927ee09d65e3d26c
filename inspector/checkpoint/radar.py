"""The corruption radar: absmax, std and NaN/Inf share of every weight along the model's depth.

A matrix with a row per weight kind and a column per layer index, built from the inspect
contract's tensor records as dicts: the app rebuilds it from the rows streaming in, which are
typed only once the load ends (no torch, no Qt). The layer index is a key's first all-digit
segment (`model.layers.7.mlp.up_proj.weight` is layer 7 of the kind `mlp.up_proj.weight`), so
any stack (`layers.N`, `h.N`, `block.N`, `encoder.layer.N`, `features.N`) lines up without a
table of families; a key's later numbers (experts, sub-layers) stay in its kind. Weights
outside the layers (embeddings, final norm, output head) sit in a column before or after them,
as the state dict orders them. Training state, buffers and index tensors are left out
(`checkpoint.architecture.is_model_weight`).

Cells carry each metric's value: absmax and std on a log10 scale, where a flipped exponent
bit (x 2**128 for float32) stands tens of orders above its neighbours, and the NaN/Inf share
of the tensor's elements. The std is the jailed loader's word (the claims bound it by the
checked range, nothing here computes it): its legend and tooltips say so. Cells that a
weights-health finding names are marked with its codes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inspector.checkpoint.architecture import is_model_weight
from inspector.checkpoint.health import HealthFinding
from inspector.core.vocabulary import HealthSeverity

ABSMAX, STD, NONFINITE = "absmax", "std", "nonfinite"
METRICS = {ABSMAX: "log10 of the largest |value|", STD: "log10 of the standard deviation",
           NONFINITE: "share of NaN/Inf elements"}
BEFORE, AFTER = "in", "out"
"""Column labels of the weights before the first layer and after it (embeddings, head)."""
NONFINITE_FLOOR = 0.25
"""Colour position of the smallest non-zero NaN/Inf share: one NaN in a billion still shows."""
MIN_LAYERS = 2

_LAYER = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")
_KINDS = (  # the first pattern that matches a kind's key names it
    ("embedding", re.compile(r"embed|(?:^|\.)(?:wte|wpe|shared)\.|cls_token|pos_|patch",
                             re.IGNORECASE)),
    ("norm", re.compile(r"norm|(?:^|\.)ln|(?:^|\.)bn\d*\.", re.IGNORECASE)),
    ("attention", re.compile(r"attn|attention|(?:^|[._])[qkvo](?:_proj)?\.|qkv|query|key\.|value",
                             re.IGNORECASE)),
    ("mlp", re.compile(r"mlp|ffn|feed_forward|fc\d|gate|(?:up|down)_proj|intermediate|"
                       r"(?:^|\.)w[123]\.|dense|experts", re.IGNORECASE)),
    ("head", re.compile(r"head|classifier|(?:^|\.)fc\.", re.IGNORECASE)),
)


@dataclass(frozen=True)
class Cell:
    """One tensor's place on the radar and the statistics it is coloured by."""

    key: str
    layer: str
    absmax: float | None
    std: float | None
    nan: int
    inf: int
    numel: int
    findings: tuple[str, ...] = ()
    """Codes of the weights-health findings about this tensor (not `info` ones)."""

    @property
    def nonfinite(self) -> float | None:
        """NaN and Inf elements as a share of all elements."""
        return (self.nan + self.inf) / self.numel if self.numel else None

    def value(self, metric: str) -> float | None:
        """The metric as coloured: log10 for absmax and std (-inf for zero), else the share."""
        if metric == NONFINITE:
            return self.nonfinite
        raw = self.absmax if metric == ABSMAX else self.std
        if raw is None or not math.isfinite(raw):
            return None
        return math.log10(raw) if raw > 0 else -math.inf


@dataclass(frozen=True)
class Row:
    """One weight kind: its key pattern (`*` for the layer), a short label and its family."""

    pattern: str
    label: str
    kind: str


@dataclass
class Radar:
    """Rows of weight kinds by columns of depth; `cells[(row, column)]`."""

    rows: list[Row] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    cells: dict[tuple[int, int], Cell] = field(default_factory=dict)
    reason: str = ""
    """Why the radar is empty, in words; "" when it has cells."""
    places: dict[str, tuple[int, int]] = field(default_factory=dict)
    """(row, column) of each key on the radar."""
    _scales: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False,
                                                    compare=False)

    @property
    def empty(self) -> bool:
        """True when no key names a layer (nothing to lay along the depth)."""
        return not self.cells

    def locate(self, key: str) -> tuple[int, int] | None:
        """(row, column) of the tensor `key`, or None when it is not on the radar."""
        return self.places.get(key)

    def scale(self, metric: str) -> tuple[float, float]:
        """(low, high) of the metric's finite values over the whole radar."""
        if metric == NONFINITE:
            return 0.0, 1.0
        if metric not in self._scales:  # every cell's colour asks; the cells never change
            values = [v for c in self.cells.values()
                      if (v := c.value(metric)) is not None and math.isfinite(v)]
            self._scales[metric] = (min(values), max(values)) if values else (0.0, 0.0)
        return self._scales[metric]

    def position(self, metric: str, value: float | None) -> float | None:
        """Where `value` sits on the colour scale, 0 (dark) to 1 (bright); None for no value."""
        if value is None:
            return None
        if metric == NONFINITE:
            return 0.0 if value <= 0 else NONFINITE_FLOOR + (1 - NONFINITE_FLOOR) * value
        lo, hi = self.scale(metric)
        if value == -math.inf or hi <= lo:
            return 0.0
        return min(1.0, max(0.0, (value - lo) / (hi - lo)))

    def brightest(self, metric: str, row: int) -> int | None:
        """The column of the row's largest value of the metric."""
        found = [(v, col) for (r, col), cell in self.cells.items()
                 if r == row and (v := cell.value(metric)) is not None]
        return max(found)[1] if found else None

    def flagged(self) -> list[tuple[int, int]]:
        """The cells a weights-health finding names, in row then column order."""
        return sorted(rc for rc, cell in self.cells.items() if cell.findings)

    def legend(self, metric: str) -> str:
        """The colour scale in words, with the range it spans on this radar."""
        if metric == NONFINITE:
            return ("Colour: share of NaN/Inf elements, dark for none; any NaN or Inf is at "
                    f"least {NONFINITE_FLOOR:.0%} up the scale, all of them brightest.")
        lo, hi = self.scale(metric)
        scale = f"from {10 ** lo:.3g} (dark) to {10 ** hi:.3g} (bright) on a log scale"
        if metric == STD:  # nothing here computes a std: the loader's, as its tooltip says
            return (f"Colour: {METRICS[metric]}, as reported by the jailed loader (not "
                    f"checked here), {scale}.")
        return (f"Colour: {METRICS[metric]}, {scale}; a flipped exponent bit lights up tens "
                "of orders above its row.")

    def describe(self, row: int, column: int) -> str:
        """A cell's key, place and exact statistics, one per line (its tooltip)."""
        cell = self.cells.get((row, column))
        if cell is None:
            return f"{self.rows[row].label}: no tensor at layer {self.columns[column]}"
        where = (f"layer {cell.layer}" if cell.layer not in (BEFORE, AFTER)
                 else f"{'before' if cell.layer == BEFORE else 'after'} the layers")
        share = cell.nonfinite
        lines = [cell.key, f"{where} · {self.rows[row].kind}",
                 f"absmax {_number(cell.absmax)}", f"std {_number(cell.std)} (the loader's)",
                 f"NaN {cell.nan:,} · Inf {cell.inf:,} of {cell.numel:,}"
                 + (f" ({share:.3g})" if share else "")]
        lines += [f"weights health: {code}" for code in cell.findings]
        return "\n".join(lines)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.6g}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def kind_of(label: str) -> str:
    """The family of a weight kind from its key: embedding, norm, attention, mlp, head, other."""
    return next((kind for kind, regex in _KINDS if regex.search(label)), "other")


def build_radar(tensors: Iterable[dict[str, Any]],
                findings: Iterable[HealthFinding] = ()) -> Radar:
    """The radar of the inspect contract's tensor records and its health `findings`."""
    weights = [t for t in tensors if is_model_weight(str(t.get("key") or ""), t.get("dtype"))]
    flagged: dict[str, list[str]] = {}
    for f in findings:
        if f.severity != HealthSeverity.INFO:
            flagged.setdefault(f.key, []).append(str(f.code))
    placed: list[tuple[str, str | None, dict[str, Any]]] = []
    layers: set[int] = set()
    for rec in weights:
        key = str(rec.get("key") or "")
        match = _LAYER.search(key)
        if match is None:
            placed.append((key, None, rec))
            continue
        layers.add(int(match.group(1)))
        start, end = match.span(1)
        placed.append((f"{key[:start]}*{key[end:]}", str(int(match.group(1))), rec))
    if len(layers) < MIN_LAYERS:
        return Radar(reason="No layered weights: the radar lays tensors along the model's depth "
                            "by the layer number in their keys (layers.0, h.1, block.2, ...), "
                            "and this file's keys name " + (
                                "one layer only." if layers else "none."))
    first = next(i for i, (_, layer, _) in enumerate(placed) if layer is not None)
    # Weights outside the layers go before them when the state dict lists them first.
    placed = [(p, layer if layer is not None else BEFORE if i < first else AFTER, rec)
              for i, (p, layer, rec) in enumerate(placed)]
    columns = [BEFORE] * (first > 0) + [str(n) for n in sorted(layers)]
    columns += [AFTER] * any(layer == AFTER for _, layer, _ in placed)
    column_of = {label: i for i, label in enumerate(columns)}

    layered = {p for p, layer, _ in placed if layer not in (BEFORE, AFTER)}
    tails = {p: p.partition("*.")[2] or p for p in layered}
    unique_tails = len(set(tails.values())) == len(layered)
    rank = {BEFORE: 0, AFTER: 2}
    radar = Radar(columns=columns)
    row_of: dict[str, int] = {}
    # Rows: weights before the layers, the layers' kinds, then those after, each in key order.
    for pattern, layer, rec in sorted(placed, key=lambda p: rank.get(p[1], 1)):
        if pattern not in row_of:
            label = tails[pattern] if pattern in layered and unique_tails else pattern
            row_of[pattern] = len(radar.rows)
            radar.rows.append(Row(pattern, label, kind_of(label)))
        key = str(rec.get("key"))
        radar.places[key] = place = (row_of[pattern], column_of[layer])
        radar.cells[place] = Cell(
            key=key, layer=layer, absmax=_float(rec.get("absmax")), std=_float(rec.get("std")),
            nan=_count(rec.get("nan")), inf=_count(rec.get("inf")),
            numel=_count(rec.get("numel")), findings=tuple(flagged.get(key, ())))
    return radar
