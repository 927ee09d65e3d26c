"""Replay of nvidia-smi CSV logs in their real formats, and recordings other tools can read."""
# ruff: noqa: E501

from __future__ import annotations

import csv
from datetime import datetime

import pytest
from fake_pynvml import FakeGpu, FakeNvml, install

from inspector.core.atomic import OutputExistsError
from inspector.gpu.alerts import AlertRules, ingest
from inspector.gpu.nvml_source import NvmlSource
from inspector.gpu.smi_csv import LogFormatError, parse_lines, read_log, write_log
from inspector.gpu.telemetry import FIELDS, GpuSample, TelemetryStore

# `nvidia-smi --query-gpu=... --format=csv -l 5` on a two-GPU server: units in header and
# cells, one row per GPU per interval, unsupported fields as [N/A] / [Not Supported].
WITH_UNITS = """\
timestamp, index, name, temperature.gpu, temperature.memory, utilization.gpu [%], power.draw [W], power.limit [W], memory.used [MiB], memory.total [MiB], clocks.current.sm [MHz], fan.speed [%], ecc.errors.uncorrected.volatile.total, clocks_throttle_reasons.active, retired_pages.pending
2026/11/20 10:00:05.000, 0, NVIDIA H100 80GB HBM3, 45, 52, 97 %, 612.33 W, 700.00 W, 80123 MiB, 81559 MiB, 1980 MHz, [N/A], 0, 0x0000000000000004, [N/A]
2026/11/20 10:00:05.002, 1, NVIDIA H100 80GB HBM3, 47, [N/A], 95 %, 598.10 W, 700.00 W, 80001 MiB, 81559 MiB, 1965 MHz, [N/A], 0, 0x0000000000000000, [Not Supported]
2026/11/20 10:00:10.000, 0, NVIDIA H100 80GB HBM3, 46, 53, 98 %, 640.02 W, 700.00 W, 80123 MiB, 81559 MiB, 1980 MHz, [N/A], 1, 0x0000000000000044, [N/A]
2026/11/20 10:00:10.003, 1, NVIDIA H100 80GB HBM3, 88, [N/A], 96 %, 601.55 W, 700.00 W, 80001 MiB, 81559 MiB, 1965 MHz, [N/A], 0, 0x0000000000000000, [Not Supported]
"""

NO_UNITS = """\
index, temperature.gpu, utilization.gpu [%], memory.used [MiB]
0, 61, 12, 1024
0, 62, 14, 1030
0, 63, [N/A], 1031
"""


def _local(text: str) -> float:
    return datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").timestamp()


def test_nvidia_smi_log_with_units_and_na_cells(tmp_path):
    path = tmp_path / "smi.csv"
    path.write_text(WITH_UNITS)
    log = read_log(path)
    assert len(log.samples) == 4 and log.bad_cells == 0
    s0, s1, s2, s3 = log.samples
    assert (s0.timestamp, s0.index, s0.name) == (_local("2026/11/20 10:00:05.000"), 0,
                                                 "NVIDIA H100 80GB HBM3")
    assert (s0.temperature_gpu, s0.temperature_memory, s0.utilization_gpu) == (45, 52, 97)
    assert (s0.power_draw, s0.power_limit) == pytest.approx((612.33, 700.0))
    assert (s0.memory_used, s0.memory_total, s0.clock_sm) == (80123, 81559, 1980)
    assert s0.fan_speed is None and s1.temperature_memory is None
    assert s1.retired_pending is None and s0.reasons() == ["software power cap"]
    assert s2.reasons() == ["software power cap", "hardware thermal slowdown"]
    assert s1.index == 1 and s3.timestamp == _local("2026/11/20 10:00:10.003")
    store = TelemetryStore(capacity=10)
    alerts = ingest(store, log.samples, AlertRules(temp_threshold=85))
    assert [(a.gpu, a.kind) for a in alerts] == [(0, "ecc_uncorrected"), (1, "temperature")]
    assert store.series(1, "power_draw")[1].tolist() == pytest.approx([598.10, 601.55])


def test_nounits_subset_without_timestamp_numbers_intervals():
    log = parse_lines(NO_UNITS.splitlines(keepends=True))
    assert [s.timestamp for s in log.samples] == [0.0, 1.0, 2.0]
    assert [s.temperature_gpu for s in log.samples] == [61, 62, 63]
    assert log.samples[2].utilization_gpu is None and log.samples[2].memory_used == 1031
    assert log.notes == ["no timestamp column: intervals are numbered 1 s apart"]
    assert all(s.power_draw is None for s in log.samples)  # fields not queried are n/a


def test_remapped_rows_yes_no_and_repeated_header_of_a_concatenated_log():
    text = (
        "timestamp, index, remapped_rows.pending, remapped_rows.failure, "
        "remapped_rows.uncorrectable\n"
        "2026/11/20 10:00:05.000, 0, No, No, 0\n"
        "timestamp, index, remapped_rows.pending, remapped_rows.failure, "
        "remapped_rows.uncorrectable\n"
        "2026/11/20 11:00:05.000, 0, Yes, No, 2\n"
    )
    log = parse_lines(text.splitlines())
    assert [s.remapped_pending for s in log.samples] == [False, True]
    alerts = ingest(TelemetryStore(4), log.samples)
    assert [a.kind for a in alerts] == ["remapped_pending"]


def test_bad_cells_are_counted_not_fatal():
    log = parse_lines(["index, temperature.gpu, power.draw [W]\n", "0, hot, 100 W\n",
                       "0, 50, 101 W\n"])
    assert log.bad_cells == 1 and [s.temperature_gpu for s in log.samples] == [None, 50]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0, 45, 97 %\n", "line 1 is not an nvidia-smi CSV header"),
        ("", "empty log"),
        ("timestamp, index, name\n2026/11/20 10:00:05.000, 0, x\n", "no GPU telemetry columns"),
        ("\x00\x01PK binary junk\n", "is not an nvidia-smi CSV header"),
    ],
)
def test_unreadable_logs_give_one_line(tmp_path, text, message):
    path = tmp_path / "log.csv"
    path.write_text(text)
    with pytest.raises(LogFormatError, match=message) as info:
        read_log(path)
    assert "\n" not in str(info.value)
    with pytest.raises(LogFormatError, match="cannot read"):
        read_log(tmp_path / "missing.csv")


def _recorded_samples(monkeypatch) -> list[GpuSample]:
    fake = install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, name="NVIDIA A100, PCIe")]))
    fake.gpus[1].unsupported = {"fan", "memory_temperature"}
    source = NvmlSource.open()
    first = source.sample()
    fake.gpus[0].temperature, fake.gpus[0].remapped = 90, (1, 1, 1, 0)
    second = source.sample()
    second[0].xids = (79, 48)
    for s in second:
        s.timestamp = first[0].timestamp + 1.0
    return first + second


def test_own_recording_round_trips(tmp_path, monkeypatch):
    samples = _recorded_samples(monkeypatch)
    path = tmp_path / "rec.csv"
    assert write_log(path, samples) == 4
    log = read_log(path)
    assert len(log.samples) == 4 and log.bad_cells == 0
    for want, got in zip(samples, log.samples, strict=True):
        assert (got.index, got.name, got.uuid, got.xids) == (want.index, want.name, want.uuid,
                                                             want.xids)
        assert got.timestamp == pytest.approx(want.timestamp, abs=1e-3)
        for f in FIELDS:
            assert getattr(got, f.name) == pytest.approx(getattr(want, f.name), abs=0.01), f.name
    store = TelemetryStore(8)
    kinds = [a.kind for a in ingest(store, log.samples)]
    assert kinds == ["remapped_pending", "temperature", "xid", "xid"]
    assert [(e.gpu, e.xid) for e in store.xids] == [(0, 79), (0, 48)]


def test_recording_uses_nvidia_smi_column_names_any_csv_tool_reads(tmp_path, monkeypatch):
    path = tmp_path / "rec.csv"
    write_log(path, _recorded_samples(monkeypatch))
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, skipinitialspace=True))
    assert rows[0]["power.draw [W]"] == "312.5" and rows[0]["memory.used [MiB]"] == "80123"
    assert rows[0]["temperature.gpu"] == "45" and rows[1]["fan.speed [%]"] == "[N/A]"
    assert rows[1]["name"] == "NVIDIA A100, PCIe"
    assert rows[2]["remapped_rows.pending"] == "Yes"
    assert rows[0]["clocks_event_reasons.active"] == "0x0000000000000004"
    assert rows[2]["xid"] == "79;48" and rows[0]["xid"] == "[N/A]"
    datetime.strptime(rows[0]["timestamp"], "%Y/%m/%d %H:%M:%S.%f")


def test_recording_never_overwrites_unless_asked(tmp_path):
    path = tmp_path / "rec.csv"
    path.write_text("keep me")
    with pytest.raises(OutputExistsError):
        write_log(path, [GpuSample(0.0, 0, temperature_gpu=1)])
    assert path.read_text() == "keep me"
    write_log(path, [GpuSample(0.0, 0, temperature_gpu=1)], overwrite=True)
    assert read_log(path).samples[0].temperature_gpu == 1
    assert [p.name for p in tmp_path.iterdir()] == ["rec.csv"]  # no temp file left behind


@pytest.mark.parametrize("cell", ["x" * (200 << 10)])
def test_a_replayed_log_with_a_cell_past_the_csv_limit_is_one_clear_error(tmp_path, capsys, cell):
    from inspector.cli import main
    log = tmp_path / "gpu.csv"
    log.write_text("timestamp, index, name, temperature.gpu\n"
                   f"2026/12/01 10:00:00.000, 0, \"{cell}\", 40\n")
    code = main(["telemetry", "--replay", str(log)])
    err = capsys.readouterr().err
    assert code != 0 and "not a telemetry log" in err and "Traceback" not in err
