"""The report's "Code carried by the archive" section: a TorchScript archive's code files, sizes
and flags (not their text), in the JSON (validated against schema.json) and the HTML; no such
section for a plain checkpoint."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import jsonschema
import pytest

from inspector.report import SessionEvidence, build_report
from inspector.report.model import FileEvidence
from inspector.report.render_html import render_html
from inspector.report.render_json import load_schema
from inspector.sandbox.host.client import inspect_file

torch = pytest.importorskip("torch")

CALL = 'os.system("true")'


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("report-code")
    scripted, evil, plain = folder / "scripted.pt", folder / "evil.pt", folder / "plain.pt"
    torch.manual_seed(15)
    module = torch.nn.Sequential(torch.nn.Linear(3, 2))
    torch.jit.save(torch.jit.script(module), str(scripted))
    torch.save(module.state_dict(), plain)
    edited = []
    with zipfile.ZipFile(scripted) as zin, zipfile.ZipFile(evil, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            # Found by its class, not its name: a Sequential scripted earlier in this process
            # moves this one to container/___torch_mangle_N.py.
            if info.filename.endswith(".py") and b"class Sequential(" in data:
                data = data.decode().replace(") -> Tensor:\n", f") -> Tensor:\n    {CALL}\n",
                                             1).encode()
                edited.append(info.filename)
            zout.writestr(info, data)
    assert len(edited) == 1, edited  # Sequential's forward now calls os.system
    return {"scripted": scripted, "evil": evil, "plain": plain, "edited": edited[0]}


def _report(*paths: Path):
    files = [FileEvidence(str(p), inspect=inspect_file(p)) for p in paths]
    return build_report(SessionEvidence(files)), files


def test_report_lists_the_code_files_and_flags_and_validates(archives):
    report, files = _report(archives["scripted"], archives["evil"], archives["plain"])
    doc = json.loads(report.dumps())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    clean, evil, plain = doc["files"]
    names = [c["name"] for c in files[0].inspect.code]
    assert [f["name"] for f in clean["code"]["files"]] == names
    assert clean["code"]["kind"] == "torchscript" and clean["code"]["flags"] == 0
    assert all(f["flags"] == [] and f["size"] > 0 for f in clean["code"]["files"])
    flagged = [f for f in evil["code"]["files"] if f["flags"]]
    assert [f["flags"] for f in flagged] == [["names the Python module os"]]
    assert archives["edited"].endswith(flagged[0]["name"]) and evil["code"]["flags"] == 1
    assert "text" not in flagged[0] and CALL not in report.dumps()  # names and flags only
    assert plain.get("code") is None
    html = render_html(report)
    assert html.count('data-section="code"') == 2  # the two archives, not the plain file
    assert "Code carried by the archive" in html and "names the Python module os" in html


def test_flagged_code_is_a_problem_and_fails_the_checklist(archives):
    """An archive whose code calls os.system: the exported report names the flagged file under
    its problems and fails the 'cannot run code' item with it; the clean archive's item fails
    only for carrying code, and it has no code problem."""
    report, _ = _report(archives["scripted"], archives["evil"])
    doc = json.loads(report.dumps())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    clean, evil = doc["files"]
    (problem,) = [p for p in evil["problems"] if "code flagged" in p]
    assert problem.startswith("torchscript code flagged (1): ")
    flag = f"{Path(archives['edited']).name}: names the Python module os"
    assert flag in problem
    assert f"evil.pt: {problem}" in doc["problems"]
    item = next(i for i in evil["checklist"] if i["id"] == "safe_format")
    assert item["status"] == "fail" and flag in item[
        "detail"] and "torch.jit.load runs" in item["detail"]
    assert not [p for p in clean["problems"] if "code flagged" in p]
    item = next(i for i in clean["checklist"] if i["id"] == "safe_format")
    assert item["status"] == "fail" and "none flagged" in item["detail"]
    html = render_html(report)
    assert "torchscript code flagged (1)" in html
