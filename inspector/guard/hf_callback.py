"""The guard as a transformers `TrainerCallback`: `Trainer(..., callbacks=[GuardTrainerCallback(
RUN_DIR)])`.

The Trainer calls `on_pre_optimizer_step` after backward and gradient clipping, before
`optimizer.step()`, with the model and optimizer but neither the loss nor itself. The loss it
optimises is what its `compute_loss` returns, whether the model computed it (`output.loss`) or
the Trainer did (`label_smoothing_factor`, `compute_loss_func`, a subclass's own
`compute_loss`, which pop the labels so the model's output carries none): so at
`on_train_begin` the callback finds its Trainer on the call stack and wraps that instance's
`compute_loss` to keep each training loss (unwrapped at `on_train_end`), and hooks the model's
forward for the output's `loss` (a subclass's `training_step` that never calls
`compute_loss`). A step that reaches the optimizer with no loss seen is never passed over in
silence: one stderr line, and every later save of the run is unhealthy (`alarm_record.Unchecked`).
With `max_grad_norm` set, the gradient-norm spike rules see the clipped norm; the loss rules
and the NaN/Inf checks are unaffected. `skip` drops the gradients (the optimizer changes
nothing, the LR scheduler still steps); `halt` writes the scene and raises `GuardHalt` out of
`train`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from transformers import (
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from inspector.guard.alarm_record import Unchecked
from inspector.guard.guard import Guard, GuardConfig

NO_LOSS = ("the callback saw no training loss (neither the Trainer's compute_loss nor the "
           "model's output gave one)")


class GuardTrainerCallback(TrainerCallback):
    """Checks every optimizer step of a transformers Trainer run."""

    def __init__(self, run_dir: str | os.PathLike[str], config: GuardConfig | None = None) -> None:
        self.guard = Guard(run_dir, config or GuardConfig())
        self._loss: torch.Tensor | None = None
        self._hook: Any = None
        self._trainer: Trainer | None = None
        self._unchecked = Unchecked(self.guard.run_dir, self.guard.models.holds, NO_LOSS)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, model: torch.nn.Module | None = None,
                       **kwargs: Any) -> None:
        """See each training loss: through the calling Trainer's `compute_loss`, else a
        forward hook on the model."""
        trainer = self._calling_trainer()
        if trainer is not None and self._trainer is None:
            self._trainer = trainer
            trainer.compute_loss = self._loss_keeper(trainer.compute_loss)  # type: ignore[method-assign]
        if model is not None and self._hook is None:
            self._hook = model.register_forward_hook(self._keep_output_loss)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, model: torch.nn.Module | None = None,
                      **kwargs: Any) -> None:
        """Mark the step's start (RNG state, weight faults)."""
        self.guard.begin(model)

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState,
                              control: TrainerControl, model: torch.nn.Module | None = None,
                              optimizer: torch.optim.Optimizer | None = None,
                              **kwargs: Any) -> None:
        """Check the step; act on an alarm; a step with no loss seen is counted unchecked."""
        if model is None:
            return
        if self._loss is None:
            self._unchecked.note(state.global_step)
            return
        self.guard.step(self._loss, model, optimizer, step=state.global_step)
        self._loss = None

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        """Unwrap the Trainer, remove the hook and stop the guard's XID listener."""
        if self._trainer is not None:
            vars(self._trainer).pop("compute_loss", None)
            self._trainer = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._unchecked.close()
        self.guard.close()

    def _calling_trainer(self) -> Trainer | None:
        """The Trainer whose callback handler is calling this callback (a few frames up: the
        Trainer hands its callbacks no handle to itself)."""
        frame = sys._getframe(1)
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, Trainer) and self in owner.callback_handler.callbacks:
                return owner
            frame = frame.f_back
        return None

    def _loss_keeper(self, compute_loss: Any) -> Any:
        """`compute_loss`, keeping the loss of each call made in training mode."""
        def keeping(model: torch.nn.Module, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            out = compute_loss(model, inputs, *args, **kwargs)
            loss = out[0] if isinstance(out, tuple) else out
            if isinstance(loss, torch.Tensor) and model.training:
                self._loss = loss.detach()
            return out
        return keeping

    def _keep_output_loss(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor) and module.training:
            self._loss = loss.detach()
