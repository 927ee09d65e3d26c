"""The NVML health fields beyond ECC totals (issue 37), read through the stand-in pynvml with
the real nvidia-ml-py structs: uncorrected SRAM ECC errors by unit and the threshold flag, the
row remapper's histogram (banks by spare rows left), pending and failed remaps, the recovery
action and XIDs; each is a value or n/a with NVML's reason. The recovery action alerts
whenever it asks for something, whatever else reads healthy."""

from __future__ import annotations

import numpy as np
import pynvml
from fake_pynvml import FakeGpu, FakeNvml, install

from inspector.gpu.alerts import AlertRules
from inspector.gpu.nvml_source import NvmlSource
from inspector.gpu.telemetry import (
    FIELDS,
    RECOVERY_ACTIONS,
    RING_FIELDS,
    SRAM_UNITS,
    GpuSample,
    TelemetryStore,
)


def test_sram_ecc_by_unit_and_the_remapper_histogram_are_read(monkeypatch):
    gpu = FakeGpu(0, sram_uncorrected={"L2": 2, "Sm": 1}, sram_threshold_exceeded=True,
                  remap_banks=(9, 4, 2, 1, 0), remapped=(3, 1, 1, 0))
    install(monkeypatch, FakeNvml([gpu]))
    [s] = NvmlSource.open().sample()
    assert (s.sram_uncorrected_l2, s.sram_uncorrected_sm, s.sram_uncorrected_pcie,
            s.sram_uncorrected_mcu, s.sram_uncorrected_other) == (2, 1, 0, 0, 0)
    assert s.sram_threshold_exceeded is True
    assert (s.remap_banks_max, s.remap_banks_high, s.remap_banks_partial, s.remap_banks_low,
            s.remap_banks_none) == (9, 4, 2, 1, 0)
    assert (s.remapped_correctable, s.remapped_uncorrectable) == (3, 1)
    assert s.remapped_pending is True and s.remapped_failure is False
    assert s.recovery_action == 0


def test_a_gpu_without_them_reads_na_with_nvmls_reason(monkeypatch):
    gpu = FakeGpu(0, unsupported={"sram", "histogram"})
    install(monkeypatch, FakeNvml([gpu]))
    source = NvmlSource.open()
    [s] = source.sample()
    for unit in SRAM_UNITS:
        assert getattr(s, f"sram_uncorrected_{unit}") is None
    assert s.sram_threshold_exceeded is None and s.remap_banks_none is None
    assert s.temperature_gpu == 45  # the rest still reads
    for call in ("nvmlDeviceGetSramEccErrorStatus", "nvmlDeviceGetRowRemapperHistogram"):
        assert source.unavailable[call] == str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))


def test_a_reset_request_alerts_even_when_everything_else_reads_healthy(monkeypatch):
    gpu = FakeGpu(0)  # no ECC error, no retirement, no remap, cool: "Healthy" by every count
    install(monkeypatch, FakeNvml([gpu]))
    source, rules = NvmlSource.open(), AlertRules()
    [first] = source.sample()
    assert rules.evaluate(None, first) == []
    gpu.recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET
    [second] = source.sample()
    [alert] = rules.evaluate(first, second)
    assert alert.kind == "recovery_action" and alert.severity == "critical"
    assert "reset the GPU" in alert.message
    assert rules.evaluate(second, second) == []  # said once while it stands
    gpu.recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    [third] = source.sample()
    assert [a.message for a in rules.evaluate(second, third)] == [
        "GPU 0: the driver asks to reboot the node (NVML recovery action 2)"]


def test_recovery_action_words_cover_every_nvml_value():
    values = {getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_GPU_RECOVERY_ACTION_")}
    assert set(RECOVERY_ACTIONS) == values


def test_sram_errors_and_threshold_and_exhausted_banks_alert():
    rules = AlertRules()
    calm = GpuSample(1.0, 0, sram_uncorrected_l2=0, sram_threshold_exceeded=False,
                     remap_banks_none=0)
    assert rules.evaluate(None, calm) == []
    hit = GpuSample(2.0, 0, sram_uncorrected_l2=1, sram_threshold_exceeded=True,
                    remap_banks_none=2)
    alerts = {a.kind: a for a in rules.evaluate(calm, hit)}
    assert {kind: a.severity for kind, a in alerts.items()} == {
        "sram_uncorrected": "critical", "sram_threshold": "critical", "remap_banks_none": "warning"}
    assert "2 memory banks have no spare row left to remap" in alerts["remap_banks_none"].message
    assert rules.evaluate(hit, hit) == []


def test_health_counters_are_kept_by_change_and_read_back_at_every_sample():
    store = TelemetryStore(capacity=8)
    counts = [None, 0, 0, 0, 2, 2, 3, 3, 3, 3, 3]  # more samples than the ring holds
    for t, count in enumerate(counts):
        store.add(GpuSample(float(t), 0, temperature_gpu=50, sram_uncorrected_sm=count))
    times, values = store.series(0, "sram_uncorrected_sm")
    assert list(times) == [float(t) for t in range(3, 11)]
    assert [None if np.isnan(v) else v for v in values] == counts[3:]
    assert store.nbytes() < 8 * (len(RING_FIELDS) * 4 + 8) + 8 * 4 * (len(FIELDS) + 2)


def test_the_gpu_pane_shows_every_health_reading_or_why_it_is_na(qtbot, monkeypatch, artifacts):
    from inspector.gui.panes.gpu_pane import GpuPane
    from inspector.gui.widgets.gpu_table import COLUMNS

    healthy = FakeGpu(0, unsupported={"sram"})
    asking = FakeGpu(1, recovery_action=pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET,
                     remap_banks=(10, 3, 2, 1, 2), sram_uncorrected={"Mcu": 4})
    install(monkeypatch, FakeNvml([healthy, asking]))
    pane = GpuPane(interval=0.1)
    qtbot.addWidget(pane)
    pane.resize(1280, 680)
    pane.show()
    try:
        qtbot.waitUntil(lambda: pane.table.rowCount() == 2
                        and pane.table.item(1, len(COLUMNS) - 1) is not None, timeout=10_000)
        health = [pane.table.item(r, len(COLUMNS) - 1) for r in range(2)]
        assert health[0].text() == "ok"
        assert "n/a (" in health[0].toolTip() and "Not Supported" in health[0].toolTip()
        assert health[1].text() == ("driver asks: reset the GPU, 4 SRAM unc., "
                                    "2 banks without spare rows")
        tip = health[1].toolTip()
        assert "Uncorrected SRAM ECC: L2 0, SM 0, PCIE 0, MCU 4, OTHER 0" in tip
        assert "Banks by spare rows left: all 10, most 3, some 2, few 1, none 2" in tip
        assert "Recovery action: reset the GPU" in tip
        assert "recovery_action" in {a.kind for a in pane.store.alerts}
        assert "the driver asks to reset the GPU" in pane.banner_text.text()  # it leads
        shots = artifacts / "screens"
        shots.mkdir(parents=True, exist_ok=True)
        for width, height in ((1280, 720), (1920, 1080)):
            pane.resize(width, height - 40)
            qtbot.wait(150)
            assert pane.grab().save(str(shots / f"gpu-health-{width}x{height}-light.png"))
    finally:
        pane.shutdown()


def test_uncorrected_ecc_errors_are_never_called_ok():
    """NVML's retirement and remap summaries can read clean while the volatile counter holds
    uncorrected ECC errors: the Health cell goes by the counter."""
    from inspector.gui.widgets.gpu_table import COLUMNS, sample_cells

    health = COLUMNS.index("Health")
    clean = GpuSample(timestamp=0.0, index=0, ecc_uncorrected_volatile=0, retired_pending=False,
                      remapped_pending=False, remapped_failure=False)
    assert sample_cells(0, clean)[health] == "ok"
    errors = GpuSample(timestamp=0.0, index=0, ecc_uncorrected_volatile=3, retired_pending=False,
                       remapped_pending=False, remapped_failure=False)
    assert sample_cells(0, errors)[health] == "3 ECC unc."
