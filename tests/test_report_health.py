"""Weights health in the report: a NaN checkpoint is safe code with a weights problem."""

from __future__ import annotations

import json
import math
from pathlib import Path

import factories
import jsonschema
import pytest
import torch

from inspector.cli import main
from inspector.core import envinfo
from inspector.report import SessionEvidence, build_report
from inspector.report.model import FileEvidence
from inspector.report.render_html import render_html
from inspector.report.render_json import load_schema

pytestmark = pytest.mark.usefixtures("qapp")


@pytest.fixture
def fast_env(monkeypatch):
    """Skip the environment's torch subprocess probe."""
    real = envinfo.collect
    monkeypatch.setattr(envinfo, "collect", lambda probe_torch=True: real(probe_torch=False))


def _strict(path: Path) -> dict:
    doc = json.loads(path.read_text(), parse_constant=lambda t: pytest.fail(f"token {t}"))
    validator = jsonschema.Draft202012Validator(load_schema())
    validator.validate(doc)
    return doc


def test_nan_checkpoint_report_is_safe_with_a_weights_problem(tmp_path, fast_env):
    weight = torch.randn(8, 8)
    weight[1, 1] = math.nan
    path = tmp_path / "nan.pt"
    torch.save({"fc.weight": weight, "fc.bias": torch.zeros(8)}, path)
    out = tmp_path / "r.json"
    assert main(["report", str(path), "-o", str(out)]) == 1
    doc = _strict(out)
    f = doc["files"][0]
    assert f["verdict"] == "safe" and doc["verdict"] == "safe"
    assert f["health"]["status"] == "problem"
    assert [x["key"] for x in f["health"]["findings"]] == ["fc.weight"]
    checks = {c["id"]: c["status"] for c in f["checklist"]}
    assert checks["weights_health"] == "fail" and checks["weights_only"] == "pass"
    assert doc["problems"] == ["nan.pt: weights health problem in 1 tensor: fc.weight"]
    html = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(html)]) == 1
    text = html.read_text()
    assert 'data-section="health"' in text and "nonfinite-weights" in text
    # the app's words and colours for the same file (core.badges): never SAFE in green
    assert "Code safety" in text and ">No code found<" in text and ">Weights corrupted<" in text
    assert ">SAFE<" not in text


def test_lightning_inf_state_does_not_fail_the_report(tmp_path, fast_env):
    path = tmp_path / "lightning.ckpt"
    torch.save({"state_dict": {"w": torch.randn(4, 4)},
                "callbacks": {"ModelCheckpoint{'monitor': 'val'}": {
                    "kth_value": torch.tensor(math.inf), "best_model_score": torch.tensor(0.5)}},
                "epoch": 3, "global_step": 120}, path)
    out = tmp_path / "r.json"
    assert main(["report", str(path), "-o", str(out)]) == 0
    doc = _strict(out)
    f = doc["files"][0]
    assert doc["problems"] == [] and f["health"]["status"] == "ok"
    assert [x["code"] for x in f["health"]["findings"]] == ["nonfinite-state"]
    assert f["tensors"]["nonfinite"][0]["key"].endswith("kth_value")


def test_crc_damaged_file_is_a_damage_problem_not_a_suspicion(tmp_path, fast_env):
    path = factories.crc_damaged(tmp_path / "damaged.pt")
    out = tmp_path / "r.json"
    assert main(["report", str(path), "-o", str(out)]) == 1
    doc = _strict(out)
    (problem,) = doc["problems"]
    assert problem.startswith("damaged.pt: damaged: zip-crc-mismatch: CRC-32 ")
    assert problem.endswith("[damaged/data/0]")


def test_tied_weights_are_counted_once_and_old_results_are_judged(tmp_path):
    path = tmp_path / "m.pt"
    path.write_bytes(b"m")
    row = {"key": "w", "dtype": "float32", "shape": [4, 4], "numel": 16, "nbytes": 64,
           "digest": "0" * 64, "min": 0.0, "max": 0.0, "nan": 0, "inf": 2, "zeros": 14}
    inspect = {"path": str(path), "size": 1, "sha256": "ab" * 32, "format": "pytorch-zip",
               "scan": {"path": str(path), "format": "pytorch-zip", "verdict": "safe",
                        "weights_only_ok": True, "globals": [], "findings": [], "error": None},
               "sandbox": {"level": "full"}, "digest_algorithm": "sha256",
               "tensors": [row, {**row, "key": "tied", "shared_with": ["w"]}], "objects": [],
               "error": None, "unique_storage": {"storages": 1, "numel": 16, "nbytes": 64}}
    report = build_report(SessionEvidence([FileEvidence(str(path), inspect=inspect)]))
    f = report.files[0]
    assert (f.tensors.parameters, f.tensors.unique_parameters) == (32, 16)
    assert f.health.status == "problem"  # judged from the rows: no `health` key in the result
    assert [x["key"] for x in f.health.findings] == ["w"]
    assert "Unique storage" in render_html(report)
