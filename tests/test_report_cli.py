"""`ckpt-inspector report`: the whole pipeline headless, through the real scan, jail and verify."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import factories
import jsonschema
import pytest
from fake_pynvml import FakeGpu, FakeNvml, install

from inspector.cli import main
from inspector.core import envinfo
from inspector.report.render_json import load_schema

pytestmark = pytest.mark.usefixtures("qapp")  # charts and PDFs draw with Qt

needs_poppler = pytest.mark.skipif(
    shutil.which("pdftoppm") is None or shutil.which("pdftotext") is None,
    reason="pdftoppm/pdftotext not installed (apt-get install poppler-utils)")


@pytest.fixture
def fast_env(monkeypatch):
    """In-process runs skip the torch subprocess probe (the subprocess test keeps it)."""
    real = envinfo.collect
    monkeypatch.setattr(envinfo, "collect", lambda probe_torch=True: real(probe_torch=False))


def _json(path: Path) -> dict:
    doc = json.loads(path.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    return doc


def _checks(file_doc: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in file_doc["checklist"]}


@needs_poppler
def test_pdf_report_of_a_malicious_and_a_benign_file(tmp_path, canary, python_exe, artifacts):
    evil = factories.mal_os_system(tmp_path / "evil.pt", canary)
    good = factories.save_state_dict(tmp_path / "good.pt")
    out = tmp_path / "report.pdf"
    done = subprocess.run([python_exe, "-m", "inspector", "report", evil, good, "-o", out],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"DANGEROUS: 2 files, 1 problem; report written to {out}" in done.stdout
    first = subprocess.run(["pdftotext", "-f", "1", "-l", "1", out, "-"], capture_output=True,
                           text=True, check=True).stdout
    assert "DANGEROUS — DO NOT LOAD" in first and "evil.pt: dangerous: imports" in first
    text = unicodedata.normalize("NFKC", subprocess.run(
        ["pdftotext", "-layout", out, "-"], capture_output=True, text=True, check=True).stdout)
    assert hashlib.sha256(good.read_bytes()).hexdigest() in "".join(text.split())
    assert "fc1.weight" in text and "loaded" in text  # the benign file went through the jail
    assert "CUDA runtime (torch)" in text
    pages = artifacts / "report-cli-pdf"
    shutil.rmtree(pages, ignore_errors=True)
    pages.mkdir()
    subprocess.run(["pdftoppm", "-r", "60", "-png", out, pages / "page"], check=True)
    assert len(list(pages.glob("page-*.png"))) >= 2


def test_json_report_with_manifest_and_folder(tmp_path, fast_env):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    current = factories.save_state_dict(run_dir / "step-200.pt", factories.small_state_dict(1))
    factories.save_state_dict(run_dir / "step-100.pt")
    (run_dir / "README.md").write_text("training run notes\n")
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(current.read_bytes()).hexdigest()}  run/step-200.pt\n"
                        f"{'0' * 64}  run/step-100.pt\n")
    out = tmp_path / "report.json"
    code = main(["report", str(run_dir), "-o", str(out), "--manifest", str(manifest)])
    doc = _json(out)
    assert code == 1  # safe files, but one fails its manifest hash
    # the README in the folder is not a checkpoint and is left out
    assert [f["file"]["name"] for f in doc["files"]] == ["step-100.pt", "step-200.pt"]
    prev, cur = doc["files"]
    assert _checks(cur) == {"safe_format": "fail", "hash_on_record": "pass",
                            "weights_only": "pass", "backup": "pass",
                            "deterministic": "not_checked", "weights_health": "pass"}
    assert _checks(prev)["hash_on_record"] == "fail"
    assert doc["problems"] == ["step-100.pt: manifest verification failed (1 mismatch)"]
    assert cur["load"]["status"] == "loaded" and cur["load"]["sandbox_level"]
    assert cur["tensors"]["count"] == 4 and cur["tensors"]["parameters"] == 32 + 8 + 16 + 2
    assert cur["file"]["sha256"] == hashlib.sha256(current.read_bytes()).hexdigest()
    # sampled only where an NVIDIA driver answers
    assert doc["telemetry"] is None or doc["telemetry"]["source"] == "nvml"


def test_consistency_run_in_the_report(tmp_path, fast_env):
    good = factories.save_state_dict(tmp_path / "good.pt")
    out = tmp_path / "report.json"
    code = main(["report", str(good), "-o", str(out), "--consistency", "--device", "cpu",
                 "--repeats", "3"])
    doc = _json(out)
    (f,) = doc["files"]
    assert f["consistency"]["error"] is None, f["consistency"]["error"]
    assert code == 0 and _checks(f)["deterministic"] == "pass"
    assert f["consistency"]["repeats"] == 3 and len(f["consistency"]["series"]) >= 3


def test_safetensors_and_unreadable_inputs(tmp_path, fast_env):
    st = factories.save_safetensors(tmp_path / "model.safetensors")
    alone = tmp_path / "st.json"
    assert main(["report", str(st), "-o", str(alone)]) == 0
    (f,) = _json(alone)["files"]
    assert _checks(f)["safe_format"] == "pass" and _checks(f)["weights_only"] == "pass"
    assert f["load"]["status"] in ("loaded", "refused")
    out = tmp_path / "r.html"
    assert main(["report", str(st), str(tmp_path / "missing.pt"), "-o", str(out)]) == 3
    html = out.read_text()
    assert "COULD NOT BE CHECKED" in html and "missing.pt" in html


def test_output_errors_have_their_own_exit_codes(tmp_path, fast_env, capsys):
    good = factories.save_safetensors(tmp_path / "good.safetensors")
    assert main(["report", str(good), "-o", str(tmp_path / "r.docx")]) == 4
    assert "unknown report format .docx" in capsys.readouterr().err
    existing = tmp_path / "r.json"
    existing.write_text("keep me")
    assert main(["report", str(good), "-o", str(existing)]) == 4
    assert existing.read_text() == "keep me"
    assert "pass --force" in capsys.readouterr().err
    bad_manifest = tmp_path / "bad.sha256"
    bad_manifest.write_text("this is not a manifest line\n")
    assert main(["report", str(good), "-o", str(tmp_path / "x.json"),
                 "--manifest", str(bad_manifest)]) == 5
    assert not (tmp_path / "x.json").exists()
    assert main(["report", str(good), "-o", str(tmp_path / "no" / "r.json")]) == 4
    assert "no such folder" in capsys.readouterr().err
    assert main(["report", str(good), "-o", str(existing), "--force"]) == 0
    doc = _json(existing)
    assert doc["verdict"] == "safe"
    assert doc["tool"]["command"] == f"ckpt-inspector report {good} -o {existing}"


def test_gpu_telemetry_and_environment_come_from_nvml(tmp_path, fast_env, monkeypatch):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0, temperature=61,
                                                  ecc={(1, 0): 3, (0, 0): 7})]))
    st = factories.save_safetensors(tmp_path / "model.safetensors")
    out = tmp_path / "r.json"
    assert main(["report", str(st), "-o", str(out)]) == 0
    doc = _json(out)
    assert doc["environment"]["driver"] == "580.95.05"
    assert [g["name"] for g in doc["environment"]["gpus"]] == [fake.gpus[0].name]
    (gpu,) = doc["telemetry"]["gpus"]
    assert doc["telemetry"]["source"] == "nvml" and gpu["samples"] >= 1
    assert gpu["temperature_min"] == gpu["temperature_max"] == 61.0
    assert gpu["ecc_uncorrected_delta"] == 0 and gpu["xids"] == []
    assert not fake.initialised  # the sampler shut NVML down when the report was done


def test_dash_prints_the_json_report_and_quiet_keeps_stderr_clean(tmp_path, fast_env, capsys):
    good = factories.save_safetensors(tmp_path / "good.safetensors")
    assert main(["report", str(good), "-o", "-", "--quiet"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    assert doc["verdict"] == "safe" and doc["files"][0]["file"]["name"] == good.name
    assert err.startswith("SAFE: 1 file,") and "inspecting" not in err
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", ["inspect", "report"])
def test_progress_goes_to_a_terminal_and_quiet_silences_it(tmp_path, fast_env, capsys,
                                                          monkeypatch, command):
    ckpt = factories.save_state_dict(tmp_path / "model.pt")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    args = [command, str(ckpt)] + (["-o", str(tmp_path / "r.json")] if command == "report" else [])
    assert main(args) == 0
    assert "tensors 100%" in capsys.readouterr().err
    assert main([*args, "--quiet"] + (["--force"] if command == "report" else [])) == 0
    assert "%" not in capsys.readouterr().err
