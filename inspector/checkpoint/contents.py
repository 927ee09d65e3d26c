"""What a loaded checkpoint holds, in a few numbers: tensors, parameters, bytes, dtype mix, and
for a training checkpoint where it stands (epoch, step, optimizer groups and learning rates).

Works on the inspect contract's tensor records and object leaves, typed (`TensorStats`,
`ObjectLeaf`; dotted keys), so the GUI, the CLI and the report can all say it the same way; no
torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats

_PROGRESS_KEYS = ("epoch", "global_step", "step", "iteration")
_LR = re.compile(r"(?:^|\.)param_groups\.(\d+)\.lr$")
_OPTIMIZER_STATE = re.compile(r"(?:^|\.)(?:optimizer|optimizers(?:\.\d+)?|optimizer_states"
                              r"(?:\.\d+)?)\.state\.")
_SCHEDULER = re.compile(r"(?:^|\.)(?:lr_scheduler|lr_schedulers|scheduler)s?(?:\.|$)")
_SCALER = re.compile(r"(?:^|\.)(?:scaler|grad_scaler|amp)(?:\.|$)")


@dataclass
class DtypeTotal:
    """Tensors, elements and bytes of one dtype."""

    dtype: str
    tensors: int
    elements: int
    bytes: int


def tally_dtypes(rows: Iterable[tuple[str, int, int]]) -> list[DtypeTotal]:
    """Totals per dtype of (dtype, elements, bytes) rows, the most bytes first."""
    by_dtype: dict[str, DtypeTotal] = {}
    for dtype, elements, nbytes in rows:
        total = by_dtype.setdefault(dtype, DtypeTotal(dtype, 0, 0, 0))
        total.tensors += 1
        total.elements += elements
        total.bytes += nbytes
    return sorted(by_dtype.values(), key=lambda d: d.bytes, reverse=True)


UNIQUE_WORD = "as reported by the jailed loader, not checked here"
"""Whose word the unique-storage figures are: the loader's count of the storages it rebuilt,
which nothing in the user's process reads (a torch file's storages are its pickle's)."""


@dataclass
class Contents:
    """Counts over the tensors, and what the training state says, if any."""

    tensors: int
    parameters: int
    bytes: int
    unique_parameters: int | None
    """Elements counted once per storage: the loader's word (`unique_word`)."""
    unique_bytes: int | None
    by_dtype: list[DtypeTotal]
    """Largest first."""
    optimizer_state_tensors: int = 0
    progress: dict[str, str] = field(default_factory=dict)
    """epoch / step / ... as the file spells them (shallowest key wins)."""
    learning_rates: list[str] = field(default_factory=list)
    """One per optimizer parameter group, in group order."""
    has_scheduler: bool = False
    has_scaler: bool = False

    @property
    def unique_word(self) -> str | None:
        """Whose word the unique figures are (`UNIQUE_WORD`), where there are some."""
        return None if self.unique_parameters is None else UNIQUE_WORD

    @property
    def dtypes(self) -> list[tuple[str, int]]:
        """(dtype, bytes), largest first."""
        return [(d.dtype, d.bytes) for d in self.by_dtype]

    @property
    def is_training_checkpoint(self) -> bool:
        """Optimizer, scheduler or progress counters beside the weights."""
        return bool(self.optimizer_state_tensors or self.learning_rates or self.progress
                    or self.has_scheduler)


def summarize(tensors: Iterable[TensorStats], objects: Iterable[ObjectLeaf] = (),
              unique: dict[str, Any] | None = None) -> Contents:
    """Contents of a checkpoint from its tensor records, object leaves and unique storage."""
    tensors = list(tensors)
    by_dtype = tally_dtypes((str(t.dtype or "?"), int(t.numel or 0), int(t.nbytes or 0))
                            for t in tensors)
    out = Contents(
        tensors=len(tensors),
        parameters=sum(d.elements for d in by_dtype),
        bytes=sum(d.bytes for d in by_dtype),
        unique_parameters=(unique or {}).get("numel"),
        unique_bytes=(unique or {}).get("nbytes"),
        by_dtype=by_dtype,
        optimizer_state_tensors=sum(bool(_OPTIMIZER_STATE.search(t.key)) for t in tensors),
    )
    keys = [t.key for t in tensors]
    lrs: dict[int, str] = {}
    depth: dict[str, int] = {}
    for o in objects:
        key = o.key
        keys.append(key)
        leaf = key.rpartition(".")[2]
        if leaf in _PROGRESS_KEYS and key.count(".") < depth.get(leaf, 3):
            out.progress[leaf] = str(o.repr)
            depth[leaf] = key.count(".")
        match = _LR.search(key)
        if match:
            lrs.setdefault(int(match.group(1)), str(o.repr))
    out.learning_rates = [lrs[i] for i in sorted(lrs)]
    out.has_scheduler = any(_SCHEDULER.search(k) for k in keys)
    out.has_scaler = any(_SCALER.search(k) for k in keys)
    return out


def training_summary(c: Contents) -> str:
    """Where a training checkpoint stands, in one line; '' for weights alone."""
    if not c.is_training_checkpoint:
        return ""
    parts = [f"{k} {v}" for k, v in c.progress.items()]
    if c.learning_rates:
        groups = len(c.learning_rates)
        parts.append(f"optimizer: {groups} parameter group{'s' if groups != 1 else ''}, "
                     f"lr {', '.join(c.learning_rates)}")
    if c.optimizer_state_tensors:
        parts.append(f"{c.optimizer_state_tensors} optimizer state tensors")
    if c.has_scheduler:
        parts.append("LR scheduler state")
    if c.has_scaler:
        parts.append("AMP grad-scaler state")
    return " · ".join(parts)
