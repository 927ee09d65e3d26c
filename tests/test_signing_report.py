"""The report carries each signed folder's signature verdict, first: JSON (valid against the
schema), the HTML summary, and the exit status when a signature does not hold or is missing."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from safetensors.numpy import save_file
from signing_keys import write_key

from inspector.cli import main
from inspector.report.render_json import load_schema


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "model"
    folder.mkdir()
    save_file({"w": np.arange(32, dtype=np.float32)}, str(folder / "model.safetensors"))
    pem, pub = write_key(tmp_path, "key")
    assert main(["sign", str(folder), "--private-key", str(pem)]) == 0
    return folder, pub


def test_the_report_leads_with_the_signature(signed, tmp_path, capsys) -> None:
    folder, pub = signed
    out = tmp_path / "report.json"
    assert main(["report", str(folder), "-o", str(out), "--public-key", str(pub)]) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    [verdict] = doc["signatures"]
    assert verdict["state"] == "intact" and verdict["files_signed"] == 1
    assert doc["status"] == "passed"

    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-4] ^= 0x01
    (folder / "model.safetensors").write_bytes(bytes(data))
    html = tmp_path / "report.html"
    assert main(["report", str(folder), "-o", str(html), "--public-key", str(pub)]) == 1
    page = html.read_text()
    assert page.index("Signature") < page.index("Code safety")
    assert main(["report", str(folder), "-o", str(out), "--force", "--public-key",
                 str(pub)]) == 1
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["signatures"][0]["state"] == "changed"
    assert doc["problems"][0].startswith(f"signature {folder / 'model.sig'}: changed")


def test_an_unsigned_folder_fails_when_a_key_is_given(signed, tmp_path, capsys) -> None:
    folder, pub = signed
    (folder / "model.sig").unlink()
    out = tmp_path / "report.json"
    assert main(["report", str(folder), "-o", str(out)]) == 0  # nothing asked, nothing said
    assert json.loads(out.read_text())["signatures"] == []
    assert main(["report", str(folder), "-o", str(out), "--force", "--public-key",
                 str(pub)]) == 1
    doc = json.loads(out.read_text())
    assert doc["signatures"][0]["state"] == "unsigned"
    assert "no signature at" in doc["problems"][0]


def test_the_sarif_log_carries_the_signature_verdict(signed, tmp_path) -> None:
    folder, pub = signed
    sarif = tmp_path / "scan.sarif"
    assert main(["scan", str(folder), "--sarif", str(sarif), "--public-key", str(pub)]) == 0
    [run] = json.loads(sarif.read_text())["runs"]
    assert [v["state"] for v in run["properties"]["signatures"]] == ["intact"]
    assert not [r for r in run["results"] if r["ruleId"].startswith("signature/")]

    (folder / "extra.txt").write_text("unsigned, but not a change")
    (folder / "model.safetensors").write_bytes(b"\0" + (folder / "model.safetensors")
                                               .read_bytes()[1:])
    main(["scan", str(folder), "--sarif", str(sarif), "--force", "--public-key", str(pub)])
    [run] = json.loads(sarif.read_text())["runs"]
    [result] = [r for r in run["results"] if r["ruleId"].startswith("signature/")]
    assert result["ruleId"] == "signature/changed" and result["level"] == "error"
    assert result["properties"]["signer"].startswith("ECDSA P-256 key")

    main(["scan", str(folder), "--sarif", str(sarif), "--force"])  # no key: named, a note
    [run] = json.loads(sarif.read_text())["runs"]
    [result] = [r for r in run["results"] if r["ruleId"].startswith("signature/")]
    assert result["ruleId"] == "signature/unverified" and result["level"] == "note"
    assert "pass --public-key" in result["message"]["text"]
