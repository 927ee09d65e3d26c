"""The guard as a transformers `TrainerCallback`: `Trainer(..., callbacks=[GuardTrainerCallback(
RUN_DIR)])`.

The Trainer calls `on_pre_optimizer_step` after backward and gradient clipping, before
`optimizer.step()`, with the model and optimizer but not the loss; the callback takes the loss
from a forward hook on the model (the `loss` of its output, which the Trainer optimises). With
`max_grad_norm` set, the gradient-norm spike rules see the clipped norm; the loss rules and the
NaN/Inf checks are unaffected. `skip` drops the gradients (the optimizer changes nothing, the LR
scheduler still steps); `halt` writes the scene and raises `GuardHalt` out of `train`.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from inspector.guard.guard import Guard, GuardConfig


class GuardTrainerCallback(TrainerCallback):
    """Checks every optimizer step of a transformers Trainer run."""

    def __init__(self, run_dir: str | os.PathLike[str], config: GuardConfig | None = None) -> None:
        self.guard = Guard(run_dir, config or GuardConfig())
        self._loss: torch.Tensor | None = None
        self._hook: Any = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, model: torch.nn.Module | None = None,
                       **kwargs: Any) -> None:
        """Hook the model's forward to see each loss."""
        if model is not None and self._hook is None:
            self._hook = model.register_forward_hook(self._keep_loss)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, model: torch.nn.Module | None = None,
                      **kwargs: Any) -> None:
        """Mark the step's start (RNG state, weight faults)."""
        self.guard.begin(model)

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState,
                              control: TrainerControl, model: torch.nn.Module | None = None,
                              optimizer: torch.optim.Optimizer | None = None,
                              **kwargs: Any) -> None:
        """Check the step; act on an alarm."""
        if model is None or self._loss is None:
            return
        self.guard.step(self._loss, model, optimizer, step=state.global_step)
        self._loss = None

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        """Remove the hook and stop the guard's XID listener."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self.guard.close()

    def _keep_loss(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor) and module.training:
            self._loss = loss.detach()
