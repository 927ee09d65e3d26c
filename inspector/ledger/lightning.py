"""Lightning: `Trainer(plugins=[LedgerCheckpointIO()])` saves every checkpoint through the ledger.

`ModelCheckpoint` then writes each `.ckpt` atomically, re-read against memory and ledgered in
the run folder (default: the checkpoint's folder); its `save_top_k` deletions go through
`remove_checkpoint`, which records them and refuses to delete the last valid checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from inspector.ledger.atomic_save import save
from inspector.ledger.rotate import remove_checkpoint
from inspector.scan.pickles.presets import PRESETS


class LedgerCheckpointIO(TorchCheckpointIO):
    """A `CheckpointIO` plugin that writes, proves and ledgers every Lightning checkpoint."""

    def __init__(self, run_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.run_dir = Path(run_dir) if run_dir is not None else None

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str],
                        storage_options: Any = None) -> None:
        """Save through `inspector.ledger.save` (storage options are not supported)."""
        if storage_options is not None:
            raise TypeError("LedgerCheckpointIO takes no storage_options")
        save(checkpoint, path, step=checkpoint.get("global_step"),
             epoch=checkpoint.get("epoch"), run_dir=self._run(path), writer="lightning",
             allow_globals=PRESETS["lightning"][1])

    def remove_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Delete a checkpoint `ModelCheckpoint` no longer keeps, recorded in the ledger."""
        remove_checkpoint(path, self._run(path))

    def _run(self, path: str | os.PathLike[str]) -> Path:
        return self.run_dir if self.run_dir is not None else Path(path).parent
