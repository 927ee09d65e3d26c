"""Small model factories for consistency tests and the GPU check: the user's "own code"."""

from __future__ import annotations

import torch
from torch import nn


def tiny_mlp(width: int = 32, depth: int = 2, classes: int = 10) -> nn.Module:
    """An MLP over 16 features: Linear/GELU blocks, LayerNorm, a classifier head."""
    layers: list[nn.Module] = [nn.Linear(16, width), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers += [nn.LayerNorm(width), nn.Linear(width, classes)]
    return nn.Sequential(*layers)


class TinyConvNet(nn.Module):
    """Conv + BatchNorm + pooling; returns logits and features (a dict output)."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return {"logits": self.head(features), "features": features}
