"""Training checkpoints: `convert --key --strip-prefix` extracts the weights, and the inspect
result maps the optimizer's integer ids to the model's parameter names.

The checkpoints come from a real AdamW + StepLR training loop; the Lightning layout here is
built by hand in Lightning's shape (tests/test_lightning.py trains a real one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from inspector.checkpoint.extract import select, strip_prefixes
from inspector.checkpoint.hyper_params import hyper_parameters_line
from inspector.checkpoint.optim_types import optimizer_types, scheduler_types
from inspector.checkpoint.optimizer_map import OptimizerParams, map_optimizers
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats
from inspector.cli import main
from inspector.core.errors import CodedError
from inspector.core.flatten import colliding_keys, flatten, unique_keys

pytest_plugins = ("sandbox_fixtures",)  # fixture: unchanged


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _train(model: nn.Module, steps: int = 2) -> tuple[torch.optim.Optimizer, object]:
    """Two real optimizer and scheduler steps, so AdamW holds exp_avg/exp_avg_sq per parameter."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=generator)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def _lightning(model: nn.Module, optimizer, scheduler) -> dict:
    """What Lightning's ModelCheckpoint saves for a LightningModule holding `self.model`."""
    return {
        "epoch": 0,
        "global_step": 2,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": 0}}}},
        "callbacks": {},
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()],
        "hyper_parameters": {"lr": 1e-2, "hidden": 8},
    }


@pytest.fixture(scope="module")
def trained():
    model = _net()
    optimizer, scheduler = _train(model)
    return model.eval(), optimizer, scheduler


@pytest.fixture
def lightning_file(tmp_path, trained, unchanged) -> Path:
    path = tmp_path / "last.ckpt"
    torch.save(_lightning(*trained), path)
    return unchanged(path)


def _forward_equal(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    fresh = _net().eval()
    fresh.load_state_dict(weights, strict=True)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))


def test_lightning_state_dict_converts_to_the_models_own_names(tmp_path, trained, lightning_file,
                                                                capsys):
    model = trained[0]
    out = tmp_path / "model.safetensors"
    assert main(["convert", str(lightning_file), "-o", str(out), "--key", "state_dict",
                 "--strip-prefix", "model.", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] and report["key"] == "state_dict"
    assert report["strip_prefix"] == ["model."]
    weights = load_file(out)
    assert set(weights) == set(model.state_dict())
    for name, tensor in model.state_dict().items():
        assert torch.equal(weights[name], tensor), name
    _forward_equal(model, weights)
    # Nothing outside state_dict (optimizer moments, loops, hyper-parameters) was written.
    assert report["tensors_in_input"] == len(model.state_dict())
    assert not (tmp_path / "model.sidecar.json").exists()


def test_plain_training_dict_and_text_output(tmp_path, trained, unchanged, capsys):
    model, optimizer, scheduler = trained
    source = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "epoch": 3}, source)
    unchanged(source)
    out = tmp_path / "weights.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--key", "model"]) == 0
    text = capsys.readouterr().out
    assert "extracted model" in text
    assert f"all {len(model.state_dict())} tensors under model" in text
    _forward_equal(model, load_file(out))


def test_nested_key_path_and_repeated_prefixes(tmp_path, trained, unchanged, capsys):
    model = trained[0]
    source = tmp_path / "wrapped.pt"
    # DDP's `module.` inside a Lightning module's `model.`, under a nested key.
    weights = {f"module.model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"run": {"module": {**weights, "module.model.version": 3}}, "epoch": 7}, source)
    unchanged(source)
    out = tmp_path / "w.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--key", "run.module",
                 "--strip-prefix", "module.", "--strip-prefix", "model.", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["strip_prefix"] == ["module.", "model."] and report["key"] == "run.module"
    _forward_equal(model, load_file(out))
    # The one non-tensor value under the key goes to the sidecar, renamed like the tensors,
    # with what was extracted; `epoch`, outside the key, is not carried.
    sidecar = json.loads(Path(report["sidecar"]).read_text())
    assert sidecar["values"] == {"version": 3}
    assert (sidecar["key"], sidecar["strip_prefix"]) == ("run.module", ["module.", "model."])


def test_missing_key_lists_the_top_level_keys(tmp_path, lightning_file, capsys):
    out = tmp_path / "x.safetensors"
    assert main(["convert", str(lightning_file), "-o", str(out), "--key", "state_dic"]) == 10
    err = capsys.readouterr().err
    assert "--key state_dic" in err and "top-level keys are:" in err
    for top in ("state_dict", "optimizer_states", "lr_schedulers", "epoch", "global_step"):
        assert top in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [lightning_file]


def test_key_that_is_not_a_mapping_of_tensors(tmp_path, lightning_file, capsys):
    out = tmp_path / "x.safetensors"
    for key, words in (("epoch", "is a int, not a mapping of tensors"),
                       ("hyper_parameters", "is a mapping with no tensors"),
                       ("optimizer_states", "is a list, not a mapping of tensors")):
        assert main(["convert", str(lightning_file), "-o", str(out), "--key", key,
                     "--json"]) == 10
        captured = capsys.readouterr()
        assert words in captured.err
        assert json.loads(captured.out)["error"]["code"] == "not_tensor_mapping"
        assert not out.exists()


def test_prefixes_that_collide_are_refused(tmp_path, unchanged, capsys):
    source = tmp_path / "both.pt"
    torch.save({"state_dict": {"model.w": torch.ones(2), "w": torch.zeros(2)}}, source)
    unchanged(source)
    out = tmp_path / "x.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--key", "state_dict",
                 "--strip-prefix", "model."]) == 10
    assert "makes model.w and w both w" in capsys.readouterr().err
    assert not out.exists()


def test_keys_that_collide_once_flattened_are_refused(tmp_path, unchanged, capsys):
    # written as they flatten, the literal "a.b" would be renamed "a.b#2" and "a.b" would hold
    # the nested tensor: a loader asking for "a.b" would get the other one
    source = tmp_path / "clash.pt"
    torch.save({"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}, "w": torch.ones(1)}, source)
    unchanged(source)
    out = tmp_path / "x.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == 10
    assert "two values are both named a.b once nested containers" in capsys.readouterr().err
    assert not out.exists()
    assert main(["convert", str(source), "-o", str(out), "--key", "a"]) == 0
    loaded = load_file(out)
    assert list(loaded) == ["b"] and torch.equal(loaded["b"], torch.zeros(2))


def test_colliding_keys_in_core():
    assert colliding_keys({"l.0": 1, "l": [2, 3], "l.1.x": 4, "m": {"n": 5}}) == ["l.0"]
    assert colliding_keys({"a": {"b": 1}, "c": [1, 2]}) == []
    assert [k for k, _ in unique_keys(flatten({"a.b": 1, "a": {"b": 2}}))] == ["a.b", "a.b#2"]


def test_select_and_strip_in_core():
    tree = {"a": {"b.c": [{"d": 1}]}, "x": 2}
    assert select(tree, "a.b.c.0.d") == 1
    with pytest.raises(CodedError) as info:
        select(tree, "a.z")
    assert info.value.code == "key_not_found" and "under a" in info.value.message
    assert strip_prefixes(["model.x", "model.", "y"], ["model."]) == {
        "model.x": "x", "model.": "model.", "y": "y"}


# --- optimizer ids mapped to parameter names -------------------------------------------------


class _Buffered(nn.Module):
    """Buffers, listed before the parameters in a state dict; shaped like the parameters, they
    make an id's shape fit more than one tensor, so the names cannot be told."""

    def __init__(self, like_parameters: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("mask", torch.ones(8 if like_parameters else 5))
        self.register_buffer("proj", torch.eye(8 if like_parameters else 3))
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def _inspect_json(path: Path, capsys) -> dict:
    assert main(["inspect", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _records(checkpoint: dict) -> tuple[list[TensorStats], list[ObjectLeaf]]:
    """The inspect contract's records of an in-memory checkpoint (key, dtype, shape; repr)."""
    tensors, objects = [], []
    for key, leaf in flatten(checkpoint):
        if isinstance(leaf, torch.Tensor):
            tensors.append(TensorStats(key, str(leaf.dtype).removeprefix("torch."),
                                       list(leaf.shape), numel=leaf.numel()))
        else:
            objects.append(ObjectLeaf(key, repr=repr(leaf)))
    return tensors, objects


def test_lightning_optimizer_ids_are_named_after_the_parameters(trained, lightning_file, capsys):
    model, optimizer, _ = trained
    report = _inspect_json(lightning_file, capsys)
    [entry] = report["optimizer_params"]
    assert (entry["optimizer"], entry["model"], entry["mapped"], entry["source"]) == (
        "optimizer_states.0", "state_dict", True, "shapes")
    state = optimizer.state_dict()
    assert [p["id"] for p in entry["params"]] == state["param_groups"][0]["params"]
    named = list(model.named_parameters())
    assert len(entry["params"]) == len(named)
    for row, (name, param) in zip(entry["params"], named, strict=True):
        # The LightningModule holds the model as `self.model`: its names carry `model.`.
        assert row["name"] == f"model.{name}"
        assert row["key"] == f"state_dict.model.{name}"
        assert row["shape"] == list(param.shape) == list(state["state"][row["id"]]["exp_avg"].shape)
    # BatchNorm's running statistics sit between the parameters and were skipped.
    assert "model.1.running_mean" not in [p["name"] for p in entry["params"]]


def test_plain_checkpoint_names_its_ids_in_the_text_output(tmp_path, trained, capsys):
    model, optimizer, scheduler = trained
    path = tmp_path / "plain.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "epoch": 1}, path)
    assert main(["inspect", str(path)]) == 0
    names = [n for n, _ in model.named_parameters()]
    assert (f"optimizer ids: optimizer (AdamW): {len(names)} parameter ids named from model "
            f"(0 {names[0]}, 1 {names[1]}, 2 {names[2]}, …)") in capsys.readouterr().out


def test_buffers_shaped_like_parameters_leave_the_ids(tmp_path, capsys):
    model = _Buffered()
    optimizer, _ = _train_buffered(model)
    path = tmp_path / "buffered.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1},
               path)
    [entry] = _inspect_json(path, capsys)["optimizer_params"]
    assert not entry["mapped"] and "more than one way" in entry["reason"]
    assert [p["id"] for p in entry["params"]] == [0, 1, 2, 3]
    assert all(p["name"] is None and p["key"] is None for p in entry["params"])
    # The same model whose buffer has a shape no parameter has: the match is unique again.
    model = _Buffered(like_parameters=False)
    optimizer, _ = _train_buffered(model)
    tensors, objects = _records({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    [found] = map_optimizers(tensors, objects)
    assert found.mapped and found.reason == ""
    assert found.names == [n for n, _ in model.named_parameters()]


def test_param_groups_out_of_model_order_are_not_guessed():
    model = _net()
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    # The usual weight-decay split: ids follow the groups, not the model.
    optimizer = torch.optim.AdamW([{"params": weights}, {"params": biases, "weight_decay": 0.0}])
    model(torch.randn(4, 4)).sum().backward()
    optimizer.step()
    tensors, objects = _records({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    [found] = map_optimizers(tensors, objects)
    assert not found.mapped and "no state dict" in found.reason
    assert found.groups == [0, 0, 0, 1, 1, 1]


def test_names_the_optimizer_saved_are_used_as_they_are():
    model = _Buffered()
    named = dict(model.named_parameters())
    # Named groups out of model order, over a model whose shapes alone are ambiguous.
    optimizer = torch.optim.AdamW([
        {"params": [(n, p) for n, p in named.items() if n.endswith("weight")]},
        {"params": [(n, p) for n, p in named.items() if n.endswith("bias")],
         "weight_decay": 0.0}])
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    tensors, objects = _records({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    [found] = map_optimizers(tensors, objects)
    assert (found.source, found.model, found.ids) == ("param_names", "model", [0, 1, 2, 3])
    assert found.names == ["a.weight", "b.weight", "a.bias", "b.bias"]
    for row in found.to_json()["params"]:
        assert row["shape"] == list(named[row["name"]].shape)
        assert row["key"] == f"model.{row['name']}"


def test_optimizer_params_round_trip_with_and_without_the_type_key():
    """A result written before `type` existed passes through unchanged (no `"type": ""`
    gained); a new one keeps its type, also '' for an optimizer its names do not tell."""
    model = _Buffered()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    tensors, objects = _records({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    [found] = map_optimizers(tensors, objects)
    new = found.to_json()
    assert new["type"] == "AdamW"
    old = {k: v for k, v in new.items() if k != "type"}
    unknown = {**new, "type": ""}
    for data in (new, old, unknown):
        assert OptimizerParams.from_json(data).to_json() == data


def _train_buffered(model: nn.Module):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        model(torch.randn(3, 8)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return optimizer, None


def test_key_and_prefix_take_one_file_not_a_folder(tmp_path, trained, capsys):
    folder = tmp_path / "shards"
    folder.mkdir()
    torch.save(trained[0].state_dict(), folder / "pytorch_model.bin")
    assert main(["convert", str(folder), "--strip-prefix", "model."]) == 2
    assert "take one file, not a folder" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["pytorch_model.bin"]


_OPTIMIZERS = ["ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS",
               "Muon", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam"]


@pytest.mark.parametrize("name", _OPTIMIZERS)
def test_every_torch_optimizer_is_named_from_what_it_saved(name):
    cls = getattr(torch.optim, name, None)
    if cls is None:
        pytest.skip(f"torch {torch.__version__} has no torch.optim.{name}")
    weight = nn.Parameter(torch.ones(3, 2))
    optimizer = cls([weight], **({} if name == "LBFGS" else {"lr": 0.1}))
    if name != "SparseAdam":  # it takes sparse gradients only; its settings are saved anyway
        weight.grad = torch.full_like(weight, 0.5)
        optimizer.step((lambda: torch.tensor(1.0)) if name == "LBFGS" else None)
    tensors, objects = _records({"optimizer": optimizer.state_dict()})
    assert optimizer_types(tensors, objects) == {"optimizer.": name}


def test_adam_and_adamw_without_decoupled_weight_decay_are_not_told_apart():
    tensors, objects = _records({"opt": torch.optim.AdamW([nn.Parameter(torch.ones(2))])
                                 .state_dict()})
    objects = [o for o in objects if not o.key.endswith("decoupled_weight_decay")]
    assert optimizer_types(tensors, objects) == {"opt.": "Adam or AdamW"}


_SCHEDULERS = {
    "StepLR": lambda o, s: s.StepLR(o, 2),
    "MultiStepLR": lambda o, s: s.MultiStepLR(o, [1, 3]),
    "ExponentialLR": lambda o, s: s.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda o, s: s.CosineAnnealingLR(o, 10),
    "CosineAnnealingWarmRestarts": lambda o, s: s.CosineAnnealingWarmRestarts(o, 10),
    "LambdaLR or MultiplicativeLR": lambda o, s: s.LambdaLR(o, lambda epoch: 1.0),
    "OneCycleLR": lambda o, s: s.OneCycleLR(o, 0.1, total_steps=10),
    "CyclicLR": lambda o, s: s.CyclicLR(o, 0.01, 0.1),
    "ReduceLROnPlateau": lambda o, s: s.ReduceLROnPlateau(o),
    "LinearLR": lambda o, s: s.LinearLR(o),
    "ConstantLR": lambda o, s: s.ConstantLR(o),
    "PolynomialLR": lambda o, s: s.PolynomialLR(o),
    "SequentialLR": lambda o, s: s.SequentialLR(o, [s.ConstantLR(o), s.ExponentialLR(o, 0.9)],
                                                [2]),
}


@pytest.mark.parametrize("name", _SCHEDULERS)
def test_every_torch_scheduler_is_named_from_what_it_saved(name):
    optimizer = torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9)
    scheduler = _SCHEDULERS[name](optimizer, torch.optim.lr_scheduler)
    optimizer.step()
    scheduler.step(*([1.0] if name == "ReduceLROnPlateau" else []))
    tensors, objects = _records({"lr_schedulers": [scheduler.state_dict()]})
    assert scheduler_types(tensors, objects) == {"lr_schedulers.0.": name}


def test_hyper_parameters_line_names_the_module_and_data_module_values(trained):
    checkpoint = _lightning(*trained) | {"datamodule_hyper_parameters": {"batch_size": 32}}
    _, objects = _records(checkpoint)
    assert hyper_parameters_line(objects) == "lr 0.01 · hidden 8 · datamodule.batch_size 32"
    _, objects = _records({"hparams": {f"h{i}": i for i in range(10)}, "epoch": 1})
    assert hyper_parameters_line(objects) == " · ".join(f"h{i} {i}" for i in range(8)) + (
        " · … 2 more")
    assert hyper_parameters_line(_records({"model": {"w": torch.ones(1)}, "epoch": 1})[1]) == ""
