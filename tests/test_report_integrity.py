"""Integrity evidence in the report: a comparison with another copy (verdict, problem line and
flips) and a manifest verification judged as `sha256sum -c` judges it."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from safetensors.torch import save_file

from inspector.core import envinfo
from inspector.report import export
from inspector.report.model import FileEvidence, SessionEvidence
from inspector.report.render_json import load_schema
from inspector.sandbox.worker.diff import diff_checkpoints
from inspector.tensors.sources import open_checkpoint

pytestmark = pytest.mark.usefixtures("qapp")  # HTML charts draw with Qt


def _flipped_pair(tmp_path):
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    save_file({"w": torch.ones(16), "b": torch.zeros(4)}, good)
    data = bytearray(good.read_bytes())
    offset = {s.key: s.offset for s in open_checkpoint(str(good)).tensors}["w"]
    data[offset + 4 * 7 + 3] ^= 0x40  # element 7: 1.0 becomes about 3.4e38
    bad.write_bytes(bytes(data))
    return good, bad, offset + 4 * 7 + 3


def test_report_carries_the_comparison_and_names_it_a_problem(tmp_path):
    good, bad, byte = _flipped_pair(tmp_path)
    diff = diff_checkpoints(open_checkpoint(str(good)), open_checkpoint(str(bad)))
    diff["b"] = {"path": str(bad), "format": "safetensors"}
    session = SessionEvidence([FileEvidence(str(good), diff=diff)],
                              environment=envinfo.collect(probe_torch=False))
    export(session, tmp_path / "r.json")
    export(session, tmp_path / "r.html")
    doc = json.loads((tmp_path / "r.json").read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    (f,) = doc["files"]
    comparison = f["comparison"]
    assert comparison["status"] == "fail" and comparison["other"] == str(bad)
    assert comparison["single_bit_flips"] == 1
    (tensor,) = comparison["tensors"]
    (flip,) = tensor["bitflips"]
    assert (tensor["key"], flip["index"], flip["bit"], flip["kind"]) == ("w", 7, 30, "exponent")
    assert flip["file_offset_a"] == byte and flip["before_value"] == "1"
    assert any(p.startswith(f"differs from {bad} in 1 tensor, 1 single-bit flip")
               for p in f["problems"])
    page = (tmp_path / "r.html").read_text()
    assert "Comparison with another copy" in page and "0x3f800000" in page and str(byte) in page


def test_identical_copies_pass(tmp_path):
    good, _bad, _byte = _flipped_pair(tmp_path)
    diff = diff_checkpoints(open_checkpoint(str(good)), open_checkpoint(str(good)))
    session = SessionEvidence([FileEvidence(str(good), diff=diff)],
                              environment=envinfo.collect(probe_torch=False))
    export(session, tmp_path / "same.json")
    (f,) = json.loads((tmp_path / "same.json").read_text())["files"]
    assert f["comparison"]["status"] == "pass" and f["comparison"]["tensors"] == []
    assert not any(p.startswith("differs from") for p in f["problems"])


@pytest.mark.parametrize(("strict", "status"), [(False, "pass"), (True, "fail")])
def test_an_extra_file_fails_verification_only_when_strict(tmp_path, strict, status):
    good, _bad, _byte = _flipped_pair(tmp_path)
    verify = {"strict": strict, "errors": [], "tensors": [], "files": [
        {"path": "good.safetensors", "status": "ok", "expected": "ab" * 32, "actual": "ab" * 32},
        {"path": "README.md", "status": "extra", "expected": None, "actual": None}]}
    session = SessionEvidence([FileEvidence(str(good), verify=verify)],
                              environment=envinfo.collect(probe_torch=False))
    export(session, tmp_path / "v.json")
    (f,) = json.loads((tmp_path / "v.json").read_text())["files"]
    assert f["verification"]["status"] == status
