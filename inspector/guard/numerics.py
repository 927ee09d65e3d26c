"""The step's numbers: loss and global gradient norm with one device sync, and on an alarm the
parameters and the samples to blame.

Per-parameter norms come from the fused multi-tensor kernel (`torch._foreach_norm`, what
`torch.nn.utils.get_total_norm` uses), stay on the device, and are reduced there to the global
norm; the loss and the norm are stacked and read back with one `.tolist()`, the step's one sync.
The per-parameter norms are kept (on the device) for the alarm path only. On a non-finite alarm,
`bad_samples` checks the halted batch sample by sample: each input row, and each sample's own
loss when the caller can give one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from inspector.guard.scene import iter_tensors
from inspector.guard.weights.fingerprint import local


@dataclass
class StepNumbers:
    """One step's loss and global grad norm, as Python floats, with the device-side norms."""

    loss: float
    grad_norm: float
    names: list[str]
    norms: list[torch.Tensor]
    extra: list[float] = field(default_factory=list)
    """The values of the `extra` device vector, read back in the same sync."""

    def nonfinite_params(self, limit: int = 8) -> list[str]:
        """The first parameters (in the model's order) whose gradient holds NaN or Inf."""
        if not self.norms:
            return []
        bad = ~torch.isfinite(torch.stack([n.float().cpu() for n in self.norms]))
        return [self.names[i] for i in bad.nonzero().flatten().tolist()[:limit]]

    def worst_params(self, limit: int = 8) -> list[tuple[str, float]]:
        """The parameters with the largest gradient norms (NaN and Inf first)."""
        if not self.norms:
            return []
        values = torch.stack([n.float().cpu() for n in self.norms])
        key = torch.where(torch.isfinite(values), values, torch.full_like(values, math.inf))
        order = torch.argsort(key, descending=True)[:limit].tolist()
        return [(self.names[i], float(values[i])) for i in order]


def named_grads(model: nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    """The parameters that hold a gradient, named as `named_parameters` names them (a sharded
    one's local shard: under FSDP each rank judges the gradient it holds)."""
    names, grads = [], []
    for name, param in model.named_parameters():
        if param.grad is not None:
            names.append(name)
            grads.append(local(param.grad))
    return names, grads


def step_numbers(loss: torch.Tensor | float, model: nn.Module,
                 extra: Callable[[], torch.Tensor] | None = None) -> StepNumbers:
    """Loss and global L2 grad norm, computed on the device and read back with one sync,
    together with the vector `extra()` returns (the weights' reading) when one is given; it is
    called once the gradients are reduced, so a reading in the background overlaps that."""
    names, grads = named_grads(model)
    loss_t = loss.detach().reshape(()).float() if isinstance(loss, torch.Tensor) else None
    device = loss_t.device if loss_t is not None else (grads[0].device if grads else None)
    norms = _norms(grads)
    if norms:
        total = torch.linalg.vector_norm(
            torch.stack([n.to(device=device, dtype=torch.float32) for n in norms]))
    else:
        total = torch.zeros((), device=device)
    if loss_t is None:
        loss_t = torch.tensor(float(loss), device=total.device)
    head = torch.stack([loss_t.double(), total.double()])
    more = extra() if extra is not None else None
    if more is not None and more.numel():
        head = torch.cat([head, more.to(head.device, torch.float64)])
    loss_v, norm_v, *rest = head.tolist()
    return StepNumbers(loss_v, norm_v, names, norms, rest)


def _norms(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-tensor L2 norms, one fused `_foreach_norm` per (device, dtype) group."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, g in enumerate(grads):
        groups.setdefault((g.device, g.dtype), []).append(i)
    out: list[torch.Tensor | None] = [None] * len(grads)
    for members in groups.values():
        dense = [i for i in members if not grads[i].is_sparse]
        for i in members:
            if grads[i].is_sparse:
                out[i] = torch.linalg.vector_norm(grads[i].coalesce().values())
        for i, norm in zip(dense, torch._foreach_norm([grads[i] for i in dense], 2.0),
                           strict=True):
            out[i] = norm
    return [n for n in out if n is not None]


def bad_samples(batch: Any, ids: Sequence | None,
                sample_losses: Callable[[], torch.Tensor] | None = None) -> list:
    """The ids (positions when none are known) of the batch's samples whose input rows hold
    NaN or Inf, or whose own loss (`sample_losses()`: one value per sample) is not finite."""
    n = len(ids) if ids is not None else None
    rows: set[int] = set()
    for t in iter_tensors(batch):
        if t.dim() == 0 or not t.is_floating_point() or (n is not None and t.shape[0] != n):
            continue
        n = t.shape[0]
        finite = torch.isfinite(t.detach().reshape(n, -1)).all(dim=1)
        rows.update((~finite).nonzero().flatten().tolist())
    if sample_losses is not None:
        with torch.no_grad():
            losses = sample_losses().detach().reshape(-1)
        if n is None or losses.numel() == n:
            rows.update((~torch.isfinite(losses)).nonzero().flatten().tolist())
    names = list(ids) if ids is not None else list(range(max(rows, default=-1) + 1))
    return [names[i] for i in sorted(rows)]
