"""Can training resume from this checkpoint? What a resume needs, and whether each is saved.

Read from the inspect contract's records (`TensorStats`, `ObjectLeaf`) and
`checkpoint.contents`' training summary, no torch.
Required: model weights, optimizer state (whose parameters must match the model's) and the
epoch/step counter; a run that used them also needs its LR scheduler and AMP grad scaler, and
an exactly reproducible resume needs the RNG state, so those are listed but never required.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from inspector.checkpoint.architecture import (
    Architecture,
    guess_architecture,
    model_weights,
    unique_weights,
)
from inspector.checkpoint.contents import Contents, summarize
from inspector.checkpoint.optim_types import scheduler_types
from inspector.checkpoint.optimizer_map import OptimizerParams, map_optimizers
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats
from inspector.core.vocabulary import ResumeStatus

PRESENT, MISSING, MISMATCH = ResumeStatus.PRESENT, ResumeStatus.MISSING, ResumeStatus.MISMATCH
_WORDS = {PRESENT: "saved", MISMATCH: "does not match the model", MISSING: "missing"}
_PARAM_ID = re.compile(r"^(.*)param_groups\.\d+\.params\.\d+$")
_STATE_INDEX = re.compile(r"^state\.(\d+)\.")
_LAST_EPOCH = re.compile(r"sched[^.]*(?:\.\d+)?\.last_epoch$")
_SCALE = re.compile(r"(?:^|\.)(?:grad_)?scaler\.scale$")
_RANDOM_STATE = re.compile(r"(?:^|\.)(?:random_state|generator_state)(?:\.|$)")


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

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResumeChecklist:
        """Back from `to_json()`'s dict; keys a later version adds are ignored."""
        names = [f.name for f in fields(ResumeItem)]
        return cls([ResumeItem(**{n: i[n] for n in names if n in i}) for i in data["items"]])

    def to_json(self) -> dict[str, Any]:
        """The `resume` contract: ready, and the items."""
        return {"ready": self.ready, "items": [i.to_json() for i in self.items]}


def resume_checklist(contents: Contents, tensors: Iterable[TensorStats],
                     objects: Iterable[ObjectLeaf]) -> ResumeChecklist:
    """What a resume from this checkpoint needs and whether the file holds it."""
    tensors, objects = list(tensors), list(objects)
    params = unique_weights(model_weights(tensors))
    numel = sum(int(t.numel or 0) for t in params)
    keys = [r.key for r in [*tensors, *objects]]
    progress = " · ".join(f"{k} {v}" for k, v in contents.progress.items())
    # A substring test first: a regex search costs several microseconds a key.
    rng = [k for k in keys if "rng" in k.lower() or ("_state" in k and _RANDOM_STATE.search(k))]
    return ResumeChecklist([
        ResumeItem("model_weights", "Model weights", PRESENT if params else MISSING, True,
                   f"{_tensors(len(params))}, {numel:,} parameters" if params
                   else "no model weights beside the training state"),
        _optimizer_item(contents, tensors, objects, params),
        ResumeItem("progress", "Epoch / step", PRESENT if progress else MISSING, True,
                   progress or "no epoch or step counter: a resume would start counting at 0"),
        _optional("lr_scheduler", "LR scheduler", contents.has_scheduler,
                  " · ".join(filter(None, [_types(scheduler_types(tensors, objects)),
                                           _value(objects, _LAST_EPOCH, "last_epoch")])),
                  "a resumed schedule restarts from its first step (fine for a constant LR)"),
        _optional("grad_scaler", "AMP grad scaler", contents.has_scaler,
                  _value(objects, _SCALE, "scale"),
                  "needed only for float16 mixed precision"),
        _optional("rng_state", "RNG state", bool(rng),
                  ", ".join(rng[:3]) + (" …" if rng[3:] else ""),
                  "data order and dropout will differ from an unbroken run"),
    ])


def _optional(code: str, label: str, present: bool, found: str, absent: str) -> ResumeItem:
    """An item only some runs need: what was found, or what its absence means."""
    return ResumeItem(code, label, PRESENT if present else MISSING, False,
                      (found or "saved") if present else absent)


def _value(objects: list[ObjectLeaf], pattern: re.Pattern[str], name: str) -> str:
    """'name VALUE' from the first object whose key matches, '' if none does."""
    found = next((o for o in objects if pattern.search(o.key)), None)
    return f"{name} {found.repr}" if found else ""


def _optimizer_item(contents: Contents, tensors: list[TensorStats], objects: list[ObjectLeaf],
                    params: list[TensorStats]) -> ResumeItem:
    """Optimizer state, and whether it tracks as many parameters as the model has."""
    if not (contents.optimizer_state_tensors or contents.learning_rates):
        return ResumeItem("optimizer_state", "Optimizer state", MISSING, True,
                          "a resume would restart the optimizer's moments from zero")
    listed: dict[str, int] = {}
    for o in objects:
        match = _PARAM_ID.match(o.key)
        if match:
            listed[match.group(1)] = listed.get(match.group(1), 0) + 1
    # Per parameter, the largest state tensor (Adam's exp_avg, SGD's momentum) has its shape.
    largest: dict[tuple[str, int], int] = {}
    for t in tensors:
        key = t.key
        for prefix in listed:
            match = _STATE_INDEX.match(key[len(prefix):]) if key.startswith(prefix) else None
            if match:
                slot = (prefix, int(match.group(1)))
                largest[slot] = max(largest.get(slot, 0), int(t.numel or 0))
    groups = len(contents.learning_rates)
    detail = f"{groups} parameter group{'s' if groups != 1 else ''}"
    if not listed:
        return ResumeItem("optimizer_state", "Optimizer state", PRESENT, True,
                          detail + "; which parameters it tracks is not saved")
    count, numel = sum(listed.values()), sum(int(t.numel or 0) for t in params)
    elements = sum(largest.values())
    matches = count == len(params) and (len(largest) != count or elements == numel)
    if not matches:
        detail += (f" · tracks {_tensors(count)} ({elements:,} elements of state), "
                   f"the model has {len(params):,} ({numel:,}): frozen parameters, or state "
                   "saved for another model")
    else:
        detail += f" · tracks the model's {_tensors(count)} · " + (
            f"per-parameter state for {len(largest):,} ({elements:,} elements)" if largest
            else "no per-parameter state (saved before the first step, or plain SGD)")
    return ResumeItem("optimizer_state", "Optimizer state", PRESENT if matches else MISMATCH,
                      True, detail)


def _types(found: dict[str, str]) -> str:
    """The classes named, in order, each once ('' when none is known)."""
    return ", ".join(dict.fromkeys(t for t in found.values() if t))


def _tensors(n: int) -> str:
    return f"{n:,} parameter tensor{'s' if n != 1 else ''}"


def headline(checklist: ResumeChecklist) -> str:
    """'Ready to resume' or what stops it, in words."""
    if checklist.ready:
        return "Ready to resume: weights, optimizer state and progress are saved"
    return "Not ready to resume: " + ", ".join(
        f"{i.label.lower()} {status_word(i)}" for i in checklist.items
        if i.required and i.status != PRESENT)


def item_label(item: ResumeItem) -> str:
    """The item's name, marked (optional) where a run may do without it."""
    return item.label + ("" if item.required else " (optional)")


def alarming(item: ResumeItem) -> bool:
    """An optional item that is not saved is information, not a fault: no alarm colour."""
    return item.required or item.status != MISSING


def status_word(item: ResumeItem) -> str:
    """saved, missing, does not match the model, or (optional items) not saved."""
    return _WORDS[item.status] if alarming(item) else "not saved"


def resume_text(checklist: ResumeChecklist) -> str:
    """The checklist as plain text, one row per line (for screen readers and copying)."""
    return "\n".join([headline(checklist)] + [f"{item_label(i)}: {status_word(i)} — {i.detail}"
                                               for i in checklist.items])


def holds_training_state(contents: Contents) -> bool:
    """Optimizer, scheduler or grad-scaler state beside the weights: what a resume restores.
    An epoch or step counter alone is bookkeeping saved beside weights (the built-in sample
    keeps one), not a training checkpoint whose resume could fail."""
    return bool(contents.optimizer_state_tensors or contents.learning_rates
                or contents.has_scheduler or contents.has_scaler)


@dataclass
class ModelFacts:
    """The inspect contract's `architecture`, `resume` and `optimizer_params`."""

    architecture: Architecture | None
    """None without tensors."""
    resume: ResumeChecklist | None
    """None for weights alone, as are `optimizer_params`."""
    optimizer_params: list[OptimizerParams] | None

    def to_json(self) -> dict[str, Any]:
        """The three keys of the contract."""
        return {"architecture": _json(self.architecture), "resume": _json(self.resume),
                "optimizer_params": None if self.optimizer_params is None
                else [o.to_json() for o in self.optimizer_params]}


def _json(part: Architecture | ResumeChecklist | None) -> dict[str, Any] | None:
    return part.to_json() if part is not None else None


def model_facts(tensors: list[TensorStats], objects: list[ObjectLeaf]) -> ModelFacts:
    """What the tensor records and object leaves say of the model and its training."""
    contents = summarize(tensors, objects)
    training = bool(tensors) and holds_training_state(contents)
    return ModelFacts(guess_architecture(tensors) if tensors else None,
                      resume_checklist(contents, tensors, objects) if training else None,
                      map_optimizers(tensors, objects) if training else None)
