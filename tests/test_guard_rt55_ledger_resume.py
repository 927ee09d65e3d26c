"""Every resume path refuses what the ledger did not verify: a transformers `checkpoint-N`
folder whose bytes landed wrong (`mismatch`) or could not be compared (`unverified`) is renamed
out of the Trainer's pattern, as an unhealthy one is, so `get_last_checkpoint` and
`resume_from_checkpoint=True` never load it. The fault (one exponent bit flipped in the
folder's `model.safetensors` as it lands) is the test's own, beside a clean same-seed twin."""

from __future__ import annotations

import json
import struct

import torch
from safetensors.torch import load_file, save_file
from test_guard_integrations import HfRows, HfTiny

from inspector.core.vocabulary import SaveOutcome
from inspector.ledger import record_folder
from inspector.run.checkpoints import read_ledger, resume_choice


def flip_on_disk(path, key: str) -> None:
    """Exponent bit 30 of the first float32 of tensor `key` in a safetensors file."""
    with open(path, "r+b") as fh:
        size = struct.unpack("<Q", fh.read(8))[0]
        start = json.loads(fh.read(size))[key]["data_offsets"][0]
        fh.seek(8 + size + start + 3)  # the top byte of element 0 (little-endian)
        top = fh.read(1)[0]
        fh.seek(8 + size + start + 3)
        fh.write(bytes([top ^ 0x40]))


def train(out, fault: bool):
    """A real Trainer saving every 2 steps through the ledger; with `fault`, the test's own
    callback flips a bit of checkpoint-4's weights on disk before the ledger re-reads them."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from inspector.ledger.hf import LedgerCallback

    class DiskFlip(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if fault and state.global_step == 4:
                flip_on_disk(out / "checkpoint-4" / "model.safetensors", "net.0.weight")

    args = TrainingArguments(output_dir=str(out), max_steps=4, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, logging_strategy="no",
                             disable_tqdm=True, remove_unused_columns=False, learning_rate=1e-2,
                             save_strategy="steps", save_steps=2)
    model = HfTiny()
    Trainer(model=model, args=args, train_dataset=HfRows(),
            callbacks=[DiskFlip(), LedgerCallback()]).train()
    return model


def test_a_mismatched_trainer_folder_is_never_the_trainers_resume(tmp_path, capfd):
    from transformers.trainer_utils import get_last_checkpoint

    clean = tmp_path / "clean"
    train(clean, fault=False)
    assert [s.outcome for s in read_ledger(clean).saves] == [SaveOutcome.VERIFIED] * 2
    assert get_last_checkpoint(str(clean)) == str(clean / "checkpoint-4")

    out = tmp_path / "flip"
    model = train(out, fault=True)
    # the harm: the bytes on disk are not the weights the run had
    kept = load_file(out / "checkpoint-4.mismatch" / "model.safetensors")["net.0.weight"]
    assert float(kept[0, 0].abs()) > 1e30 > float(model.net[0].weight[0, 0].abs())
    saves = read_ledger(out).saves
    assert [s.outcome for s in saves] == [SaveOutcome.VERIFIED, SaveOutcome.MISMATCH]
    assert saves[1].path == "checkpoint-4.mismatch" and not (out / "checkpoint-4").exists()
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    assert resume_choice(out).record.step == 2
    assert "kept as evidence at" in capfd.readouterr().err


def test_an_unverified_folder_is_renamed_out_of_the_trainers_pattern(tmp_path):
    from transformers.trainer_utils import get_last_checkpoint

    for name, expected in (("checkpoint-2", HfTiny().state_dict()), ("checkpoint-4", None)):
        folder = tmp_path / name
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in HfTiny().state_dict().items()},
                  folder / "model.safetensors")
        record_folder(folder, expected=expected, step=int(name[-1]), run_dir=tmp_path)
    saves = read_ledger(tmp_path).saves
    assert [s.outcome for s in saves] == [SaveOutcome.VERIFIED, SaveOutcome.UNVERIFIED]
    assert saves[1].path == "checkpoint-4.unverified"
    assert get_last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")
    assert torch.equal(load_file(tmp_path / "checkpoint-2" / "model.safetensors")["net.0.weight"],
                       HfTiny().net[0].weight)



def lightning_run(run, fault: bool, steps: int, resume: bool = False):
    """A real Lightning fit with the guard, through the ledger saving `last.ckpt` every 2
    steps; with `fault`, the test's own flip of a weight after optimizer step 4; `resume` fits
    on from `ckpt_path="last"`. The Trainer (its `ckpt_path` is what it resumed from)."""
    import warnings

    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from test_guard_integrations import Pairs, _tiny_class
    from test_guard_parity import flip_top_exponent
    from torch.utils.data import DataLoader

    from inspector.guard.guard import GuardConfig
    from inspector.guard.lightning_callback import GuardCallback
    from inspector.ledger.lightning import LedgerCheckpointIO

    class Fault(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if fault and trainer.global_step == 4:
                flip_top_exponent(pl_module.net[0].weight)

    saving = ModelCheckpoint(dirpath=run, every_n_train_steps=2, save_top_k=0, save_last=True)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=run, plugins=[LedgerCheckpointIO(run_dir=run)],
                         callbacks=[Fault(), GuardCallback(run, GuardConfig(console=False)),
                                    saving])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(_tiny_class(pl)(), DataLoader(Pairs(), batch_size=None, shuffle=False),
                    ckpt_path="last" if resume else None)
    return trainer


def test_lightnings_last_never_resumes_an_unhealthy_last_checkpoint(tmp_path):
    clean, flip = tmp_path / "clean", tmp_path / "flip"
    lightning_run(clean, fault=False, steps=6)
    lightning_run(flip, fault=True, steps=6)
    assert {s.outcome for s in read_ledger(clean).saves} == {SaveOutcome.VERIFIED}
    assert [s.outcome for s in read_ledger(flip).saves] == [
        SaveOutcome.VERIFIED, SaveOutcome.UNHEALTHY, SaveOutcome.UNHEALTHY]
    assert lightning_run(clean, False, steps=8, resume=True).ckpt_path == str(clean / "last.ckpt")
    # the step-6 save is kept as evidence beside last.ckpt (step 2's), never as a last*.ckpt
    assert torch.load(flip / "last.ckpt", weights_only=False)["global_step"] == 2
    assert lightning_run(flip, False, steps=8, resume=True).ckpt_path == str(flip / "last.ckpt")


class Note:
    """A global the re-read (`weights_only=True`) refuses: nothing proves the file."""

    def __init__(self, text):
        self.text = text


def test_a_file_nothing_proved_never_takes_its_targets_name(tmp_path):
    from inspector.ledger import save

    weights = {"w": torch.ones(4)}
    first = save(weights, tmp_path / "last.ckpt", step=1)
    again = save({**weights, "note": Note("hello")}, tmp_path / "last.ckpt", step=2)
    assert (first.outcome, first.path) == (SaveOutcome.VERIFIED, "last.ckpt")
    assert (again.outcome, again.path) == (SaveOutcome.UNVERIFIED, "last.ckpt.unverified")
    # what a resume of last.ckpt loads is still the proven step-1 save
    assert set(torch.load(tmp_path / "last.ckpt", weights_only=True)) == {"w"}
    assert resume_choice(tmp_path).record.step == 1
