"""gpu.exporter: every telemetry field under dcgm-exporter's name, run journals under
ckpt_inspector_*, served over HTTP from a replayed log, live NVML (fake) and journals."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import fake_pynvml
import pytest
from fleet_fixtures import gpu_samples, write_replay
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import inspector.gpu
from inspector.cli import main
from inspector.core.errors import CodedError
from inspector.gpu import exporter as ex
from inspector.gpu.dcgm_names import DCGM_NAMES, GPU_LABELS
from inspector.gpu.nvml_source import NvmlSource
from inspector.gpu.telemetry import FIELDS
from inspector.run import journal

NOW = 1_790_000_000.0


def _values(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, frozenset(labels)): value} of an exposition."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _scrape(exporter: ex.Exporter) -> dict[tuple[str, frozenset], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return _values(generate_latest(registry).decode())


def _pick(values, name: str, **labels: str) -> list[float]:
    want = set(labels.items())
    return [v for (n, tags), v in values.items() if n == name and want <= tags]


def test_every_field_has_one_dcgm_name():
    assert [n.field for n in DCGM_NAMES] == [f.name for f in FIELDS]
    metrics = [n.metric for n in DCGM_NAMES]
    assert len(set(metrics)) == len(metrics)
    pattern = r"DCGM_FI_DEV_[A-Z_]+|ckpt_inspector_gpu_[a-z0-9_]+"
    assert all(re.fullmatch(pattern, m) for m in metrics)


def test_gpu_series_carry_dcgm_names_labels_and_units():
    exporter = ex.Exporter("node-a")
    samples = gpu_samples(gpus=2, ticks=4, dbe_from=3, xid_at=2)
    for tick in ex.ticks(samples):
        exporter.update(tick)
    got = _scrape(exporter)
    gpu1 = {"gpu": "1", "UUID": "GPU-00000001-aaaa-bbbb-cccc-000000000000",
            "device": "nvidia1", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a"}
    assert _pick(got, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **gpu1) == [2.0]
    assert _pick(got, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="0") == [0.0]
    assert _pick(got, "DCGM_FI_DEV_GPU_TEMP", gpu="1") == [44.0]  # the last tick's reading
    assert _pick(got, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == [300.5]
    assert _pick(got, "DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu="0") == [0.0]
    assert _pick(got, "DCGM_FI_DEV_FAN_SPEED") == []  # n/a is absent, not 0
    assert _pick(got, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == [79.0]
    assert _pick(got, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == [0.0]
    assert _pick(got, "ckpt_inspector_gpu_xid_events_total", gpu="1", xid="79") == [1.0]
    thermal = _pick(got, "ckpt_inspector_gpu_clock_event_active", gpu="0",
                    reason="hardware thermal slowdown")
    power = _pick(got, "ckpt_inspector_gpu_clock_event_active", gpu="0",
                  reason="software power cap")
    assert (thermal, power) == ([1.0], [0.0])
    for (name, tags), _ in got.items():
        if name.startswith("DCGM_"):
            assert {k for k, _ in tags} == set(GPU_LABELS)


def test_a_lost_gpu_publishes_lost_and_no_readings():
    exporter = ex.Exporter("n")
    sample = gpu_samples(gpus=1, ticks=1)[0]
    sample.lost = True
    exporter.update([sample])
    got = _scrape(exporter)
    assert _pick(got, "ckpt_inspector_gpu_lost", gpu="0") == [1.0]
    assert _pick(got, "DCGM_FI_DEV_GPU_TEMP") == []


def _checkpoint(folder: Path, name: str, data: bytes) -> dict:
    path = folder / name
    path.write_bytes(data)
    return {"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_run_journal_metrics_alarms_verification_age_and_changed_files(tmp_path):
    run = tmp_path / "run-7"
    run.mkdir()
    log = journal.journal_path(run)
    first = _checkpoint(run, "step100.pt", b"a" * 100)
    second = _checkpoint(run, "step200.pt", b"b" * 200)
    third = _checkpoint(run, "step300.pt", b"c" * 300)
    journal.append(log, "ledger.save", {"step": 100, "time": NOW - 3000, **first,
                                        "verified": True})
    journal.append(log, "ledger.save", {"step": 200, "time": NOW - 2000, **second,
                                        "verified": True})
    journal.append(log, "guard.alarm", {"step": 250, "rule": "nan_loss", "action": "snapshot",
                                        "attribution": "unknown", "time": NOW - 1500})
    journal.append(log, "guard.alarm", {"step": 260, "rule": "nan_loss", "action": "snapshot",
                                        "time": NOW - 1400})
    journal.append(log, "ledger.save", {"step": 300, "time": NOW - 1000, **third,
                                        "verified": False})
    journal.append(log, "consistency.result", {"outcome": "match", "time": NOW - 900})
    # last.pt is saved twice in place: only its newest record is judged
    journal.append(log, "ledger.save", {"step": 310, "time": NOW - 950,
                                        **_checkpoint(run, "last.pt", b"old"), "verified": True})
    journal.append(log, "ledger.save", {"step": 320, "time": NOW - 940,
                                        **_checkpoint(run, "last.pt", b"new"), "verified": True})
    (run / "step200.pt").write_bytes(b"B" + b"b" * 199)  # same size, new bytes
    (run / "step100.pt").unlink()  # retention removed it: not "changed"

    exporter = ex.Exporter("node-a", [run])
    exporter.refresh_runs(now=NOW)
    got = _scrape(exporter)
    tags = {"run": "run-7", "Hostname": "node-a"}
    assert _pick(got, "ckpt_inspector_checkpoint_saves_total", **tags) == [5.0]
    assert _pick(got, "ckpt_inspector_checkpoint_verifications_total", result="verified") == [4.0]
    assert _pick(got, "ckpt_inspector_checkpoint_verifications_total", result="failed") == [1.0]
    assert _pick(got, "ckpt_inspector_last_checkpoint_timestamp_seconds", **tags) == [NOW - 940]
    assert _pick(got, "ckpt_inspector_checkpoint_age_seconds", **tags) == [940.0]
    assert _pick(got, "ckpt_inspector_last_verified_checkpoint_timestamp_seconds") == [NOW - 940]
    assert _pick(got, "ckpt_inspector_unverified_seconds", **tags) == [940.0]
    assert _pick(got, "ckpt_inspector_checkpoint_changed_after_save", step="200") == [1.0]
    assert _pick(got, "ckpt_inspector_checkpoint_changed_after_save", step="300") == [0.0]
    assert _pick(got, "ckpt_inspector_checkpoint_changed_after_save", step="100") == []
    assert _pick(got, "ckpt_inspector_checkpoint_changed_after_save", step="310") == []
    assert _pick(got, "ckpt_inspector_checkpoint_changed_after_save", step="320") == [0.0]
    assert _pick(got, "ckpt_inspector_guard_alarms_total", rule="nan_loss",
                 action="snapshot") == [2.0]
    assert _pick(got, "ckpt_inspector_last_guard_alarm_timestamp_seconds") == [NOW - 1400]
    assert _pick(got, "ckpt_inspector_consistency_checks_total", outcome="match") == [1.0]
    assert _pick(got, "ckpt_inspector_journal_problems", **tags) == [0.0]
    assert _pick(got, "ckpt_inspector_journal_readable", **tags) == [1.0]


def test_an_edited_journal_and_a_missing_one_are_published_as_such(tmp_path):
    edited, missing = tmp_path / "edited", tmp_path / "missing"
    log = journal.journal_path(edited)
    for step in (1, 2):
        journal.append(log, "ledger.save", {"step": step, "time": NOW, "path": "x.pt"})
    log.write_bytes(log.read_bytes().replace(b'"path": "x.pt"', b'"path": "y.pt"', 1))
    exporter = ex.Exporter("n", [edited, missing])
    exporter.refresh_runs(now=NOW)
    got = _scrape(exporter)
    assert _pick(got, "ckpt_inspector_journal_problems", run="edited") == [1.0]
    assert _pick(got, "ckpt_inspector_journal_readable", run="missing") == [0.0]
    # no verified save and no time at all: nothing to age from
    assert _pick(got, "ckpt_inspector_unverified_seconds", run="missing") == []


def test_a_changed_checkpoint_is_hashed_again_only_when_its_stat_moves(tmp_path, monkeypatch):
    run = tmp_path / "r"
    run.mkdir()
    journal.append(journal.journal_path(run), "ledger.save",
                   {"step": 1, "time": NOW, **_checkpoint(run, "c.pt", b"x" * 64)})
    calls = []
    real = ex.read_run.__globals__["sha256_file"]
    monkeypatch.setitem(ex.read_run.__globals__, "sha256_file",
                        lambda p: calls.append(p) or real(p))
    exporter = ex.Exporter("n", [run])
    exporter.refresh_runs(NOW)
    exporter.refresh_runs(NOW)
    assert len(calls) == 1


@pytest.mark.parametrize(("text", "host", "port"), [
    ("9400", "127.0.0.1", 9400), ("0.0.0.0:9400", "0.0.0.0", 9400),
    ("[::1]:0", "::1", 0), (":8000", "127.0.0.1", 8000),
])
def test_parse_address_defaults_to_this_machine_only(text, host, port):
    assert ex.parse_address(text) == ex.Address(host, port)


@pytest.mark.parametrize("text", ["", "host:", "9400x", "1:99999"])
def test_parse_address_refuses_with_one_line(text):
    with pytest.raises(CodedError, match=r"\[HOST:\]PORT"):
        ex.parse_address(text)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


def test_replay_served_over_http_in_a_real_process(tmp_path, python_exe):
    log = write_replay(tmp_path / "smi.csv", gpus=2, ticks=3, dbe_from=2)
    run = tmp_path / "run"
    journal.append(journal.journal_path(run), "guard.alarm",
                   {"step": 5, "rule": "loss_spike", "action": "stop", "time": NOW})
    proc = subprocess.Popen(
        [python_exe, "-I", "-m", "inspector", "telemetry", "--replay", str(log),
         "--serve", "127.0.0.1:0", "--interval", "0.2", "--duration", "60",
         "--hostname", "node-b", "--run", str(run)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        url = re.search(r"http://\S+/metrics", first).group(0)
        assert url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 60
        while True:  # the replay steps one tick per interval; the last tick stays
            got = _values(_get(url))
            if _pick(got, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="1") == [2.0]:
                break
            assert time.monotonic() < deadline, "the replay never reached its last tick"
            time.sleep(0.1)
        assert _pick(got, "DCGM_FI_DEV_GPU_TEMP", gpu="0", Hostname="node-b") == [42.0]
        assert _pick(got, "ckpt_inspector_guard_alarms_total", rule="loss_spike",
                     action="stop", run="run") == [1.0]
    finally:
        proc.terminate()
        proc.wait(30)


def test_live_nvml_served_and_stops_after_duration(monkeypatch, capsys):
    gpus = [fake_pynvml.FakeGpu(0), fake_pynvml.FakeGpu(1)]
    gpus[1].ecc[(fake_pynvml.real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                 fake_pynvml.real.NVML_VOLATILE_ECC)] = 3
    fake_pynvml.install(monkeypatch, fake_pynvml.FakeNvml(gpus))
    scraped: dict = {}
    real_update = ex.Exporter.update

    def update_then_scrape(self, samples):
        real_update(self, samples)
        if not scraped:
            scraped.update(_scrape(self))

    monkeypatch.setattr(ex.Exporter, "update", update_then_scrape)
    code = main(["telemetry", "--serve", "0", "--interval", "0.1", "--duration", "1",
                 "--hostname", "h"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.match(r"serving http://127\.0\.0\.1:\d+/metrics: 2 GPUs live", out)
    assert _pick(scraped, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="1", Hostname="h") == [3.0]
    assert _pick(scraped, "DCGM_FI_DEV_GPU_TEMP", gpu="0") == [45.0]


def test_live_nvml_source_feeds_the_exporter(monkeypatch):
    fake = fake_pynvml.install(monkeypatch, fake_pynvml.FakeNvml([fake_pynvml.FakeGpu(0)]))
    source = NvmlSource.open()
    try:
        exporter = ex.Exporter("h")
        exporter.update(source.sample())
        fake.gpus[0].remapped = (0, 1, 0, 1)
        fake.gpus[0].recovery_action = fake_pynvml.real.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
        fake.gpus[0].violation_ns[fake_pynvml.real.NVML_PERF_POLICY_THERMAL] = 2_500_000
        last = source.sample()
        exporter.update(last)
    finally:
        source.close()
    source_us = last[0].thermal_violation
    got = _scrape(exporter)
    assert _pick(got, "DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu="0") == [1.0]
    assert _pick(got, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu="0") == [1.0]
    # NVML's 2.5 ms, µs in the sample, ns as DCGM publishes it
    assert source_us == 2500.0
    assert _pick(got, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu="0") == [2_500_000.0]
    assert _pick(got, "DCGM_FI_DEV_POWER_VIOLATION", gpu="0") == [0.0]
    assert _pick(got, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", gpu="0") == [
        float(fake_pynvml.real.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET)]


def test_no_gpu_and_no_run_is_one_line_exit_3(monkeypatch, capsys):
    fake_pynvml.install(monkeypatch, fake_pynvml.FakeNvml(
        init_error=fake_pynvml.real.NVML_ERROR_DRIVER_NOT_LOADED))
    assert main(["telemetry", "--serve", "0"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--replay LOG" in err


def test_no_gpu_with_a_run_serves_the_run(monkeypatch, capsys, tmp_path):
    fake_pynvml.install(monkeypatch, fake_pynvml.FakeNvml(
        init_error=fake_pynvml.real.NVML_ERROR_DRIVER_NOT_LOADED))
    assert main(["telemetry", "--serve", "0", "--run", str(tmp_path), "--duration", "0.2"]) == 0
    assert "no GPU" in capsys.readouterr().out


def test_missing_prometheus_client_names_the_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "inspector.gpu.exporter", raising=False)
    monkeypatch.delattr(inspector.gpu, "exporter", raising=False)
    assert main(["telemetry", "--serve", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prometheus-client" in err


@pytest.mark.parametrize("other", [["--csv", "out.csv"], ["--from-prometheus", "http://x"]])
def test_serve_refuses_what_it_cannot_combine_with(other, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["telemetry", "--serve", "0", *other]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{other[0]} does not combine with --serve" in err
    assert not (tmp_path / "out.csv").exists()


def test_a_port_in_use_is_one_line_exit_2(tmp_path, capsys):
    log = write_replay(tmp_path / "smi.csv", gpus=1, ticks=1)
    endpoint = ex.Endpoint(ex.Exporter("n"), ex.Address("127.0.0.1", 0))
    try:
        port = endpoint.address.port
        assert main(["telemetry", "--replay", str(log), "--serve", str(port)]) == 2
    finally:
        endpoint.stop()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pick another port" in err


def test_serve_until_publishes_ticks_in_order_and_keeps_the_last():
    feed = ex.ticks(gpu_samples(gpus=2, ticks=3, dbe_from=None))
    assert [len(t) for t in feed] == [2, 2, 2]
    exporter = ex.Exporter("n")
    stop = threading.Event()
    ex.serve_until(exporter, stop, interval=0.01, duration=0.5, feed=feed)
    assert _pick(_scrape(exporter), "DCGM_FI_DEV_GPU_TEMP", gpu="1") == [43.0]


def test_an_nvidia_smi_log_with_violation_counters_is_published_in_dcgm_units():
    from inspector.gpu.smi_csv import parse_lines

    log = parse_lines([
        "timestamp, index, name, uuid, temperature.gpu, "
        "clocks_event_reasons_counters.sw_power_cap [us], "
        "clocks_event_reasons_counters.sw_thermal_slowdown [us]",
        "2026/12/01 10:00:00.000, 0, NVIDIA H100, GPU-1, 40, 91403239 us, 0 us",
    ])
    exporter = ex.Exporter("n")
    exporter.update(log.samples)
    got = _scrape(exporter)
    # nvidia-smi counts µs; DCGM_FI_DEV_POWER_VIOLATION is "Power Violation time in ns"
    assert _pick(got, "DCGM_FI_DEV_POWER_VIOLATION", gpu="0") == [91403239.0 * 1000]
    assert _pick(got, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu="0") == [0.0]


def test_unverified_time_counts_from_the_newest_verified_save_or_the_runs_start(tmp_path):
    failing, never = tmp_path / "failing", tmp_path / "never"
    for verified, when in ((True, NOW - 2000), (False, NOW - 1000)):
        journal.append(journal.journal_path(failing), "ledger.save",
                       {"step": 1, "time": when, "path": "a.pt", "verified": verified})
    journal.append(journal.journal_path(never), "guard.alarm",
                   {"step": 1, "rule": "nan_loss", "action": "stop", "time": NOW - 500})
    journal.append(journal.journal_path(never), "ledger.save",
                   {"step": 2, "time": NOW - 100, "path": "b.pt", "verified": False})
    exporter = ex.Exporter("n", [failing, never])
    exporter.refresh_runs(now=NOW)
    got = _scrape(exporter)
    assert _pick(got, "ckpt_inspector_unverified_seconds", run="failing") == [2000.0]
    assert _pick(got, "ckpt_inspector_unverified_seconds", run="never") == [500.0]
    assert _pick(got, "ckpt_inspector_last_verified_checkpoint_timestamp_seconds",
                 run="never") == []


def test_prometheus_reader_takes_dcgm_units_and_dcgm4_names_back(monkeypatch):
    from inspector.gpu import prom_reader

    tags = {"gpu": "0", "UUID": "GPU-a", "Hostname": "n"}
    series = [{"metric": {"__name__": name, **tags}, "values": [[100.0, value]]}
              for name, value in [("DCGM_FI_DEV_THERMAL_VIOLATION", "2500000"),
                                  ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "41"),
                                  ("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "1")]]
    monkeypatch.setattr(prom_reader, "_get",
                        lambda query: prom_reader._series({"data": {"result": series}}, query.url))
    query = prom_reader.RangeQuery("http://p", "n", 0.0, 200.0, 1.0)
    (sample,) = prom_reader.read_range(query)
    assert (sample.thermal_violation, sample.temperature_gpu, sample.recovery_action) == (
        2500.0, 41.0, 1.0)
    assert "DCGM_FI_DEV_GPU_TEMP_CELSIUS" in prom_reader._selector("n")
