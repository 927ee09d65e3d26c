"""A jailed worker's `objects` (a checkpoint's plain values: epoch, step, learning rates,
hyper-parameters) are held against the ones read here from the file's bytes
(`sandbox.host.claims.objects`).

Each lie runs as hostile code inside a real `inspect` job (the jail's self-test hook, as in
`test_worker_lies`): it changes the non-tensor values the worker reports. The honest run's
lines are shown first, then that the CLI refuses the lie (`claim_refuted`, exit 5) and names
the first value that disagrees. Where the host cannot read the file's values, the lines made
from them say they are the jailed loader's word.
"""

from __future__ import annotations

import collections
import json
import os
import textwrap

import factories
import pytest
import torch
from hostile_worker import arm

from inspector.cli import main
from inspector.sandbox.host.operations import inspect_reply
from inspector.sandbox.protocol import Limits

REFUSED = 5
"""`inspect`'s exit code for a refused answer (`claim_refuted`)."""

UNCHECKED = "(as reported by the jailed loader, not checked here)"

LIE = """
    import inspector.sandbox.worker.inspect_op as op
    real = op._send_objects
    def lying(emit, objects):
        for o in objects:
            o.update(CHANGE.get(o["key"], {}))
        objects[:] = [o for o in objects if o["key"] not in DROP]
        objects.extend({"key": k, "type": "builtins.int", "repr": v} for k, v in ADD.items())
        return real(emit, objects)
    op._send_objects = lying
"""


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """Every worker started from here on reports its objects changed: `change` (key: fields
    replaced), `drop` (keys left out) and `add` (key: repr of an int the file does not hold)."""
    def lie(change: dict | None = None, drop: tuple = (), add: dict | None = None) -> None:
        source = (f"CHANGE = {change or {}!r}\nDROP = {set(drop)!r}\nADD = {add or {}!r}\n"
                  + textwrap.dedent(LIE))
        arm(tmp_path, monkeypatch, source)

    return lie


def _worker_objects(path, fmt: str = "") -> dict[str, str]:
    """The inspect job's own objects (key: repr), without the client's checks."""
    reply = inspect_reply({"op": "inspect", "path": str(path), "paths": [], "allow_globals": [],
                           "limits": Limits.for_input(os.path.getsize(path)).to_json(),
                           "format": fmt}, timeout=300)
    return {o["key"]: o["repr"] for o in reply["objects"]}


def _trained(progress: bool, legacy: bool = False, path=None) -> dict:
    """A model and AdamW (lr 3e-4) after one step, with epoch 3 and step 1200 if `progress`."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    if progress:
        state.update(epoch=3, step=1200)
    if path is not None:
        torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return state


def _lightning_style(path) -> None:
    """A Lightning-style dict (`state_dict`, `optimizer_states`, `hyper_parameters`) of plain
    values only, so the host's readers read it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "optimizer_states": [opt.state_dict()], "epoch": 4, "global_step": 812,
                "hyper_parameters": {"lr": 0.01, "hidden": 8, "name": "net"}}, path)


def _inspect(path, capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["inspect", str(path), *args])
    return code, capsys.readouterr().out.splitlines()


def _lines(text: list[str], *labels: str) -> list[str]:
    return [line for line in text if line.startswith(labels)]


def _refused(path, capsys) -> str:
    """The refusal's message; the human output holds no line made from the refused values."""
    code, text = _inspect(path, capsys)
    assert code == REFUSED
    assert not _lines(text, "training state:", "resume:", "hyper-parameters:", "checked:")
    code, out = _inspect(path, capsys, "--json")
    error = json.loads("\n".join(out))["error"]
    assert code == REFUSED and error["code"] == "claim_refuted"
    assert [f"error:    {error['message']}"] == _lines(text, "error:")
    assert error["message"].startswith("the jailed loader's inspection does not match the "
                                       "file's own bytes, so none of its answer is trusted: ")
    return error["message"]


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_worker_that_invents_progress_and_an_lr_is_refused(tmp_path, hostile, capsys,
                                                             legacy) -> None:
    path = tmp_path / "noprogress.pt"
    _trained(progress=False, legacy=legacy, path=path)
    code, text = _inspect(path, capsys)
    assert code == 0  # the honest worker's lines, exactly as before
    assert _lines(text, "training state:", "resume:") == [
        "training state: optimizer: 1 parameter group, lr 0.0003 · 6 optimizer state tensors",
        "resume:   Not ready to resume: epoch / step missing"]
    assert "14 non-tensor values:" in text
    hostile(change={"optimizer.param_groups.0.lr": {"repr": "0.03"}},
            add={"epoch": "3", "step": "1200"})
    told = _worker_objects(path)  # the lie under the real worker
    assert (told["epoch"], told["step"], told["optimizer.param_groups.0.lr"]) == (
        "3", "1200", "0.03")
    message = _refused(path, capsys)
    assert message.endswith(": optimizer.param_groups.0.lr is 0.0003, reported as 0.03; epoch "
                            "is no value of the file; step is no value of the file")


def test_a_worker_that_hides_progress_is_refused(tmp_path, hostile, capsys) -> None:
    path = tmp_path / "train.pt"
    _trained(progress=True, path=path)
    code, text = _inspect(path, capsys)
    assert code == 0
    assert _lines(text, "training state:", "resume:") == [
        "training state: epoch 3 · step 1200 · optimizer: 1 parameter group, lr 0.0003 · 6 "
        "optimizer state tensors",
        "resume:   Ready to resume: weights, optimizer state and progress are saved"]
    hostile(drop=("epoch",), change={"step": {"type": "builtins.str", "repr": "'1200'"},
                                     "optimizer.param_groups.0.eps": {"shard": "x"}})
    assert "epoch" not in _worker_objects(path)
    assert _refused(path, capsys).endswith(
        ": optimizer.param_groups.0.eps is reported with fields of its own; epoch reported 0 "
        "times; step is builtins.int 1200, reported as builtins.str '1200'")


def test_a_worker_that_changes_a_hyper_parameter_is_refused(tmp_path, hostile, capsys) -> None:
    path = tmp_path / "last.ckpt"
    _lightning_style(path)
    code, text = _inspect(path, capsys)
    assert code == 0
    assert _lines(text, "training state:", "hyper-parameters:", "resume:") == [
        "training state: epoch 4 · global_step 812 · optimizer: 1 parameter group, lr 0.01 · "
        "2 optimizer state tensors",
        "hyper-parameters: lr 0.01 · hidden 8 · name 'net'",
        "resume:   Ready to resume: weights, optimizer state and progress are saved"]
    hostile(change={"hyper_parameters.lr": {"repr": "0.1"}})
    assert _worker_objects(path)["hyper_parameters.lr"] == "0.1"
    assert _refused(path, capsys).endswith(": hyper_parameters.lr is 0.01, reported as 0.1")


def test_a_worker_that_gives_a_safetensors_file_progress_is_refused(tmp_path, hostile,
                                                                     capsys) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "m.safetensors"
    save_file(_trained(progress=False)["model"], path)
    code, text = _inspect(path, capsys)
    assert code == 0 and not _lines(text, "training state:", "resume:")
    hostile(add={"epoch": "3"})
    assert _worker_objects(path, "safetensors") == {"epoch": "3"}
    assert _refused(path, capsys).endswith(": epoch is no value of the file")


def test_values_the_host_cannot_read_are_the_jailed_loaders_word(tmp_path, hostile,
                                                                 capsys) -> None:
    path = tmp_path / "counter.pt"
    state = _trained(progress=True)
    state["counts"] = collections.Counter(a=1)  # a global: the host's readers stop here
    torch.save(state, path)
    allow = ("--allow-global", "collections.Counter")
    code, text = _inspect(path, capsys, *allow)
    assert code == 0
    assert _lines(text, "checked:")[0].startswith("checked:  nothing here (the archive holds "
                                                  "more than tensors and plain values")
    assert _lines(text, "training state:", "resume:") == [
        "training state: epoch 3 · step 1200 · optimizer: 1 parameter group, lr 0.0003 · 6 "
        f"optimizer state tensors {UNCHECKED}",
        f"resume:   Ready to resume: weights, optimizer state and progress are saved {UNCHECKED}"]
    assert [f"17 non-tensor values {UNCHECKED}:"] == [x for x in text if "non-tensor" in x]
    hostile(change={"epoch": {"repr": "7"}})
    code, text = _inspect(path, capsys, *allow)  # nothing to hold it against: it says so
    assert code == 0 and _lines(text, "training state:")[0].startswith(
        "training state: epoch 7 · ") and _lines(text, "training state:")[0].endswith(UNCHECKED)


def test_the_host_reads_the_values_the_worker_reports(tmp_path) -> None:
    """Every plain value of a torch.save file, read here without torch, is the record the
    worker makes of the torch-loaded object: the honest answer always passes."""
    from inspector.rawtensors.readers import open_raw
    from inspector.sandbox.host.claims.objects import file_objects
    from inspector.tensors.load import split_leaves
    from inspector.tensors.plain.leaves import describe_object  # the worker's own

    zipped, legacy, light = tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "c.ckpt"
    state = _trained(progress=True, path=zipped)
    state["notes"] = {"name": "run 7", "none": None, "flag": True, "big": 2 ** 70,
                      "tuple": (1, 2.5, "x"), "long": "y" * 300, "neg": -0.0}
    torch.save(state, zipped)
    _trained(progress=False, legacy=True, path=legacy)
    _lightning_style(light)
    for path, fmt in ((zipped, "pytorch-zip"), (legacy, "pytorch-legacy"),
                      (light, "pytorch-zip")):
        _, objects = split_leaves(torch.load(path, weights_only=True))
        raw = open_raw(path)  # the read that locates the tensors gives the values too
        assert raw.format == fmt
        assert file_objects(str(path), raw) == [describe_object(k, v) for k, v in objects]


def test_a_gguf_files_quantized_records_are_the_workers(tmp_path, hostile, capsys) -> None:
    pytest.importorskip("gguf", reason="gguf is in the dev extra")
    from inspector.rawtensors.readers import open_raw
    from inspector.sandbox.host.claims.objects import file_objects
    from inspector.tensors.gguf_load import load_gguf
    from inspector.tensors.load import split_leaves
    from inspector.tensors.plain.leaves import describe_object

    path = factories.save_gguf_q4(tmp_path / "m.gguf")
    _, objects = split_leaves(load_gguf(str(path)))
    made = file_objects(str(path), open_raw(path))
    assert made == [describe_object(k, v) for k, v in objects] and made[0]["key"] == "q::ggml"
    assert _inspect(path, capsys)[0] == 0
    hostile(change={"q::ggml": {"repr": "Q8_0 tensor"}})
    problem = _refused(path, capsys).split("trusted: ")[1]
    assert problem.startswith("q::ggml is Q4_0 tensor, shape [2, 32], 36 bytes at offset ")
    assert problem.endswith("..., reported as Q8_0 tensor")
