"""Report model: environment probe, summaries, checklist and the JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import jsonschema
import pytest

from inspector.checkpoint.results import InspectResult
from inspector.core import envinfo
from inspector.gpu.alerts import ingest
from inspector.gpu.telemetry import GpuSample, TelemetryStore
from inspector.report import SessionEvidence, build_report
from inspector.report.model import FAIL, NOT_CHECKED, PASS, FileEvidence
from inspector.report.render_json import load_schema
from inspector.report.sections import summarize_tensors


def tensor_row(key: str, dtype: str = "float32", numel: int = 6, nbytes: int = 24, **stats):
    """One `tensors` entry of the inspect contract."""
    row = {"key": key, "dtype": dtype, "shape": [numel], "numel": numel, "nbytes": nbytes,
           "digest": "0" * 64, "min": -1.0, "max": 1.0, "mean": 0.0, "std": 0.5,
           "nan": 0, "inf": 0, "zeros": 0}
    row.update(stats)
    return row


def scan_contract(path: Path, verdict: str = "safe", globals_=(), fmt: str = "pytorch-zip"):
    return {"path": str(path), "format": fmt, "verdict": verdict,
            "weights_only_ok": verdict == "safe", "globals": list(globals_), "findings": [],
            "error": None}


def inspect_contract(path: Path, tensors: list[dict], error=None) -> dict:
    return {"path": str(path), "size": path.stat().st_size, "sha256": "ab" * 32,
            "format": "pytorch-zip", "scan": scan_contract(path),
            "sandbox": {"level": "full", "landlock": True}, "digest_algorithm": "sha256",
            "tensors": tensors, "objects": [{"key": "epoch", "type": "int", "repr": "3"}],
            "error": error,
            # as a real load's: its tensors checked against the file's bytes (a contract
            # without claims is the jailed loader's word, and the report says so)
            "claims": None if error else {"checked": True, "tensors": len(tensors),
                                          "reason": None}}


def checks(file_report) -> dict[str, str]:
    return {c.id: c.status for c in file_report.checklist}


@pytest.fixture
def validator():
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_dangerous_file_headlines_the_report_and_fails_its_checklist(tmp_path, validator):
    evil = tmp_path / "evil.pt"
    evil.write_bytes(b"\x80\x02cos\nsystem\nq\x00.")
    scan = scan_contract(evil, "dangerous",
                         [{"module": "os", "name": "system", "count": 1, "severity": "dangerous",
                          "reason": "runs programs"}],
                         fmt="pickle")
    report = build_report(SessionEvidence([FileEvidence(str(evil), scan=scan)]))
    doc = report.to_json()
    validator.validate(doc)
    assert doc["verdict"] == "dangerous" and doc["status"] == "failed"
    assert doc["problems"] == ["evil.pt: dangerous: imports os.system"]
    f = report.files[0]
    assert f.load.status == "not_run" and f.tensors is None
    assert f.file.sha256 == __import__("hashlib").sha256(evil.read_bytes()).hexdigest()
    assert checks(f) == {"safe_format": FAIL, "hash_on_record": NOT_CHECKED,
                         "weights_only": FAIL, "backup": NOT_CHECKED,
                         "deterministic": NOT_CHECKED, "weights_health": NOT_CHECKED}
    assert "os.system" in f.checklist[2].detail


def test_tensor_summary_counts_dtypes_nonfinite_and_magnitudes():
    inspect = {"tensors": [
        tensor_row("a", "float32", 10, 40, min=-7.5, max=2.0),
        tensor_row("b", "bfloat16", 4, 8, min=float("nan"), max=float("nan"), nan=4),
        tensor_row("c", "float32", 6, 24, min=0.0, max=3.0, inf=1),
        tensor_row("d", "int64", 2, 16, min=-100, max=5),
    ], "objects": [], "digest_algorithm": "sha256"}
    s = summarize_tensors(InspectResult.from_json({"path": "m.pt", **inspect}))
    assert (s.count, s.parameters, s.bytes) == (4, 22, 88)
    assert [(d.dtype, d.tensors, d.elements, d.bytes) for d in s.dtypes] == [
        ("float32", 2, 16, 64), ("int64", 1, 2, 16), ("bfloat16", 1, 4, 8)]
    assert [(r.key, r.nan, r.inf) for r in s.nonfinite] == [("b", 4, 0), ("c", 0, 1)]
    # b reports no finite extreme, so it has no magnitude; the rest are ordered by |x|
    assert [(r.key, r.abs_max) for r in s.largest_abs] == [("d", 100.0), ("a", 7.5), ("c", 3.0)]


def test_benign_session_with_manifest_consistency_and_folder(tmp_path, validator):
    folder = tmp_path / "run"
    folder.mkdir()
    current, previous = folder / "step-200.pt", folder / "step-100.pt"
    current.write_bytes(b"current")
    previous.write_bytes(b"previous")
    manifest = folder / "SHA256SUMS"
    verify = {"ok": False, "files": [{"path": "step-200.pt", "status": "ok",
                                      "expected": "1" * 64, "actual": "1" * 64}],
              "tensors": [{"key": "a", "file": "step-200.pt", "status": "ok"},
                          {"key": "b", "file": "step-200.pt", "status": "mismatch",
                           "expected": "2" * 64, "actual": "3" * 64}], "errors": []}
    consistency = {"consistent": True, "device": "cpu", "device_label": "CPU (no CUDA device)",
                   "repeats": 3, "mode": "probe", "probed_tensors": 1,
                   "tensors": [{"key": "a", "status": "pass", "max_abs_diff": 0.0}],
                   "resident_mismatches": [],
                   "iterations": [{"type": "iteration", "max_abs_diff": 0.0}] * 3}
    session = SessionEvidence([
        FileEvidence(str(current), inspect=inspect_contract(current, [tensor_row("a")]),
                     verify=verify, manifest=str(manifest), consistency=consistency,
                     folder=str(folder)),
        FileEvidence(str(previous), scan=scan_contract(previous), folder=str(folder)),
    ])
    report = build_report(session)
    validator.validate(report.to_json())
    f = report.files[0]
    assert checks(f) == {"safe_format": FAIL, "hash_on_record": PASS, "weights_only": PASS,
                         "backup": PASS, "deterministic": PASS, "weights_health": PASS}
    assert "step-100.pt" in f.checklist[3].detail
    assert f.verification.status == FAIL and f.verification.counts == {"ok": 2, "mismatch": 1}
    assert [t["key"] for t in f.verification.tensors] == ["b"]
    assert report.status == "failed"
    assert report.problems == ["step-200.pt: manifest verification failed (1 mismatch)"]
    assert f.file.sha256 == "ab" * 32  # taken from the inspect contract, not recomputed


def test_shards_of_one_checkpoint_are_not_each_others_backup(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shards = [folder / f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    for shard in shards:
        shard.write_bytes(b"shard")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": shards[0].name, "b": shards[1].name}}))
    session = SessionEvidence([
        FileEvidence(str(s), scan=scan_contract(s, fmt="safetensors"), folder=str(folder))
        for s in shards])
    report = build_report(session)
    assert [checks(f)["backup"] for f in report.files] == [FAIL, FAIL]
    assert [checks(f)["safe_format"] for f in report.files] == [PASS, PASS]


def test_failed_load_and_inconsistent_run_fail_their_checks(tmp_path):
    path = tmp_path / "m.pt"
    path.write_bytes(b"m")
    inspect = inspect_contract(path, [], error={"code": "load", "message": "truncated archive"})
    consistency = {"consistent": False, "device": "cuda:0", "device_label": "cuda:0 (H200)",
                   "repeats": 5, "mode": "probe",
                   "tensors": [{"key": "v", "status": "pass"},
                               {"key": "w", "status": "fail", "repeat_mismatches": 1,
                                "max_abs_diff": 0.5, "roundtrip_ok": True,
                                "first_mismatch": {"iteration": 2, "index": 7, "bits": [30]}}],
                   "resident_mismatches": [{"key": "w", "changed_elements": 1, "elements": []}]}
    report = build_report(SessionEvidence([FileEvidence(str(path), inspect=inspect,
                                                        consistency=consistency)]))
    f = report.files[0]
    assert f.load.status == "failed" and f.load.error == "truncated archive"
    assert report.status == "failed"
    assert checks(f)["weights_only"] == FAIL and checks(f)["deterministic"] == FAIL
    assert f.consistency.device == "cuda:0 (H200)"
    assert f.consistency.failures == [
        {"key": "w", "status": "fail", "repeat_mismatches": 1, "max_abs_diff": 0.5,
         "roundtrip_ok": True, "first_mismatch": {"iteration": 2, "index": 7, "bits": [30]}},
        {"key": "w", "status": "device copy differs", "changed_elements": 1}]
    assert f.checklist[4].detail == "2 results differed on cuda:0 (H200)"
    assert "m.pt: jailed load failed: truncated archive" in report.problems


def test_telemetry_summary_from_a_real_store(tmp_path, validator):
    store = TelemetryStore(capacity=1000)
    samples = []
    for t in range(600):
        for gpu in (0, 1):
            samples.append(GpuSample(
                timestamp=1000.0 + t, index=gpu, name=f"GPU model {gpu}",
                temperature_gpu=40.0 + gpu * 10 + (t % 60) / 6,
                ecc_corrected_volatile=float(t // 100),
                ecc_uncorrected_volatile=2.0 if gpu == 1 and t > 300 else 0.0,
                retired_sbe=None, retired_dbe=None,
                xids=(79,) if gpu == 1 and t == 450 else ()))
    ingest(store, samples)
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"x")
    report = build_report(SessionEvidence(
        [FileEvidence(str(path), scan=scan_contract(path, fmt="safetensors"))],
        telemetry=store, telemetry_source="nvml"))
    validator.validate(report.to_json())
    t = report.telemetry
    assert t.samples == 1200 and t.duration_s == 599.0
    g0, g1 = t.gpus
    assert (g0.temperature_min, g0.temperature_max) == (40.0, 49.83)
    assert g0.ecc_corrected_delta == 5 and g0.ecc_uncorrected_delta == 0
    assert g0.retired_pages_delta is None and g0.xids == []
    assert g1.ecc_uncorrected_delta == 2 and g1.xids == [79]
    assert len(g0.temperature_series) <= 241 and g0.temperature_series[0] == [0.0, 40.0]
    assert report.problems == ["GPU 1 (GPU model 1): uncorrected ECC errors rose by 2",
                               "GPU 1 (GPU model 1): XID events [79]"]


def test_nonfinite_values_become_strict_json(tmp_path, validator):
    path = tmp_path / "m.pt"
    path.write_bytes(b"m")
    consistency = {"consistent": True, "device": "cpu", "repeats": 2, "tolerance": float("inf")}
    report = build_report(SessionEvidence([FileEvidence(str(path), scan=scan_contract(path),
                                                        consistency=consistency)]))
    text = report.dumps()
    doc = json.loads(text)
    assert doc["files"][0]["consistency"]["details"]["tolerance"] == "inf"
    validator.validate(doc)


def test_schema_rejects_a_report_missing_its_verdict(tmp_path, validator):
    path = tmp_path / "m.pt"
    path.write_bytes(b"m")
    doc = build_report(SessionEvidence([FileEvidence(str(path))])).to_json()
    validator.validate(doc)
    del doc["verdict"]
    with pytest.raises(jsonschema.ValidationError, match="verdict"):
        validator.validate(doc)
    doc["verdict"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(doc)


# --- environment probe -----------------------------------------------------------------------


class _NVMLError(Exception):
    pass


def _fake_pynvml(gpus: list[tuple[str, object]]) -> types.ModuleType:
    """A stand-in pynvml: (name, ecc) per GPU, ecc a (current, pending) pair or NotSupported."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = _NVMLError
    nv.NVMLError_NotSupported = type("NVMLError_NotSupported", (_NVMLError,), {})
    nv.NVMLError_FunctionNotFound = type("NVMLError_FunctionNotFound", (_NVMLError,), {})
    nv.shut = []
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: nv.shut.append(True)
    nv.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    nv.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12080
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: gpus[h][0].encode()
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}"
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * 1024**3)

    def ecc(h):
        if gpus[h][1] is None:
            raise nv.NVMLError_NotSupported()
        return gpus[h][1]

    nv.nvmlDeviceGetEccMode = ecc
    return nv


def test_nvml_reports_driver_gpus_and_ecc(monkeypatch):
    nv = _fake_pynvml([("NVIDIA H200", (1, 1)), ("NVIDIA RTX 4090", None),
                       ("NVIDIA A100", (0, 1))])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    info = envinfo.collect(probe_torch=False)
    assert (info.nvml, info.driver, info.cuda_driver) == ("ok", "570.86.15", "12.8")
    assert [(g.name, g.ecc_mode, g.memory_total_mib) for g in info.gpus] == [
        ("NVIDIA H200", "enabled", 81920), ("NVIDIA RTX 4090", "n/a", 81920),
        ("NVIDIA A100", "disabled (enabled after reboot)", 81920)]
    assert nv.shut == [True]
    assert ("GPU 1", "NVIDIA RTX 4090, 81920 MiB, ECC n/a") in info.lines()


def test_nvml_absent_reads_not_found(monkeypatch):
    nv = _fake_pynvml([])

    def fail():
        raise _NVMLError("NVML Shared Library Not Found")

    nv.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    info = envinfo.collect(probe_torch=False)
    assert info.nvml == "not found (NVML Shared Library Not Found)"
    assert (info.driver, info.gpus) == ("not found", [])
    assert ("GPUs", "none found") in info.lines()


def test_environment_probe_never_imports_torch_in_the_caller(python_exe):
    code = ("import json, sys; from inspector.core import envinfo; e = envinfo.collect(); "
            "print(json.dumps({'torch_loaded': 'torch' in sys.modules, **e.to_json()}))")
    out = subprocess.run([python_exe, "-c", code], capture_output=True, text=True, timeout=180,
                         check=True)
    doc = json.loads(out.stdout)
    assert doc["torch_loaded"] is False
    assert doc["packages"]["torch"] == metadata.version("torch")
    assert doc["python"].endswith(".".join(map(str, sys.version_info[:3])))
    # torch's own build answers in the subprocess: a CPU build has no CUDA runtime
    expected_cuda = "none (CPU build)" if "+cpu" in doc["packages"]["torch"] else None
    if expected_cuda:
        assert doc["torch_cuda_runtime"] == expected_cuda
    else:
        assert doc["torch_cuda_runtime"][0].isdigit()


@pytest.mark.parametrize("detected", [True, False])
def test_a_fault_injection_self_test_is_labelled_and_judged_as_one(tmp_path, validator, detected):
    """Differing results are what a self-test wants: the file is not blamed for them."""
    from inspector.report.render_html import render_html

    path = tmp_path / "m.pt"
    path.write_bytes(b"m")
    fault = {"key": "w", "index": 7, "bit": 30, "iteration": 2}
    run = {"consistent": not detected, "device": "cpu", "repeats": 5, "injected": fault,
           "tensors": [{"key": "w", "status": "fail" if detected else "pass",
                        "repeat_mismatches": int(detected)}]}
    report = build_report(SessionEvidence([FileEvidence(
        str(path), inspect=inspect_contract(path, [tensor_row("w")]), consistency=run)]))
    f = report.files[0]
    item = next(c for c in f.checklist if c.id == "deterministic")
    assert "self-test" in item.title and "bit 30 of w[7]" in item.detail
    assert f.consistency.self_test == fault
    validator.validate(json.loads(report.dumps()))
    html = render_html(report)
    assert "Self-test" in html and "flipped on purpose before iteration 2" in html
    if detected:
        assert item.status == PASS and f.consistency.status == PASS
        assert not any("consistency" in p for p in report.problems), report.problems
    else:
        assert item.status == FAIL and item.detail.startswith("NOT detected")
        assert "m.pt: the consistency self-test did not detect its injected fault" in (
            report.problems)


def test_a_training_checkpoint_reports_its_model_and_whether_it_can_resume(tmp_path, validator):
    """The report carries what the Overview says: the architecture guess, the training state
    and the resume checklist, from a real jailed inspect of a real training checkpoint."""
    import factories

    from inspector.report.render_html import render_html
    from inspector.sandbox.host.client import inspect_file

    path = factories.save_training_checkpoint(tmp_path / "train.pt")
    inspect = inspect_file(path)
    assert inspect.error is None and inspect.resume is not None
    report = build_report(SessionEvidence([FileEvidence(str(path), inspect=inspect)]))
    m = report.files[0].model
    assert m.training and "epoch" in m.training
    assert m.resume.startswith(("Ready to resume", "Not ready to resume"))
    assert {r["item"] for r in m.resume_items} >= {"Model weights", "Optimizer state"}
    doc = json.loads(report.dumps())
    validator.validate(doc)
    assert doc["files"][0]["model"]["resume"] == m.resume
    html = render_html(report)
    assert "Model and training state" in html and m.resume in html

    weights = tmp_path / "weights.pt"
    factories.save_state_dict(weights)
    plain = build_report(SessionEvidence([FileEvidence(str(weights),
                                                       inspect=inspect_file(weights))]))
    assert plain.files[0].model.resume is None and plain.files[0].model.resume_items == []


def test_weights_with_an_epoch_are_not_a_failed_resume(tmp_path, validator):
    """The built-in sample keeps an epoch and a learning rate beside its weights and no
    optimizer: its report has no resume checklist and never says 'Not ready to resume'; a
    training checkpoint (optimizer state) still gets one."""
    import factories

    from inspector.core.samples import write_samples
    from inspector.report.render_html import render_html
    from inspector.sandbox.host.client import inspect_file

    sample = write_samples(tmp_path / "samples").benign
    train = factories.save_training_checkpoint(tmp_path / "train.pt")
    inspected = [inspect_file(sample), inspect_file(train)]
    assert inspected[0].resume is None and inspected[1].resume is not None
    report = build_report(SessionEvidence([FileEvidence(str(p), inspect=i)
                                           for p, i in zip((sample, train), inspected,
                                                           strict=True)]))
    validator.validate(json.loads(report.dumps()))
    weights, training = (f.model for f in report.files)
    assert weights.training == "epoch 12" and weights.resume is None
    assert weights.resume_items == []
    assert training.resume is not None and training.resume_items
    assert not [p for p in report.problems if "resume" in p.lower()]
    html = render_html(report)
    assert html.count("Needed to resume") == 1  # the training checkpoint's table only
