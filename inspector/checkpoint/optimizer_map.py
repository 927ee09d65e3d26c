"""Which model parameter each piece of optimizer state belongs to, from the inspect records.

A `torch.optim` state dict keys per-parameter state by integer ids: they number the
parameters of `param_groups[0]["params"]`, then group 1's and so on, in the order the
optimizer was given them, which for `model.parameters()` is the model's parameter order. A
module's state dict lists its parameters, then its buffers, then its children's, so the
parameters are the state dict's tensors in order with the buffers taken out.

A record does not say whether a tensor is a parameter or a buffer, so they are told apart in
two steps. First, what is never a trainable parameter is dropped: BatchNorm's running
statistics and counter, integer and boolean tensors, training state, and a tensor tied to an
earlier one (`model.parameters()` yields a shared parameter once); see
`architecture.model_weights`. What remains may still hold buffers (a registered mask, a
rotary `inv_freq`) or frozen parameters the optimizer never saw, so the ids are matched to it
as a subsequence by shape: an id's state tensors other than `step` (Adam's `exp_avg` and
`exp_avg_sq`, SGD's `momentum_buffer`, ...) have its parameter's shape; an id with no state
yet fits any tensor. The matching is used only when it is the only one, which holds exactly
when the earliest and the latest matching agree (every matching lies between them, id by
id). When there is none (groups built out of model order, factored state such as
Adafactor's, state saved for another model) or more than one (a buffer or frozen parameter
shaped like its neighbour), the ids stay ids and `reason` says why. An optimizer built from
`named_parameters()` (torch 2.6 on) saves each group's `param_names`: those are used as
they are, with no matching. No torch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inspector.checkpoint.architecture import model_weights, unique_weights
from inspector.checkpoint.optim_types import optimizer_types
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats

_PARAM_ID = re.compile(r"^(.*?)param_groups\.(\d+)\.params\.(\d+)$")
_PARAM_NAME = re.compile(r"^(.*?)param_groups\.(\d+)\.param_names\.(\d+)$")
_STATE = re.compile(r"^state\.(\d+)\.(.+)$")
_STEP = "step"
_SHOWN = 3


@dataclass
class OptimizerParams:
    """One optimizer's ids and, where the shapes single them out, the parameter names."""

    optimizer: str
    """The optimizer state dict's dotted key ('optimizer', 'optimizer_states.0')."""
    ids: list[int]
    groups: list[int]
    """The param group of each id."""
    shapes: list[list[int] | None]
    """Each id's state shape; None when it has no state yet."""
    model: str | None = None
    """The top-level key of the state dict the names come from ('state_dict', 'model')."""
    names: list[str] = field(default_factory=list)
    """Per id, the name within `model` (as `named_parameters()` gives it); empty if unmapped."""
    reason: str = ""
    source: str = ""
    """Where the names come from: 'param_names' (saved by the optimizer) or 'shapes'."""
    type: str | None = None
    """The optimizer class its saved names show (`checkpoint.optim_types`), '' when they do not;
    None in a result written before the key existed (`to_json` leaves it out again)."""

    @property
    def mapped(self) -> bool:
        """Every id has a parameter name."""
        return bool(self.names)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OptimizerParams:
        """Back from `to_json()`'s dict; keys a later version adds are ignored."""
        params = data.get("params") or []
        return cls(data["optimizer"], [p["id"] for p in params], [p["group"] for p in params],
                   [p.get("shape") for p in params], data.get("model"),
                   [p["name"] for p in params] if data.get("mapped") else [],
                   data.get("reason") or "", data.get("source") or "", data.get("type"))

    def to_json(self) -> dict[str, Any]:
        """The inspect contract's `optimizer_params` entry."""
        typed = {} if self.type is None else {"type": self.type}
        return {"optimizer": self.optimizer, **typed, "model": self.model,
                "mapped": self.mapped, "reason": self.reason, "source": self.source,
                "params": [{"id": i, "group": g, "shape": s,
                            "name": self.names[n] if self.names else None,
                            "key": f"{self.model}.{self.names[n]}"
                            if self.names and self.model else None}
                           for n, (i, g, s) in enumerate(zip(self.ids, self.groups,
                                                             self.shapes, strict=True))]}

    def summary(self) -> str:
        """One line: the ids named, or why they are left as ids."""
        count = f"{len(self.ids)} parameter id{'s' if len(self.ids) != 1 else ''}"
        name = f"{self.optimizer} ({self.type})" if self.type else self.optimizer
        if not self.mapped:
            return f"{name}: {count} left as ids ({self.reason})"
        shown = ", ".join(f"{i} {n}" for i, n in zip(self.ids[:_SHOWN], self.names, strict=False))
        where = f"from {self.model}" if self.model else "by the optimizer"
        return (f"{name}: {count} named {where} ({shown}"
                + (", …" if len(self.ids) > _SHOWN else "") + ")")


def map_optimizers(tensors: Iterable[TensorStats], objects: Iterable[ObjectLeaf]
                   ) -> list[OptimizerParams]:
    """Every optimizer state dict in the records, its ids mapped to names where that is sure."""
    tensors, objects = list(tensors), list(objects)
    found: dict[str, list[tuple[int, int, int]]] = {}
    saved: dict[tuple[str, int, int], str] = {}
    for o in objects:
        key, text = o.key, str(o.repr)
        match = _PARAM_ID.match(key)
        if match and text.isdigit():
            found.setdefault(match.group(1), []).append(
                (int(match.group(2)), int(match.group(3)), int(text)))
        match = _PARAM_NAME.match(key)
        if match and text[:1] in "'\"":
            saved[(match.group(1), int(match.group(2)), int(match.group(3)))] = _text(text)
    candidates = _state_dicts(unique_weights(model_weights(tensors)))
    types = optimizer_types(tensors, objects)
    out = []
    for prefix, rows in found.items():
        rows.sort()
        ids = [i for _, _, i in rows]
        result = OptimizerParams(prefix.rstrip("."), ids, [g for g, _, _ in rows], [],
                                 type=types.get(prefix, ""))
        shapes, bad = _state_shapes(tensors, prefix)
        result.shapes = [shapes.get(i) for i in ids]
        names = [saved.get((prefix, g, n)) for g, n, _ in rows]
        if all(names):
            _named(result, [str(n) for n in names], candidates)
        elif bad:
            result.reason = (f"the state of id {bad} has tensors of different shapes "
                             "(factored state), so it does not give the parameter's shape")
        else:
            _name(result, candidates)
        out.append(result)
    return out


def _text(literal: str) -> str | None:
    """The string a repr spells (a record's `repr` of a str), None if it is not one."""
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _named(result: OptimizerParams, names: list[str],
           candidates: dict[str, list[tuple[str, list[int]]]]) -> None:
    """Names the optimizer saved; `model` is the one state dict that holds all of them."""
    result.names, result.source = names, "param_names"
    holders = [m for m, params in candidates.items() if set(names) <= {n for n, _ in params}]
    result.model = holders[0] if len(holders) == 1 else None


def _state_dicts(weights: list[TensorStats]) -> dict[str, list[tuple[str, list[int]]]]:
    """Model weights grouped by top-level key, in order: (name below that key, shape)."""
    groups: dict[str, list[tuple[str, list[int]]]] = {}
    for t in weights:
        top, dot, rest = t.key.partition(".")
        if dot:
            groups.setdefault(top, []).append((rest, [int(n) for n in t.shape or ()]))
    return groups


def _state_shapes(tensors: list[TensorStats], prefix: str
                  ) -> tuple[dict[int, list[int]], int | None]:
    """{id: shape of its state tensors}, and an id whose state tensors disagree (or None)."""
    shapes: dict[int, list[int]] = {}
    for t in tensors:
        key = t.key
        match = _STATE.match(key[len(prefix):]) if key.startswith(prefix) else None
        if not match or match.group(2) == _STEP:
            continue
        ident, shape = int(match.group(1)), [int(n) for n in t.shape or ()]
        if shapes.setdefault(ident, shape) != shape:
            return shapes, ident
    return shapes, None


def _name(result: OptimizerParams, candidates: dict[str, list[tuple[str, list[int]]]]) -> None:
    """Fill `result.names` from the one state dict whose parameters match uniquely."""
    matches, ambiguous = {}, []
    for model, params in candidates.items():
        shapes = [s for _, s in params]
        first = _earliest(result.shapes, shapes)
        if first is None:
            continue
        last = _latest(result.shapes, shapes)
        if first == last:
            matches[model] = [params[j][0] for j in first]
        else:
            ambiguous.append(model)
    if len(matches) == 1 and not ambiguous:
        result.model, result.names = next(iter(matches.items()))
        result.source = "shapes"
    elif matches or ambiguous:
        where = ", ".join(sorted([*matches, *ambiguous]))
        result.reason = (f"the shapes fit the tensors of {where} in more than one way "
                         "(buffers or frozen parameters shaped like parameters)")
    else:
        result.reason = ("no state dict in the checkpoint has parameters of these shapes in "
                         "this order")


def _fits(state: list[int] | None, shape: list[int]) -> bool:
    return state is None or state == shape


def _earliest(states: list[list[int] | None], shapes: list[list[int]]) -> list[int] | None:
    """For each id in order, the first tensor after the previous id's that fits it."""
    out, j = [], 0
    for state in states:
        while j < len(shapes) and not _fits(state, shapes[j]):
            j += 1
        if j == len(shapes):
            return None
        out.append(j)
        j += 1
    return out


def _latest(states: list[list[int] | None], shapes: list[list[int]]) -> list[int]:
    """For each id, the last tensor that still leaves room for the ids after it."""
    reverse = _earliest(states[::-1], shapes[::-1]) or []
    return [len(shapes) - 1 - j for j in reverse[::-1]]
