"""Strict JSON for every output: non-finite numbers are written as the strings "nan", "inf"
and "-inf" (a strict parser accepts them; `json.loads` of Python's default `NaN` token is a
common pipeline failure). Applies to `--json` output, worker events and JSON reports. And for
JSON read as a record (manifests, signatures): an object that gives a key twice is refused
(`no_repeats`), since two readers could take either value.
"""

from __future__ import annotations

import json
import math
from typing import Any

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
"""The documented string form of each non-finite number, and the float it stands for."""


def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A `json.loads` object hook that refuses a key given twice (ValueError)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"the key {key!r} is given twice")
        seen[key] = value
    return seen


def strict_float(value: float | None) -> float | str | None:
    """value itself when finite (or None), else "nan", "inf" or "-inf"."""
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def strict(obj: Any) -> Any:
    """A copy of a JSON-ready structure with every non-finite float in its string form."""
    if isinstance(obj, float):
        return strict_float(obj)
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps that never writes NaN or Infinity tokens."""
    try:
        # most documents hold no non-finite float: then the C encoder alone writes them (the
        # copy `strict` makes of 12,000 tensor records took twice as long as the encoding)
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(strict(obj), allow_nan=False, **kwargs)
