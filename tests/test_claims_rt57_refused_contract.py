"""A refused inspection keeps none of the jailed loader's records in the contract itself (round
57): the views dropped them, but `client.inspect_file`'s contract, which `report` keeps in its
batch results file, still listed the refused tensors (`model.w` with the loader's repaired
values beside the error). Beside the honest twin, whose records stand."""

from __future__ import annotations

import torch
from hostile_worker import REPAIRED, flipped, weights

from inspector.sandbox.host.client import inspect_file


def _flipped_file(tmp_path):
    w = weights()
    w["w"][3, 5] = 0.75
    path = tmp_path / "flip.pt"
    torch.save({"model.w": flipped(w["w"]), "step": 3}, path)
    return path


def test_a_refused_contract_lists_no_record_of_the_loader(tmp_path, hostile):
    path = _flipped_file(tmp_path)
    honest = inspect_file(path).contract
    assert honest["error"] is None and [t["key"] for t in honest["tensors"]] == ["model.w"]
    hostile(REPAIRED)
    refused = inspect_file(path).contract
    assert refused["error"]["code"] == "claim_refuted"
    assert refused["tensors"] == [] and refused["objects"] == []
    assert refused["unique_storage"] is None and refused["health"] is None
