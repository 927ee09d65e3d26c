"""`ckpt-inspector scan` as a user runs it: text, --json contract, --sarif, exit codes."""

from __future__ import annotations

import json
import subprocess

import pytest
from factories import call, save_state_dict, touch_cmd

CONTRACT = {"path", "format", "verdict", "weights_only_ok", "globals", "findings", "error"}


def scan(python_exe, *args, cwd=None):
    return subprocess.run([python_exe, "-m", "inspector", "scan", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


@pytest.fixture
def folder(tmp_path, canary):
    (tmp_path / "models").mkdir()
    save_state_dict(tmp_path / "models" / "good.pt")
    (tmp_path / "models" / "custom.pkl").write_bytes(
        b"\x80\x02c__main__\nNet\nq\x00)\x81q\x01.")
    (tmp_path / "models" / "evil.bin").write_bytes(call("os", "system", touch_cmd(canary)))
    return tmp_path / "models"


def test_exit_code_is_the_worst_verdict(python_exe, folder, tmp_path):
    assert scan(python_exe, folder / "good.pt").returncode == 0
    assert scan(python_exe, folder / "good.pt", folder / "custom.pkl").returncode == 1
    assert scan(python_exe, folder).returncode == 2
    (tmp_path / "notes.txt").write_text("not a model")
    assert scan(python_exe, folder, tmp_path / "notes.txt").returncode == 3


def test_human_output(python_exe, folder):
    proc = scan(python_exe, folder)
    lines = proc.stdout.splitlines()
    heads = [line for line in lines if not line.startswith(" ")]
    assert len(heads) == 3
    assert any(h.startswith("DANGEROUS") and h.rstrip().endswith("weights_only: refused)")
               for h in heads)
    assert any(h.startswith("SAFE") and "good.pt" in h and "weights_only: loads" in h
               for h in heads)
    assert any("os.system" in line and "can run code" in line for line in lines)
    assert "3 files: 1 safe, 1 suspicious, 1 dangerous" in proc.stderr


def test_json_lines_contract(python_exe, folder):
    proc = scan(python_exe, "--json", folder)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert set(row) >= CONTRACT
        assert row["verdict"] in ("safe", "suspicious", "dangerous", "error")
        for g in row["globals"]:
            assert {"module", "name", "count", "severity"} <= set(g)
        for f in row["findings"]:
            assert {"severity", "code", "message", "member", "offset"} <= set(f)
    evil = next(r for r in rows if r["path"].endswith("evil.bin"))
    assert evil["globals"][0]["module"] == "os" and evil["globals"][0]["count"] == 1
    good = next(r for r in rows if r["path"].endswith("good.pt"))
    assert good["weights_only_ok"] is True and good["format"] == "pytorch-zip"


def test_sarif(python_exe, folder, tmp_path):
    out = tmp_path / "scan.sarif"
    assert scan(python_exe, folder, "--sarif", out).returncode == 2
    log = json.loads(out.read_text())
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    assert run["tool"]["driver"]["name"] == "ckpt-inspector"
    rule_ids = {r["id"] for r in run["tool"]["driver"]["rules"]}
    results = run["results"]
    assert {r["ruleId"] for r in results} <= rule_ids
    evil = [r for r in results if "os.system" in r["message"]["text"]]
    assert evil and evil[0]["level"] == "error"
    uri = evil[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.endswith("evil.bin")
    refused = scan(python_exe, folder, "--sarif", out)
    assert refused.returncode == 4 and "--force" in refused.stderr
    assert scan(python_exe, folder, "--sarif", out, "--force").returncode == 2


def test_not_a_model_gets_a_clear_message(python_exe, tmp_path):
    png = tmp_path / "cat.pt"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    proc = scan(python_exe, png, tmp_path / "missing.pt")
    assert proc.returncode == 3
    assert "not a model file" in proc.stdout and "cannot read" in proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout


def test_empty_folder(python_exe, tmp_path):
    proc = scan(python_exe, tmp_path)
    assert proc.returncode == 3 and "no files found" in proc.stderr


def test_the_reader_is_launched_before_the_formats_are_imported(python_exe, tmp_path):
    """The jailed reader's start-up overlaps the import of the scan's modules: the worker is
    launched while `inspector.formats` is not imported yet, and the scan still reads."""
    save_state_dict(tmp_path / "good.pt")
    code = ("import sys, json; from inspector.sandbox.host import jobs; seen = [];"
            "real = jobs.launch;"
            "jobs.launch = lambda *a: (seen.append('inspector.formats' in sys.modules),"
            " real(*a))[1];"
            "from inspector.cli import main; code = main(['scan', '--json', sys.argv[1]]);"
            "print(json.dumps([seen, code]))")
    out = subprocess.run([python_exe, "-c", code, str(tmp_path / "good.pt")],
                         capture_output=True, text=True, timeout=120, check=True)
    seen, code = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == [False] and code == 0
