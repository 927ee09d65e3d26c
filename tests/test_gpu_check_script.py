"""benchmarks/gpu_check.py, the prepared GPU run, rehearsed on the CPU with the stand-in NVML.

Device time is short and one run must succeed, so the script's every step (field table, 10 Hz
recording, probe, fault campaign, model run, jailed consistency, figures.json) runs here at
tiny sizes; the n/a path of the field table carries NVML's reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_pynvml import FakeGpu, FakeNvml, install

REPO = Path(__file__).resolve().parent.parent


def test_nvml_source_names_why_a_field_is_na(monkeypatch):
    from inspector.gpu.nvml_source import NvmlSource

    install(monkeypatch, FakeNvml([FakeGpu(0, unsupported={"fan", "memory_temperature"})]))
    source = NvmlSource.open()
    try:
        (sample,) = source.sample()
    finally:
        source.close()
    assert sample.fan_speed is None and sample.temperature_memory is None
    assert "Not Supported" in source.unavailable["nvmlDeviceGetFanSpeed"]
    assert "NVML_FI_DEV_MEMORY_TEMP" in source.unavailable


@pytest.mark.timeout(600)
def test_gpu_check_rehearsal_runs_clean(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--rehearse", "--device", "cpu", "--out",
         str(out), "--size-mb", "4", "--repeats", "3", "--faults", "24", "--model-faults", "2",
         "--nvml-seconds", "2", "--guard-rounds", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=560)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads((out / "figures.json").read_text())
    assert figures["ok"] and figures["rehearsal"]
    assert figures["faults"]["faults"] == 24 and figures["faults"]["rate"] == 1.0
    assert set(figures["faults"]["by_dtype"]) <= {"float32", "bfloat16", "float16", "float64"}
    assert figures["jail"]["injected"]["localised"] is True
    assert figures["jail"]["clean"]["consistent"] is True
    fields = {row["smi"]: row["values"] for row in figures["nvml_fields"]["fields"]}
    assert fields["fan.speed"][1] == "n/a"
    assert "nvmlDeviceGetFanSpeed" in figures["nvml_fields"]["unavailable_getters"]
    recording = figures["nvml_recording"]
    assert recording["exit_code"] == 0 and recording["gpus"] == 2 and recording["bad_cells"] == 0
    assert (out / "nvml.csv").stat().st_size > 0
    assert figures["guard"]["device"] == "cpu" and "overhead_percent" in figures["guard"]
    assert json.loads((out / "consistency.json").read_text())["probe"]["consistent"] is True
