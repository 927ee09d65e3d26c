"""Can training resume from this checkpoint? What a resume needs, and whether each is saved.

Read from the inspect contract's records and `core.contents`' training summary, no torch.
Required: model weights, optimizer state (whose parameters must match the model's) and the
epoch/step counter; a run that used them also needs its LR scheduler and AMP grad scaler, and
an exactly reproducible resume needs the RNG state, so those are listed but never required.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inspector.core.architecture import model_weights, unique_weights
from inspector.core.contents import Contents

PRESENT, MISSING, MISMATCH = "present", "missing", "mismatch"
_PARAM_ID = re.compile(r"^(.*)param_groups\.\d+\.params\.\d+$")
_STATE_INDEX = re.compile(r"^state\.(\d+)\.")
_RNG = re.compile(r"(?:^|\.)(?:[^.]*rng[^.]*|random_state|generator_state)(?:\.|$)", re.I)


@dataclass
class ResumeItem:
    """One thing a resume needs."""

    code: str
    label: str
    status: str
    """present, missing, or mismatch (saved, but not for this model)."""
    required: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        """The item as JSON."""
        return {"code": self.code, "label": self.label, "status": self.status,
                "required": self.required, "detail": self.detail}


@dataclass
class ResumeChecklist:
    """Every item a resume needs, in the order a person checks them."""

    items: list[ResumeItem] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Every required item is present and matches the model."""
        return all(i.status == PRESENT for i in self.items if i.required)

    def to_json(self) -> dict[str, Any]:
        """The `resume` contract: ready, and the items."""
        return {"ready": self.ready, "items": [i.to_json() for i in self.items]}


def resume_checklist(contents: Contents, tensors: Iterable[dict[str, Any]],
                     objects: Iterable[dict[str, Any]]) -> ResumeChecklist:
    """What a resume from this checkpoint needs and whether the file holds it."""
    tensors, objects = list(tensors), list(objects)
    params = unique_weights(model_weights(tensors))
    numel = sum(int(t.get("numel") or 0) for t in params)
    keys = [str(r.get("key") or "") for r in tensors + objects]
    progress = " · ".join(f"{k} {v}" for k, v in contents.progress.items())
    return ResumeChecklist([
        ResumeItem("model_weights", "Model weights", PRESENT if params else MISSING, True,
                   f"{len(params):,} parameter tensors, {numel:,} parameters" if params
                   else "no model weights beside the training state"),
        _optimizer_item(contents, tensors, objects, params),
        ResumeItem("progress", "Epoch / step", PRESENT if progress else MISSING, True,
                   progress or "no epoch or step counter: a resume would start counting at 0"),
        ResumeItem("lr_scheduler", "LR scheduler", PRESENT if contents.has_scheduler else MISSING,
                   False, "saved" if contents.has_scheduler
                   else "not saved: a resumed schedule restarts (fine for a constant LR)"),
        ResumeItem("grad_scaler", "AMP grad scaler", PRESENT if contents.has_scaler else MISSING,
                   False, "saved" if contents.has_scaler
                   else "not saved: needed only for float16 mixed precision"),
        ResumeItem("rng_state", "RNG state", PRESENT if any(map(_RNG.search, keys)) else MISSING,
                   False, "saved" if any(map(_RNG.search, keys))
                   else "not saved: data order and dropout will differ from an unbroken run"),
    ])


def _optimizer_item(contents: Contents, tensors: list[dict], objects: list[dict],
                    params: list[dict]) -> ResumeItem:
    """Optimizer state, and whether it tracks as many parameters as the model has."""
    if not (contents.optimizer_state_tensors or contents.learning_rates):
        return ResumeItem("optimizer_state", "Optimizer state", MISSING, True,
                          "not saved: a resume would restart the optimizer's moments from zero")
    listed: dict[str, int] = {}
    for o in objects:
        match = _PARAM_ID.match(str(o.get("key") or ""))
        if match:
            listed[match.group(1)] = listed.get(match.group(1), 0) + 1
    # Per parameter, the largest state tensor (Adam's exp_avg, SGD's momentum) has its shape.
    largest: dict[tuple[str, int], int] = {}
    for t in tensors:
        key = str(t.get("key") or "")
        for prefix in listed:
            match = _STATE_INDEX.match(key[len(prefix):]) if key.startswith(prefix) else None
            if match:
                slot = (prefix, int(match.group(1)))
                largest[slot] = max(largest.get(slot, 0), int(t.get("numel") or 0))
    groups = len(contents.learning_rates)
    detail = f"{groups} parameter group{'s' if groups != 1 else ''}"
    if not listed:
        return ResumeItem("optimizer_state", "Optimizer state", PRESENT, True,
                          detail + "; which parameters it tracks is not saved")
    count, numel = sum(listed.values()), sum(int(t.get("numel") or 0) for t in params)
    detail += f" tracking {count:,} parameter tensors; the model has {len(params):,}"
    if largest:
        detail += (f"; per-parameter state for {len(largest):,} of them "
                   f"({sum(largest.values()):,} elements, the model {numel:,})")
    matches = count == len(params) and (len(largest) != count or sum(largest.values()) == numel)
    if not matches:
        detail += ": frozen parameters, or state saved for another model"
    return ResumeItem("optimizer_state", "Optimizer state", PRESENT if matches else MISMATCH,
                      True, detail)

