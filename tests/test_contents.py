"""What a checkpoint holds, from the inspect contract: counts, dtype mix and training state."""

from __future__ import annotations

import json

import torch
from factories import save_training_checkpoint

from inspector.checkpoint.contents import summarize
from inspector.checkpoint.results import InspectResult
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats
from inspector.cli import main


def _t(key: str, dtype: str = "float32", numel: int = 4, size: int = 4) -> TensorStats:
    return TensorStats(key, dtype, [numel], numel=numel, nbytes=numel * size)


def test_weights_alone_are_not_a_training_checkpoint():
    c = summarize([_t("a.weight", numel=10), _t("b.weight", "bfloat16", 6, 2)],
                  unique={"numel": 10, "nbytes": 40})
    assert (c.tensors, c.parameters, c.bytes) == (2, 16, 52)
    assert (c.unique_parameters, c.unique_bytes) == (10, 40)
    assert c.dtypes == [("float32", 40), ("bfloat16", 12)]
    assert not c.is_training_checkpoint


def test_lightning_layout_is_read():
    tensors = [_t("state_dict.layer.weight"), _t("optimizer_states.0.state.0.exp_avg"),
               _t("optimizer_states.0.state.0.exp_avg_sq")]
    objects = [ObjectLeaf(key, repr=text) for key, text in (
        ("epoch", "4"), ("global_step", "812"),
        ("loops.fit_loop.epoch_progress.current.step", "9"),
        ("optimizer_states.0.param_groups.0.lr", "0.0003"),
        ("optimizer_states.0.param_groups.1.lr", "3e-05"),
        ("lr_schedulers.0.last_epoch", "812"))]
    c = summarize(tensors, objects)
    assert c.is_training_checkpoint and c.optimizer_state_tensors == 2
    # a loop's own counter deep inside callback state is not the run's progress
    assert c.progress == {"epoch": "4", "global_step": "812"}
    assert c.learning_rates == ["0.0003", "3e-05"] and c.has_scheduler and not c.has_scaler


def test_a_real_training_checkpoint_through_the_jailed_inspect(tmp_path, capsys):
    path = save_training_checkpoint(tmp_path / "train.pt")
    assert main(["inspect", str(path), "--json"]) in (0, 7)
    result = InspectResult.from_json(json.loads(capsys.readouterr().out))
    c = summarize(result.tensors, result.objects, result.unique_storage)
    raw = torch.load(path, weights_only=True)
    assert c.progress == {"epoch": str(raw["epoch"]), "step": str(raw["step"])}
    assert c.learning_rates == [repr(g["lr"]) for g in raw["optimizer"]["param_groups"]]
    assert c.optimizer_state_tensors == sum(
        len(s) for s in raw["optimizer"]["state"].values())
    assert c.tensors == len(result.tensors) and c.parameters == sum(
        t.numel for t in result.tensors)


def test_inspect_prints_the_training_state(tmp_path, capsys):
    path = save_training_checkpoint(tmp_path / "train.pt")
    main(["inspect", str(path)])
    out = capsys.readouterr().out
    assert "training state: epoch 3 · step 1200 · optimizer: 1 parameter group, lr 0.001" in out
