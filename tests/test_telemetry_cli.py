"""`ckpt-inspector telemetry`: live sampling against the stand-in, replay, exit codes."""

from __future__ import annotations

import subprocess

import pynvml
from fake_pynvml import FakeGpu, FakeNvml, install
from test_telemetry_csv import WITH_UNITS

from inspector.cli import main
from inspector.gpu import sample_log
from inspector.gpu.smi_csv import read_log


def test_live_sampling_prints_and_records_a_replayable_csv(tmp_path, monkeypatch, capsys):
    install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, unsupported={"fan", "ecc"})]))
    out = tmp_path / "rec.csv"
    code = main(["telemetry", "--interval", "0.1", "--duration", "0.55", "--csv", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "NVIDIA driver 580.95.05: GPU0 NVIDIA H100 80GB HBM3" in text
    lines = text.splitlines()[1:]
    gpu0 = [line for line in lines if " GPU0 " in line]
    assert 4 <= len(gpu0) <= 8
    assert "45°C (mem 52°C)  312.5/700 W  util 97%" in gpu0[0]
    assert "clocks: software power cap" in gpu0[0]
    assert "ECC unc n/a" in next(line for line in lines if " GPU1 " in line)
    log = read_log(out)
    assert sorted({s.index for s in log.samples}) == [0, 1]
    assert f"recorded {len(log.samples)} rows to {out}" in text


def test_live_alerts_set_exit_1(monkeypatch, capsys):
    install(monkeypatch, FakeNvml([FakeGpu(0, temperature=92)]))
    assert main(["telemetry", "--interval", "0.1", "--duration", "0.3",
                 "--temp-threshold", "90"]) == 1
    assert "ALERT [WARNING] GPU 0: temperature 92 °C above 90 °C" in capsys.readouterr().out


def test_driver_lost_mid_run_exit_6(monkeypatch, capsys):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0)]))
    original = fake.nvmlDeviceGetTemperature
    calls = []

    def temperature_then_gone(handle, sensor):
        calls.append(1)
        if len(calls) == 2:
            fake.driver_gone = True
        return original(handle, sensor)

    fake.nvmlDeviceGetTemperature = temperature_then_gone
    assert main(["telemetry", "--interval", "0.1", "--duration", "5"]) == 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "driver stopped answering" in err


def test_no_driver_is_one_line_exit_3(monkeypatch, capsys):
    install(monkeypatch, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert main(["telemetry", "--duration", "1"]) == 3
    err = capsys.readouterr().err
    assert err == ("ckpt-inspector telemetry: no NVIDIA driver found (NVML: NVML Shared Library "
                   "Not Found); open a recorded log with --replay LOG (to see one, replay the "
                   f"shipped sample: --replay {sample_log.path()})\n")


def test_replay_summary_alerts_and_conversion(tmp_path, capsys):
    log = tmp_path / "smi.csv"
    log.write_text(WITH_UNITS)
    out = tmp_path / "converted.csv"
    code = main(["telemetry", "--replay", str(log), "--csv", str(out)])
    text = capsys.readouterr().out
    assert code == 1  # an uncorrected ECC increase and a temperature above 85 °C
    assert f"{log}: 4 rows, 2 GPUs, 00:00:05 span, 0 XID events" in text
    assert "GPU1 NVIDIA H100 80GB HBM3: 2 samples, temp 47–88 °C, power 598–602 W" in text
    assert "GPU 0: uncorrected ECC errors (volatile) rose from 0 to 1" in text
    assert [s.power_draw for s in read_log(out).samples] == [612.33, 598.1, 640.02, 601.55]
    assert main(["telemetry", "--replay", str(log), "--csv", str(out)]) == 5
    assert "exists; refusing to overwrite" in capsys.readouterr().err


def test_bad_log_exit_4_in_a_real_process(tmp_path, python_exe):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"PK\x03\x04 not a log")
    proc = subprocess.run([python_exe, "-I", "-m", "inspector", "telemetry", "--replay", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4
    assert proc.stderr.count("\n") == 1 and "is not an nvidia-smi CSV header" in proc.stderr
    assert "Traceback" not in proc.stderr
