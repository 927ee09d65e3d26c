"""Weights a two-step optimizer changes on purpose between optimizer steps, told to the guard.

SAM (sharpness-aware minimisation) and its kin (ASAM, GSAM) move every weight to w + e in a
`first_step` outside any optimizer step, compute the gradients there, and restore w in
`second_step` before the base optimizer steps. The guard's check of the weights (their
fingerprint against the one the last optimizer step left) would name every perturbed tensor
`weights-changed`; `intended(guard, model)` around the first step says the change is meant:

    loss.backward()                        # the gradients at w
    with intended(guard, model):           # from inspector.guard import intended
        opt.first_step(zero_grad=True)     # w -> w + e
    loss = criterion(model(x), y)
    loss.backward()                        # the gradients second_step applies
    verdict = guard.step(loss, model, opt.base_optimizer)
    if verdict.take_step:
        opt.second_step()                  # w restored, then the base optimizer's step

The weights are compared with the post-step fingerprint as the block begins (a fault before it
is still named at the next `guard.step`), and what the block leaves is what that check expects,
so only the block itself is taken on trust.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from inspector.guard.guard import Guard


@contextmanager
def intended(guard: Guard, model: nn.Module) -> Iterator[None]:
    """The weights' change inside the block is meant (a two-step optimizer's perturbation)."""
    watched = guard.models.get(model)
    # a model not watched yet, or whose tensors were replaced, has no fingerprint to keep:
    # its next guard.step watches it afresh (and names the replaced tensors)
    watch = watched.watch if watched is not None and watched.watch.current() else None
    if watch is not None:
        watch.begin_intended()
    try:
        yield
    finally:
        if watch is not None:
            watch.end_intended()
