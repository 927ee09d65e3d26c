"""A tensor saved with its conjugate or negative bit set (torch.save keeps the bit and the
unconjugated storage): inspect describes, convert writes and diff compares the values it
stands for. Before, inspect and convert failed on it ("view is not supported for conjugate
view tensors"), and safetensors' own save_file silently writes the unconjugated values."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.cli import main
from inspector.sandbox.host.client import convert_file, diff_files, inspect_file

pytest_plugins = ("sandbox_fixtures",)  # fixture: unchanged


@pytest.fixture
def views(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    base = torch.tensor([1 + 2j, 3 - 4j, -5 + 0.5j], dtype=torch.complex64)
    other = torch.tensor([0.25 - 1j, 7 + 2j], dtype=torch.complex64)
    state = {"base": base, "conj": base.conj(),  # conj shares base's storage
             "neg": other.conj().imag}  # a float view of a complex storage, negated
    assert state["conj"].is_conj() and state["neg"].is_neg()
    path = tmp_path / "views.pt"
    torch.save(state, path)
    meant = {k: v.resolve_conj().resolve_neg() for k, v in state.items()}
    return path, meant


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def test_inspect_describes_the_values_the_views_stand_for(views, unchanged) -> None:
    path, meant = views
    with unchanged(path):
        result = inspect_file(path)
    assert result.error is None, result.error
    by_key = {t.key: t for t in result.tensors}
    assert {k: by_key[k].digest for k in meant} == {k: _digest(v) for k, v in meant.items()}
    assert by_key["neg"].mean == pytest.approx(float(meant["neg"].double().mean()))
    assert by_key["conj"].digest != by_key["base"].digest


def test_convert_writes_the_conjugated_values_and_diff_finds_them_identical(
        views, unchanged, tmp_path) -> None:
    path, meant = views
    out = tmp_path / "views.safetensors"
    with unchanged(path):
        report = convert_file(path, out)
    assert report["verified"] is True and not report["aliases"]
    written = load_file(out)
    assert all(torch.equal(written[k], v) for k, v in meant.items())
    diff = diff_files(path, out)
    assert diff["identical"] is True and diff["counts"] == {"identical": len(meant)}, diff["counts"]
    assert main(["diff", str(path), str(out)]) == 0
    # what the tool a user would otherwise use does with the same tensor
    save_file({"conj": torch.load(path, weights_only=True)["conj"]}, tmp_path / "plain.st")
    assert not torch.equal(load_file(tmp_path / "plain.st")["conj"], meant["conj"])
