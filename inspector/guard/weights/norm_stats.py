"""Normalisation layers' running statistics changed where no forward wrote them.

A forward in training mode writes a BatchNorm's `running_mean` and `running_var` and counts
itself in `num_batches_tracked`; nothing else does (an optimizer steps parameters only, an eval
forward reads the statistics). So the statistics as the step's forward left them (copied at
each `guard.step` reading, one fused copy) must be the ones a save finds unless the count moved:
a running mean whose sign bit flipped between the last step and a save keeps its norm and
largest |value|, passes every other rule, and shifts that channel's every eval output.
"""

from __future__ import annotations

import torch
from torch import nn


class NormStats:
    """The running statistics of a model's norm layers that track them, and their copies."""

    def __init__(self, model: nn.Module) -> None:
        from torch.nn.modules.batchnorm import _NormBase

        self.names: list[str] = []
        self.stats: list[torch.Tensor] = []
        self.counts: list[torch.Tensor] = []
        """Each statistic's layer's `num_batches_tracked`, in the same order."""
        for name, m in model.named_modules():
            if not (isinstance(m, _NormBase) and m.track_running_stats):
                continue
            for leaf in ("running_mean", "running_var"):
                t = getattr(m, leaf, None)
                count = getattr(m, "num_batches_tracked", None)
                if isinstance(t, torch.Tensor) and isinstance(count, torch.Tensor):
                    self.names.append(f"{name}.{leaf}" if name else leaf)
                    self.stats.append(t)
                    self.counts.append(count)
        self.kept = [t.detach().clone() for t in self.stats + self.counts]

    def keep(self) -> None:
        """Copy the statistics and counts as they are now (one fused copy)."""
        if self.kept:
            torch._foreach_copy_(self.kept, [t.detach() for t in self.stats + self.counts])

    def moved(self) -> list[str]:
        """The statistics whose bytes differ from the copy while their layer's count does not
        (a sync: the save's health check only)."""
        n = len(self.stats)
        out = []
        for i, name in enumerate(self.names):
            same_count = bool(torch.equal(self.counts[i], self.kept[n + i]))
            if same_count and not _same_bytes(self.stats[i], self.kept[i]):
                out.append(name)
        return out


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same bytes (NaN equal to itself)."""
    view = torch.int64 if a.element_size() == 8 else (
        torch.int32 if a.element_size() == 4 else torch.int16 if a.element_size() == 2
        else torch.uint8)
    return bool(torch.equal(a.detach().reshape(-1).view(view), b.reshape(-1).view(view)))
