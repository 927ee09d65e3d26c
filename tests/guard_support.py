"""Tiny models and loops the guard's tests train, on the CPU, built in code."""

from __future__ import annotations

import torch
from torch import nn

from inspector.core import journal


def tiny_model(seed: int = 0) -> nn.Module:
    """A two-layer MLP; the same weights for the same seed."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def batch(step: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's batch, the same for the same step."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(16, 4, generator=g)
    return x * scale, x.sum(dim=1, keepdim=True)


def closure_for(model: nn.Module, optimizer: torch.optim.Optimizer, data):
    """The step as a closure: zero_grad, forward, backward, the loss."""
    def closure() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        x, y = data
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    return closure


def alarms(run_dir) -> list[dict]:
    """The guard.alarm records of a run's journal (which must be intact)."""
    read = journal.read(journal.journal_path(run_dir))
    assert read.intact, read.problems
    return [dict(e.record) for e in read.of_kind("guard.alarm")]
