"""`report RUN_DIR` carries the training guard's alarms and their attribution (JSON, HTML, PDF),
and an alarm fails the report with a problem line; on a run folder written here by the real
guard and ledger on a tiny CPU model."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import jsonschema
import pytest
import torch
from guard_support import batch, closure_for, guarded_run, tiny_model

from inspector.cli import main
from inspector.guard.guard import Guard, GuardConfig, GuardHalt
from inspector.report.render_json import load_schema


@pytest.fixture
def run(tmp_path):
    run = guarded_run(tmp_path / "run")
    # the report reads the run, never writes into it
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    yield run
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_json_report_lists_the_alarms_and_fails(run, tmp_path):
    out = tmp_path / "report.json"
    assert main(["report", str(run), "-o", str(out), "--quiet"]) == 1
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    assert doc["status"] == "failed"
    [ledger] = doc["runs"]
    nan, dup = ledger["alarms"]
    assert (nan["step"], nan["rule"], nan["value"], nan["threshold"]) == (6, "loss-nonfinite",
                                                                         "nan", None)
    assert (nan["action"], nan["attribution"], nan["scene"]) == ("skip", "reproducible", None)
    assert nan["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert nan["device"] is None and nan["device_text"].startswith("no GPU health recorded")
    assert (dup["step"], dup["rule"], dup["value"], dup["action"]) == (8, "sample-duplicated",
                                                                      4, "warn")
    problems = [p for p in doc["problems"] if "guard alarm" in p]
    assert problems == [
        "run run: guard alarm at step 6: loss-nonfinite (nan), skip, reproducible",
        "run run: guard alarm at step 8: sample-duplicated (4), warn"]
    # the checkpoints themselves are intact: the alarms alone fail the report
    assert (ledger["intact"], ledger["changed"], ledger["missing"]) == (2, 0, 0)


def test_a_halted_alarm_names_its_scene_in_the_report(tmp_path):
    run = tmp_path / "halted"
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = Guard(run, GuardConfig(warmup=3, action="halt"))
    with pytest.raises(GuardHalt):
        for step in range(6):
            x, y = batch(step)
            if step == 4:
                x[0, 0] = float("inf")  # tanh saturates: a finite loss, NaN gradients
            guard.run_step(closure_for(model, opt, (x, y)), model, opt)
    guard.close()
    out = tmp_path / "report.json"
    assert main(["report", str(run), "-o", str(out), "--quiet"]) == 1
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    [alarm] = doc["runs"][0]["alarms"]
    assert (alarm["step"], alarm["rule"], alarm["action"]) == (4, "grad_norm-nonfinite", "halt")
    scene = Path(alarm["scene"])
    assert scene.parent == run / "scenes" and scene.is_dir()
    [line] = [p for p in doc["problems"] if "guard alarm" in p]
    assert line.startswith("run halted: guard alarm at step 4: grad_norm-nonfinite (nan), halt")
    assert line.endswith(f", scene {scene}")


def test_html_report_shows_the_alarm_table(run, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(out), "--quiet"]) == 1
    text = out.read_text()
    table = text[text.index("<h3>Guard alarms</h3>"):]
    for cell in ("First non-finite parameters", "loss-nonfinite", "skip, reproducible",
                 "0.weight, 0.bias, 2.weight, 2.bias", "sample-duplicated"):
        assert cell in table
    assert "guard alarm at step 6: loss-nonfinite (nan), skip, reproducible" in text
    # the checkpoints' code is clean, but the banner leads with the failed run, never "safe"
    banner = text[text.index('class="headline"'):text.index("</td>", text.index('class="banner"'))]
    assert "SAFE TO OPEN" not in banner and "CHECKS FAILED" in banner, banner


def test_the_summary_line_leads_with_the_failed_checks(run, tmp_path, capsys):
    assert main(["report", str(run), "-o", str(tmp_path / "report.json")]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("PROBLEM: ") and re.search(r"\b\d+ problems?;", first), first


@pytest.mark.skipif(shutil.which("pdftotext") is None,
                    reason="pdftotext not installed (apt-get install poppler-utils)")
def test_pdf_report_shows_the_alarms(run, tmp_path):
    out = tmp_path / "report.pdf"
    assert main(["report", str(run), "-o", str(out), "--quiet"]) == 1
    text = unicodedata.normalize("NFKC", subprocess.run(  # Qt's PDF writes "fi" as a ligature
        ["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout)
    table = text[text.index("Guard alarms"):]
    assert "loss-nonfinite" in table and "reproducible" in table and "0.weight" in table
