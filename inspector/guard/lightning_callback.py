"""The guard as a Lightning `Callback`: `Trainer(callbacks=[GuardCallback(RUN_DIR)])`.

Lightning calls `on_before_optimizer_step` after backward and before the optimizer's update, so
the guard checks there with the loss it saw in `on_before_backward`: under
`accumulate_grad_batches` N the sum of the N micro-batches' losses as Lightning back-propagated
them (each divided by N), the loss of the accumulated gradient the guard judges. A step whose
backward Lightning never saw (manual optimization calling `loss.backward()` itself) has no loss
to give the guard: it is said on stderr and every later save of the run is unhealthy
(`alarm_record.Unchecked`), never passed over in silence. `skip` drops the gradients (the update
changes nothing); `halt` writes the scene and raises `GuardHalt` out of `fit`.

The re-run for attribution replays every micro-batch of the step with `training_step`, each
from its own RNG state and divided by N as Lightning divides it, through the strategy's
backward (other callbacks' backward hooks see that second backward too), so it compares like
with like. Under manual optimization `training_step` is the user's whole step, which steps the
optimizers itself: it is never replayed, and the alarm's attribution is null (not re-run), as
the transformers callback's is. There one `manual_backward` may feed several optimizers' steps:
a step whose gradients are all the ones the last check judged, unwritten since (`GradsChecked`),
is covered by that check; any other step with no loss seen is unchecked.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch

from inspector.guard.alarm_record import Unchecked
from inspector.guard.guard import Guard, GuardConfig
from inspector.guard.scene import restore_rng, rng_states

NO_LOSS = ("no backward went through Lightning before this optimizer step (a manual "
           "optimization's `loss.backward()` instead of `self.manual_backward(loss)`), so "
           "the callback saw no loss")


@dataclass
class MicroBatch:
    """One `training_step` call of the step being checked: what a replay needs."""

    batch: Any
    index: int
    rng: dict[str, Any]


class GradsChecked:
    """The gradients the last check judged, by weak reference and version (no copy): under
    manual optimization one `manual_backward` may feed several optimizers' steps, and the ones
    after the first step gradients already checked."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[weakref.ref, int]] = {}

    def keep(self, module: torch.nn.Module) -> None:
        """Remember the gradients the module's parameters hold now."""
        self.seen = {id(p): (weakref.ref(p.grad), p.grad._version)
                     for p in module.parameters() if p.grad is not None}

    def cover(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether every gradient `optimizer` would step is one the last check judged, the
        same tensor, unwritten since (a backward since accumulates into it or replaces it)."""
        for group in optimizer.param_groups:
            for p in group["params"]:
                known = self.seen.get(id(p))
                if p.grad is not None and (known is None or known[0]() is not p.grad
                                           or known[1] != p.grad._version):
                    return False
        return bool(self.seen)


class GuardCallback(pl.Callback):
    """Checks every optimizer step of a Lightning run."""

    def __init__(self, run_dir: str | os.PathLike[str], config: GuardConfig | None = None) -> None:
        self.guard = Guard(run_dir, config or GuardConfig())
        self._loss: torch.Tensor | None = None
        self._window: list[MicroBatch] = []
        """The micro-batches since the last check, each with the RNG state it started from."""
        self._checked = GradsChecked()
        self._unchecked = Unchecked(self.guard.run_dir, self.guard.models.holds, NO_LOSS)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        """Keep the batch and its RNG state for a re-run; the step starts at its first."""
        if not self._window:
            self.guard.begin(pl_module, batch)
        self._window.append(MicroBatch(batch, batch_idx, rng_states()))

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           loss: torch.Tensor) -> None:
        """Add the micro-batch's loss to the step's (a device tensor: no sync here)."""
        loss = loss.detach()
        self._loss = loss if self._loss is None else self._loss + loss

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """Check the step; act on an alarm; a step with no loss seen is counted unchecked."""
        loss, self._loss = self._loss, None
        window, self._window = self._window, []
        manual = not pl_module.automatic_optimization
        if loss is None:
            if not (manual and self._checked.cover(optimizer)):
                self._unchecked.note(trainer.global_step)
            return
        closure = None
        if window and not manual:
            closure = lambda: self._replay(trainer, pl_module, optimizer, window)  # noqa: E731
        self.guard.step(loss, pl_module, optimizer, closure=closure,
                        batch=window[-1].batch if window else None, step=trainer.global_step)
        if manual:
            self._checked.keep(pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Stop the guard's XID listener."""
        self._unchecked.close()
        self.guard.close()

    def _replay(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                optimizer: torch.optim.Optimizer, window: list[MicroBatch]) -> torch.Tensor:
        """Every micro-batch of the step again, as Lightning ran it: its RNG state restored,
        its loss divided by `accumulate_grad_batches`, back-propagated through the strategy;
        the sum of the losses `on_before_backward` saw (scaled as the first run's were)."""
        try:
            for micro in window:
                restore_rng(micro.rng)
                out = pl_module.training_step(micro.batch, micro.index)
                loss = out["loss"] if isinstance(out, dict) else out
                trainer.strategy.backward(loss / trainer.accumulate_grad_batches, optimizer)
            replayed = self._loss
        finally:
            self._loss = None
        assert replayed is not None
        return replayed
