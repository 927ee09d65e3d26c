"""The guard as a Lightning `Callback`: `Trainer(callbacks=[GuardCallback(RUN_DIR)])`.

Lightning calls `on_before_optimizer_step` after backward and before the optimizer's update, so
the guard checks there with the loss it saw in `on_before_backward`. A step whose backward
Lightning never saw (manual optimization calling `loss.backward()` itself) has no loss to give
the guard: it is said on stderr and every later save of the run is unhealthy
(`alarm_record.Unchecked`), never passed over in silence. `skip` drops the gradients
(the update changes nothing); `halt` writes the scene and raises `GuardHalt` out of `fit`. The
re-run for attribution replays `training_step` on the same batch through the strategy's
backward (other callbacks' backward hooks see that second backward too).
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import torch

from inspector.guard.alarm_record import Unchecked
from inspector.guard.guard import Guard, GuardConfig

NO_LOSS = ("no backward went through Lightning before this optimizer step (a manual "
           "optimization's `loss.backward()` instead of `self.manual_backward(loss)`), so "
           "the callback saw no loss")


class GuardCallback(pl.Callback):
    """Checks every optimizer step of a Lightning run."""

    def __init__(self, run_dir: str | os.PathLike[str], config: GuardConfig | None = None) -> None:
        self.guard = Guard(run_dir, config or GuardConfig())
        self._loss: torch.Tensor | None = None
        self._batch: tuple[Any, int] | None = None
        self._replaying = False
        self._unchecked = Unchecked(self.guard.run_dir, self.guard.models.holds, NO_LOSS)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        """Keep the batch and the RNG state for a re-run."""
        self._batch = (batch, batch_idx)
        self.guard.begin(pl_module, batch)

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           loss: torch.Tensor) -> None:
        """Keep the step's loss (a device tensor: no sync here)."""
        if not self._replaying:
            self._loss = loss

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """Check the step; act on an alarm; a step with no loss seen is counted unchecked."""
        if self._loss is None:
            self._unchecked.note(trainer.global_step)
            return
        batch = self._batch[0] if self._batch else None
        closure = (lambda: self._replay(trainer, pl_module, optimizer)) if self._batch else None
        self.guard.step(self._loss, pl_module, optimizer, closure=closure, batch=batch,
                        step=trainer.global_step)
        self._loss = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Stop the guard's XID listener."""
        self._unchecked.close()
        self.guard.close()

    def _replay(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                optimizer: torch.optim.Optimizer) -> torch.Tensor:
        assert self._batch is not None
        batch, batch_idx = self._batch
        self._replaying = True
        try:
            out = pl_module.training_step(batch, batch_idx)
            loss = out["loss"] if isinstance(out, dict) else out
            trainer.strategy.backward(loss, optimizer)
        finally:
            self._replaying = False
        return loss
