"""Every field a view reads from the jailed worker's records says it is the loader's word where
its answer was not checked here: `inspect`'s totals, training state, hyper-parameters,
optimizer ids, architecture and resume lines, the report's model section (JSON
`model.unchecked`, the HTML rows) and the app's Overview rows. A file holding a `torch.dtype`
cannot be read here, so a worker may say lr 0.1 of a file that holds 0.001; before, the
hyper-parameters and optimizer ids lines, and the report's training state, said so unmarked.
A file read here has its values checked, and nothing is marked."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from inspector.checkpoint.results import ClaimCheck, InspectResult
from inspector.cli import main
from inspector.report.render_json import load_schema

pytest_plugins = ("gui_fixtures",)  # fixtures: window

MARK = "(as reported by the jailed loader"
LR_LIE = """
    import inspector.sandbox.worker.inspect_op as op
    real = op._send_objects
    def lying(emit, objects):
        for o in objects:
            if o["key"].endswith("lr"):
                o["repr"] = "0.1"
        return real(emit, objects)
    op._send_objects = lying
"""
FIELDS = ("training state:", "hyper-parameters:", "optimizer ids:", "architecture:",
          "resume:")


def _training(path, unreadable: bool) -> None:
    """A Lightning-style training checkpoint (lr 0.001), with a `torch.dtype` if
    `unreadable` (which the host's readers cannot read)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    extra = {"precision_dtype": torch.float16} if unreadable else {}
    torch.save({"state_dict": model.state_dict(), "epoch": 3, "global_step": 120,
                "optimizer_states": [optimizer.state_dict()],
                "hyper_parameters": {"lr": 0.001, "hidden": 4}, **extra}, path)


def _lines(path, capsys) -> list[str]:
    assert main(["inspect", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def _field_lines(lines: list[str]) -> list[str]:
    found = [line for line in lines
             if line.startswith(FIELDS) or (line[:1].isdigit() and " tensors, " in line)]
    assert len(found) == len(FIELDS) + 1, found
    return found


def test_every_worker_field_of_an_unchecked_answer_is_marked(tmp_path, hostile,
                                                              capsys) -> None:
    path = tmp_path / "hp.ckpt"
    _training(path, unreadable=True)
    hostile(LR_LIE)
    lines = _field_lines(_lines(path, capsys))
    assert any("lr 0.1" in line for line in lines)  # the lie, shown as the loader's word
    assert all(MARK in line for line in lines), lines


def test_fields_of_a_checked_answer_are_not_marked(tmp_path, capsys) -> None:
    path = tmp_path / "hp.ckpt"
    _training(path, unreadable=False)
    lines = _field_lines(_lines(path, capsys))
    assert not any(MARK in line for line in lines), lines


@pytest.mark.usefixtures("qapp")
def test_the_reports_model_section_says_whose_word_it_is(tmp_path, hostile,
                                                         fast_env) -> None:
    path = tmp_path / "hp.ckpt"
    _training(path, unreadable=True)
    hostile(LR_LIE)
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    main(["report", str(path), "-o", str(out), "--quiet"])
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    model = doc["files"][0]["model"]
    assert "lr 0.1" in model["training"]
    assert model["unchecked"].startswith("as reported by the jailed loader: not checked here")
    main(["report", str(path), "-o", str(html), "--quiet"])
    text = html.read_text()
    assert "lr 0.1" in text
    assert "(as reported by the jailed loader)" in text.split("lr 0.1", 1)[1].split("<", 1)[0]


@pytest.mark.usefixtures("qapp")
def test_a_checked_reports_model_section_is_not_marked(tmp_path, fast_env) -> None:
    path = tmp_path / "hp.ckpt"
    _training(path, unreadable=False)
    out = tmp_path / "r.json"
    main(["report", str(path), "-o", str(out), "--quiet"])
    assert json.loads(out.read_text())["files"][0]["model"]["unchecked"] is None


def test_the_overviews_rows_say_whose_word_they_are() -> None:
    from inspector.gui.panes.overview_pane import _whose  # the app's module, imported late

    unchecked = InspectResult(path="x", claims=ClaimCheck(reason="a dtype"))
    checked = InspectResult(path="x", claims=ClaimCheck(checked=True, tensors=2))
    assert _whose(unchecked, "epoch 3") == "epoch 3 (as reported by the jailed loader)"
    assert _whose(checked, "epoch 3") == "epoch 3"
    assert _whose(unchecked, "—") == "—"


def test_the_overview_of_an_unchecked_file_marks_its_rows(window, qtbot, tmp_path,
                                                          artifacts) -> None:
    """The real pane, not only its helper: a file the host cannot read shows its Contents,
    Architecture and Training rows as the loader's word (and a screenshot to look at)."""
    from gui_support import wait_loaded
    from PySide6.QtWidgets import QLabel

    from inspector.gui.panes.overview_pane import Row

    path = tmp_path / "unreadable.ckpt"
    _training(path, unreadable=True)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    window.resize(1280, 800)
    window.tabs.setCurrentWidget(window.overview)
    qtbot.waitUntil(lambda: window.stage_label.text() == "Ready", timeout=20000)
    for row in (Row.CONTENTS, Row.ARCHITECTURE, Row.TRAINING):
        assert MARK in window.overview.fields[row].text(), row
    assert MARK in window.overview.model_summary.resume.text()  # the checklist's headline
    assert MARK in window.overview.health_banner.accessibleDescription() or MARK in "".join(
        label.text() for label in window.overview.health_banner.findChildren(QLabel))
    assert window.grab().save(str(artifacts / "gui" / "overview-unchecked-marks.png"))
