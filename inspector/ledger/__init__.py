"""The checkpoint ledger, inside the training process: every checkpoint proven as it is saved.

`save(obj, path, step=...)` for torch.save and safetensors files; `save_folder`,
`save_pretrained` and `save_dcp` for folder writers; `record_folder` for a folder a trainer
wrote. The Lightning plugin is `inspector.ledger.lightning.LedgerCheckpointIO`, the
transformers callback `inspector.ledger.hf.LedgerCallback`. The reading side (`latest_valid`,
`read_ledger`, `check_saves`) is torch-free and lives in `inspector.run.checkpoints`.

This package imports torch (the training process has it anyway) and never Qt; the app, the
CLI and the report never import it.
"""

from inspector.ledger.atomic_save import save
from inspector.ledger.folder import record_folder, save_dcp, save_folder, save_pretrained
from inspector.run.checkpoints import LedgerError, SaveRecord, latest_valid

__all__ = ["LedgerError", "SaveRecord", "latest_valid", "record_folder", "save", "save_dcp",
           "save_folder", "save_pretrained"]
