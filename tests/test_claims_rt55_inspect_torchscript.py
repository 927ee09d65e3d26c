"""A TorchScript or torch.export archive's weights are checked here: the host locates them with
the static parser the worker's loader reads them with (`layout.torchscript`), so a worker that
describes a flipped exponent bit as an ordinary value is refuted instead of reported as
"Weights OK" with the weights marked unchecked."""

from __future__ import annotations

import json

import torch
from hostile_worker import REPAIRED, flipped

from inspector.cli import main
from inspector.rawtensors.readers import open_raw


def _scripted(tmp_path, flip: bool):
    """A scripted Linear(8, 8), saved; one exponent bit of its weight flipped if `flip`."""
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 8)
    if flip:
        with torch.no_grad():
            module.weight.copy_(flipped(module.weight.detach()))
    path = tmp_path / ("flip.pt" if flip else "clean.pt")
    torch.jit.script(module).save(str(path))
    return path


def _inspect(path, capsys) -> dict:
    main(["inspect", str(path), "--json"])
    return json.loads(capsys.readouterr().out)


def test_the_archives_weights_are_located_here(tmp_path) -> None:
    path = _scripted(tmp_path, flip=False)
    raw = open_raw(path)
    assert raw.format == "torchscript"
    weights = torch.jit.load(str(path)).state_dict()
    assert sorted(t.key for t in raw.tensors) == sorted(weights)
    for t in raw.tensors:
        assert b"".join(bytes(c) for c in t.read()) == weights[t.key].numpy().tobytes()


def test_an_honest_inspection_is_checked(tmp_path, capsys) -> None:
    report = _inspect(_scripted(tmp_path, flip=True), capsys)
    assert report["error"] is None and report["claims"]["checked"] is True
    assert report["health"]["status"] != "ok"  # the flipped bit, as the loader finds it


def test_a_repaired_outlier_is_refuted(tmp_path, hostile, capsys) -> None:
    path = _scripted(tmp_path, flip=True)
    hostile(REPAIRED)
    report = _inspect(path, capsys)
    assert report["error"]["code"] == "claim_refuted"
    assert report["health"] is None
