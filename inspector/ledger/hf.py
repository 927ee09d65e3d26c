"""transformers: `Trainer(..., callbacks=[LedgerCallback()])` ledgers each `checkpoint-N` folder.

The Trainer writes the folder itself; `on_save` runs after it is complete, fsyncs it, re-reads
every file (the model's tensors compared with the model in memory), checks the optimizer's and
the LR scheduler's state in memory (`ledger.health`) and appends one record to the run folder's
ledger (default: `output_dir`). A folder not sealed verified is renamed out of the Trainer's
`checkpoint-N` pattern (`checkpoint-N.mismatch`, `.unhealthy`, `.unverified`), so neither
`get_last_checkpoint` nor `resume_from_checkpoint=True` finds it. Folders the Trainer's
`save_total_limit` deleted are recorded as removed. Only the main process writes to the ledger.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from inspector.ledger.folder import record_folder
from inspector.ledger.rotate import note_removed


class LedgerCallback(TrainerCallback):
    """Ledger every checkpoint folder a transformers `Trainer` saves."""

    def __init__(self, run_dir: str | os.PathLike[str] | None = None) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the folder just written, and any the Trainer rotated away."""
        if not state.is_world_process_zero:
            return
        run = self.run_dir if self.run_dir is not None else Path(args.output_dir)
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        model = kwargs.get("model")
        note_removed(run, "removed by the Trainer (save_total_limit)")
        record_folder(folder, expected=model.state_dict() if model is not None else None,
                      step=state.global_step, epoch=state.epoch, run_dir=run,
                      writer="transformers.Trainer", optimizer=kwargs.get("optimizer"),
                      scheduler=kwargs.get("lr_scheduler"))
