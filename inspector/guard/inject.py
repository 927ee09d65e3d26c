"""Fault injection, so every rule is proven to fire: one bit flipped in one element of one
parameter's weight or gradient, at a chosen step, on whatever device the tensor lives on.

The flip goes through an integer view of the tensor's own bytes (same width), so it is the exact
bit a memory or compute fault would flip, on the CPU or a GPU alike. `runs="first"` flips only
in the first run of the step, so a re-run of that step sees clean numbers (what a transient
hardware fault looks like); `runs="every"` flips in the re-run too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from inspector.core.errors import CodedError

_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class BitFlip:
    """Flip `bit` of element `index` (flat) of parameter `param`'s weight or grad at `step`."""

    step: int
    param: str
    index: int = 0
    bit: int = 30
    target: Literal["grad", "weight"] = "grad"
    runs: Literal["first", "every"] = "first"

    def due(self, step: int, rerun: bool) -> bool:
        """Whether this flip applies to this step's run (the first, or a re-run)."""
        return step == self.step and (not rerun or self.runs == "every")


def flip_bit(tensor: torch.Tensor, index: int, bit: int) -> None:
    """Flip one bit of one element in place, on the tensor's own device."""
    width = tensor.element_size()
    if bit < 0 or bit >= 8 * width:
        raise CodedError("bad-bit", f"bit {bit} is outside a {8 * width}-bit element")
    if index < 0 or index >= tensor.numel():
        raise CodedError("bad-index", f"element {index} is outside a tensor of {tensor.numel()}")
    flat = tensor.detach().view(-1).view(_INT_OF_WIDTH[width])
    mask = 1 << bit
    if mask >= 1 << (8 * width - 1):
        mask -= 1 << (8 * width)  # the sign bit, as the signed view spells it
    flat[index] ^= torch.tensor(mask, dtype=flat.dtype, device=flat.device)


def apply(flips: list[BitFlip], model: nn.Module, step: int, target: str, rerun: bool) -> int:
    """Apply every flip due now on `target` ("grad" or "weight"); how many were applied."""
    due = [f for f in flips if f.target == target and f.due(step, rerun)]
    if not due:
        return 0
    params = dict(model.named_parameters())
    for flip in due:
        param = params.get(flip.param)
        if param is None:
            raise CodedError("bad-param", f"no parameter named {flip.param!r} to flip a bit in")
        tensor = param.grad if target == "grad" else param.data
        if tensor is None:
            raise CodedError("no-grad", f"{flip.param} has no gradient at step {step} to flip")
        flip_bit(tensor, flip.index, flip.bit)
    return len(due)
