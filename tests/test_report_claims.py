"""A report never presents the jailed loader's word on the weights as checked.

Weights health is judged from values the user's process checks against the file's own bytes
(`sandbox.host.claims`). A pickle that also holds a `torch.dtype` cannot be read there, so
the values are the worker's alone, and a worker the input took over can describe repaired
weights. The report then carries inspect's `claims`, marks weights_health not checked here and
lists it in its summary; the verdict and exit code stay the loader's word, as inspect's do.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from hostile_worker import LOADER_WORD, REASON, REPAIRED

from inspector.cli import main
from inspector.report.render_json import load_schema

pytestmark = pytest.mark.usefixtures("qapp")


def _tampered(path, extra: dict) -> None:
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(16, 16, generator=g), torch.randn(16, generator=g)
    w.view(torch.int32)[3, 5] ^= 1 << 30  # one exponent bit flipped
    torch.save({"model": {"w": w, "b": b}, **extra}, path)


def _doc(path) -> dict:
    doc = json.loads(path.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    return doc


def _health_check(f: dict) -> dict:
    return next(c for c in f["checklist"] if c["id"] == "weights_health")


def test_repaired_weights_described_by_the_loader_are_not_checked_here(tmp_path, hostile,
                                                                       fast_env) -> None:
    path = tmp_path / "dt.pt"
    _tampered(path, {"dtype": torch.float16})
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    # the honest loader: the flipped exponent fails, and the report says whose word that is
    assert main(["report", str(path), "-o", str(out), "--quiet"]) == 1
    doc = _doc(out)
    f = doc["files"][0]
    assert f["health"]["status"] == "problem" and _health_check(f)["status"] == "fail"
    assert _health_check(f)["detail"].startswith(LOADER_WORD)
    assert f["claims"]["checked"] is False and REASON in f["claims"]["reason"]
    assert doc["unchecked"] == [f"dt.pt: weights health (problem) {LOADER_WORD}"
                                f"{f['claims']['reason']}"]

    hostile(REPAIRED)
    # the lie: health ok on the loader's word; verdict and exit as inspect gives them
    assert main(["report", str(path), "-o", str(out), "--quiet", "--force"]) == 0
    doc = _doc(out)
    f = doc["files"][0]
    assert doc["verdict"] == "safe" and f["health"]["status"] == "ok"
    check = _health_check(f)
    assert check["status"] == "not_checked"
    assert check["detail"].startswith(LOADER_WORD) and REASON in check["detail"]
    assert f["health"]["unchecked"].startswith(LOADER_WORD)
    assert f["claims"]["checked"] is False and f["claims"]["tensors"] == 0
    assert "as reported by the jailed loader" in f["claims"]["words"]
    assert doc["unchecked"] == [f"dt.pt: weights health (ok) {LOADER_WORD}"
                                f"{f['claims']['reason']}"]

    assert main(["report", str(path), "-o", str(html), "--quiet"]) == 0
    text = html.read_text()
    summary = text.split('data-section="summary"')[1].split("</section>")[0]
    assert "1 verdict rests on the jailed loader&#x27;s word, not checked here" in summary
    assert "Not checked here" in summary and REASON in summary
    assert "(as reported by the jailed loader)" in summary  # the Weights health cell
    assert "Judged from" in text and "Checked here" in text
    assert "– not checked" in text


def test_weights_checked_here_carry_no_caveat(tmp_path, hostile, fast_env) -> None:
    path = tmp_path / "plain.pt"
    _tampered(path, {"epoch": 3})  # plain values: the file's bytes are read here
    out = tmp_path / "r.json"
    hostile(REPAIRED)  # the lie is caught: its values are not the file's
    main(["report", str(path), "-o", str(out), "--quiet"])
    f = _doc(out)["files"][0]
    assert f["health"] is None or f["health"]["status"] != "ok"
    assert _health_check(f)["status"] != "pass"

    hostile("pass")  # an honest loader
    assert main(["report", str(path), "-o", str(out), "--quiet", "--force"]) == 1
    doc = _doc(out)
    f = doc["files"][0]
    assert doc["unchecked"] == [] and f["health"]["unchecked"] is None
    assert f["claims"]["checked"] is True and f["claims"]["tensors"] == 2
    assert _health_check(f)["status"] == "fail"
    assert "jailed loader" not in _health_check(f)["detail"]
