"""The ledger inside real trainers, end to end on the CPU with tiny models built in code:
a plain loop, Lightning's `Trainer(plugins=[LedgerCheckpointIO()])`, transformers' `Trainer`
with `LedgerCallback()`, `save_pretrained` and `torch.distributed.checkpoint.save`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from inspector.cli import main
from inspector.core.vocabulary import CheckpointState, SaveOutcome
from inspector.ledger import save, save_dcp, save_pretrained
from inspector.run.checkpoints import check_saves, latest_valid, read_ledger


def _states(run: Path) -> list[CheckpointState]:
    return [c.state for c in check_saves(read_ledger(run))]


def test_a_plain_training_loop_saves_through_one_call(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 7):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 2 == 0:
            save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "step": step}, tmp_path / f"step-{step}.pt", step=step, keep=2)
    latest = latest_valid(tmp_path)
    assert latest.step == 6 and latest.outcome == SaveOutcome.VERIFIED
    resumed = torch.load(tmp_path / latest.path, weights_only=True)
    assert torch.equal(resumed["model"]["weight"], model.weight.detach())
    assert _states(tmp_path) == [CheckpointState.REMOVED] + [CheckpointState.INTACT] * 2


# Lightning and transformers are imported by fixtures, for the tests that use them: at module
# level they added seconds to every collection of the suite, and skipped every test here where
# either was absent.


@pytest.fixture(scope="module")
def lightning():
    return pytest.importorskip("lightning", reason="lightning is not installed (dev extra)")


@pytest.fixture(scope="module")
def tiny_class(lightning):
    """The LightningModule class the trainers fit, defined once Lightning is imported."""

    class Tiny(lightning.LightningModule):
        def __init__(self, lr: float = 0.05) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, _index):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    return Tiny


def test_lightning_saves_every_checkpoint_through_the_plugin(tmp_path, lightning, tiny_class):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from inspector.ledger.lightning import LedgerCheckpointIO

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    ckpt = tmp_path / "ckpt"
    trainer = lightning.Trainer(
        max_epochs=3, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
        callbacks=[ModelCheckpoint(dirpath=ckpt, save_top_k=1, every_n_epochs=1)],
        plugins=[LedgerCheckpointIO(run_dir=tmp_path)],
    )
    trainer.fit(tiny_class(), torch.utils.data.DataLoader(data, batch_size=8))
    ledger = read_ledger(tmp_path)
    assert [s.step for s in ledger.saves] == [2, 4, 6]
    assert all(s.outcome == SaveOutcome.VERIFIED and s.writer == "lightning"
               for s in ledger.saves), [s.detail for s in ledger.saves]
    # save_top_k=1: Lightning deleted the older two through the plugin, which recorded it
    assert _states(tmp_path) == [CheckpointState.REMOVED] * 2 + [CheckpointState.INTACT]
    latest = latest_valid(tmp_path)
    assert latest.epoch == 2 and [p.name for p in ckpt.iterdir()] == [Path(latest.path).name]
    resumed = lightning.Trainer(max_epochs=4, accelerator="cpu", logger=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path, enable_checkpointing=False)
    resumed.fit(tiny_class(), torch.utils.data.DataLoader(data, batch_size=8),
                ckpt_path=tmp_path / latest.path)
    assert resumed.global_step == 8


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers", reason="transformers is not installed")


def _tiny_gpt2(transformers):
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1,
                                     n_head=2)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def test_transformers_trainer_checkpoints_are_ledgered_by_the_callback(tmp_path, transformers):
    from inspector.ledger.hf import LedgerCallback

    model = _tiny_gpt2(transformers)
    ids = torch.randint(0, 32, (8, 8))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=6, save_steps=2, save_total_limit=2,
        per_device_train_batch_size=4, report_to=[], use_cpu=True, logging_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   callbacks=[LedgerCallback()])
    trainer.train()
    ledger = read_ledger(tmp_path)
    assert [s.step for s in ledger.saves] == [2, 4, 6]
    assert all(s.outcome == SaveOutcome.VERIFIED for s in ledger.saves), \
        [s.detail for s in ledger.saves]
    names = {f.path.rsplit("/", 1)[1] for f in ledger.saves[-1].files}
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json"} <= names
    # save_total_limit=2: the Trainer deleted checkpoint-2, which the next save recorded
    assert _states(tmp_path) == [CheckpointState.REMOVED] + [CheckpointState.INTACT] * 2
    assert latest_valid(tmp_path).path == "checkpoint-6"
    assert main(["verify", str(tmp_path / "checkpoint-6")]) == 0


def test_save_pretrained_through_the_ledger_is_one_folder_record(tmp_path, capsys,
                                                                 transformers):
    model = _tiny_gpt2(transformers)
    record = save_pretrained(model, tmp_path / "final", step=10)
    assert record.outcome == SaveOutcome.VERIFIED and record.layout == "folder"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    again = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "final")
    assert torch.equal(again.transformer.wte.weight, model.transformer.wte.weight)
    assert main(["run", "verify", str(tmp_path)]) == 0
    assert "1 intact" in capsys.readouterr().out


def test_distributed_checkpoint_save_is_written_by_rank_zero_rules(tmp_path):
    state = {"w": torch.randn(8, 8), "nested": {"b": torch.arange(5.0)}}
    record = save_dcp(state, tmp_path / "dcp-step-3", step=3)
    assert record.format == "dcp" and record.outcome == SaveOutcome.VERIFIED, record.detail
    assert (tmp_path / "dcp-step-3" / ".metadata").is_file()
    assert latest_valid(tmp_path).path == "dcp-step-3"


TWO_RANKS = """
import sys, torch, torch.distributed as dist
from pathlib import Path
rank, run = int(sys.argv[1]), Path(sys.argv[2])
dist.init_process_group("gloo", init_method=f"file://{run}/.pg", rank=rank, world_size=2)
from inspector.ledger import save_dcp
state = {"w": torch.full((8, 8), 3.0), "b": torch.arange(4.0)}
record = save_dcp(state, run / "dcp-step-1", step=1)
assert (record is None) == (rank != 0), record
dist.destroy_process_group()
"""


def test_distributed_checkpoint_with_two_ranks_is_ledgered_once_by_rank_zero(tmp_path,
                                                                             python_exe):
    import subprocess

    procs = [subprocess.Popen([python_exe, "-c", TWO_RANKS, str(rank), str(tmp_path)],
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    [record] = read_ledger(tmp_path).saves
    assert record.rank == 0 and record.format == "dcp"
    assert record.outcome == SaveOutcome.VERIFIED, record.detail
    names = sorted(f.path for f in record.files)
    assert names == ["dcp-step-1/.metadata", "dcp-step-1/__0_0.distcp",
                     "dcp-step-1/__1_0.distcp"]
    assert latest_valid(tmp_path).path == "dcp-step-1"
