"""`ckpt-inspector consistency` end to end through the jailed worker (CPU, or cuda:0 if present)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import consistency_models
import factories
import pytest
import torch

from inspector.core.progress import Cancelled, CancelToken
from inspector.sandbox.host.consistency_job import ConsistencyRequest, run_consistency

TESTS = str(Path(__file__).parent)


def _cli(python_exe: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([python_exe, "-I", "-m", "inspector", "consistency", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=TESTS)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "training.pt"
    torch.save({"model": consistency_models.tiny_mlp(width=64).state_dict(),
                "conv.weight": torch.randn(16, 3, 3, 3), "epoch": 4}, path)
    return path


def test_clean_probe_json_exit_0(checkpoint, python_exe):
    before = checkpoint.read_bytes()
    proc = _cli(python_exe, str(checkpoint), "--repeats", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["consistent"] and result["mode"] == "probe" and result["repeats"] == 3
    assert result["device_label"] in ("CPU (no CUDA device found)",) or torch.cuda.is_available()
    assert result["sandbox"]["level"] and result["scan_verdict"] == "safe"
    keys = {t["key"] for t in result["tensors"]}
    assert {"model.0.weight", "model.5.bias", "conv.weight"} <= keys
    assert result["probed_tensors"] == 4 and result["weights_gb_per_s"] > 0
    assert checkpoint.read_bytes() == before


def test_injected_flip_is_reported_with_tensor_element_and_bit(checkpoint, python_exe):
    proc = _cli(python_exe, str(checkpoint), "--repeats", "4", "--device", "cpu",
                "--inject", "conv.weight:100:22@3")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "INCONSISTENT on CPU" in out and "injected bit 22 into conv.weight[100]" in out
    assert "  probe run 2: 0 mismatched" in out and "  probe run 3: 0 mismatched" not in out
    assert "device copy of conv.weight differs from the checkpoint in 1 element:" in out
    assert "conv.weight[3,2,0,1] (element 100): " in out and "bit 22 (mantissa)" in out
    assert "FAIL conv.weight: 2 runs differ" in out


def test_model_run_reports_keys_and_reload(checkpoint, python_exe, tmp_path):
    state = consistency_models.tiny_mlp(width=64).state_dict()
    state.pop("0.bias")
    plain = tmp_path / "plain.pt"
    torch.save(state, plain)
    proc = _cli(python_exe, str(plain), "--model", "consistency_models:tiny_mlp",
                "--model-kwargs", '{"width": 64}', "--input-shape", "2,16", "--repeats", "3",
                "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["mode"] == "model" and result["missing_keys"] == ["0.bias"]
    assert result["reload"]["consistent"] and result["outputs"][0]["shape"] == [2, 10]


def test_errors_are_one_line_with_distinct_exit_codes(checkpoint, python_exe, tmp_path, canary):
    evil = factories.mal_os_system(tmp_path / "evil.pt", canary)
    proc = _cli(python_exe, str(evil))
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1
    assert "dangerous" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli(python_exe, str(tmp_path / "missing.pt"))
    assert proc.returncode == 3 and "no such file" in proc.stderr
    proc = _cli(python_exe, str(checkpoint), "--model", "consistency_models:tiny_mlp")
    assert proc.returncode == 2 and "--model needs --input-shape" in proc.stderr
    proc = _cli(python_exe, str(checkpoint), "--model", "no_such_pkg.models:build",
                "--input-shape", "1,16")
    assert proc.returncode == 5 and "cannot import no_such_pkg.models:build" in proc.stderr
    if not torch.cuda.is_available():
        proc = _cli(python_exe, str(checkpoint), "--device", "cuda:0")
        assert proc.returncode == 4
        assert proc.stderr.strip().endswith("cuda:0 requested but torch sees no CUDA device")


def test_cancel_kills_the_worker(checkpoint):
    token = CancelToken()
    seen: list[dict] = []

    def on_event(event):
        seen.append(event)
        if event["type"] == "iteration":
            token.cancel()

    spec = ConsistencyRequest(str(checkpoint), device="cpu", repeats=100_000)
    started = time.monotonic()
    with pytest.raises(Cancelled):
        run_consistency(spec, on_event=on_event, cancel=token, timeout=240)
    assert time.monotonic() - started < 120
    assert any(e["type"] == "iteration" for e in seen)
    assert not [t for t in threading.enumerate() if t.name.startswith("consistency")]


def test_request_lets_the_jail_read_the_model_code_and_lifts_memory_only_for_cuda(checkpoint):
    spec = ConsistencyRequest(str(checkpoint), device="cpu", repeats=4, python_path=[TESTS],
                              inject={"key": "conv.weight", "index": 1, "bit": 2, "iteration": 3})
    request = spec.to_request()
    assert request["op"] == "consistency" and request["path"] == str(checkpoint.resolve())
    assert "memory_mb" not in request["limits"] and "model" not in request
    assert request["paths"] == []  # the probe runs no code of the user's: it reads the file alone
    assert request["inject"]["bit"] == 2
    spec.device, spec.model, spec.python_path = "cuda:1", "pkg.mod:build", [TESTS]
    spec.input_shape = [2, 16]
    request = spec.to_request()
    assert request["limits"]["memory_mb"] >= 1 << 20  # CUDA reserves huge address space
    assert request["paths"] == [TESTS] and request["python_path"] == [TESTS]
    assert (request["model"], request["input_shape"], request["reload"]) == ("pkg.mod:build",
                                                                            [2, 16], True)


def test_a_code_folder_that_holds_the_jails_building_folder_hides_no_input(tmp_path):
    # `cd /tmp && ckpt-inspector consistency m.pt --model ...` binds /tmp itself, where the
    # jail built its root: the worker then saw its own empty tmpfs there, not the checkpoint
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip("the test's folder is not under /tmp")
    path = tmp_path / "m.pt"
    torch.save(consistency_models.tiny_mlp().state_dict(), path)
    spec = ConsistencyRequest(str(path), device="cpu", repeats=2, python_path=[TESTS, "/tmp"],
                              model="consistency_models:tiny_mlp", input_shape=[2, 16])
    result = run_consistency(spec, timeout=240)
    assert result["mode"] == "model" and result["consistent"] and not result["missing_keys"]
