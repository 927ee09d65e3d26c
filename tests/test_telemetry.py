"""NVML mapping, alert rules, ring buffer and sampler, against a stand-in pynvml."""

from __future__ import annotations

import threading
import time

import numpy as np
import pynvml
import pytest
from fake_pynvml import FakeGpu, FakeNvml, install

from inspector.gpu.alerts import AlertRules, ingest
from inspector.gpu.nvml_source import NvmlSource, NvmlUnavailable
from inspector.gpu.sampler import Sampler
from inspector.gpu.telemetry import (
    CLOCK_REASONS,
    DEFAULT_CAPACITY,
    FIELDS,
    GpuSample,
    TelemetryStore,
    decode_clock_reasons,
)

CORR, UNC = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOL, AGG = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC


def _wait_for(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_clock_reason_bits_are_nvmls_constants():
    names = {
        "idle": "GpuIdle",
        "applications clocks setting": "ApplicationsClocksSetting",
        "software power cap": "SwPowerCap",
        "hardware slowdown": "HwSlowdown",
        "sync boost": "SyncBoost",
        "software thermal slowdown": "SwThermalSlowdown",
        "hardware thermal slowdown": "HwThermalSlowdown",
        "hardware power brake": "HwPowerBrakeSlowdown",
        "display clock setting": "DisplayClockSetting",
    }
    for bit, word in CLOCK_REASONS:
        assert getattr(pynvml, f"nvmlClocksEventReason{names[word]}") == bit
    mask = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert decode_clock_reasons(mask) == ["software power cap", "hardware thermal slowdown"]
    assert decode_clock_reasons(0x1000 | 0x1) == ["idle", "other (0x1000)"]
    assert decode_clock_reasons(None) == [] and decode_clock_reasons(0) == []


def test_nvml_values_are_mapped_with_units(monkeypatch):
    gpu = FakeGpu(0, ecc={(CORR, VOL): 3, (UNC, VOL): 1, (CORR, AGG): 30, (UNC, AGG): 2},
                  retired={pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: [1, 2],
                           pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [7]},
                  retired_pending=pynvml.NVML_FEATURE_ENABLED, remapped=(5, 1, 1, 0),
                  pcie_replay=12)
    install(monkeypatch, FakeNvml([gpu]))
    source = NvmlSource.open()
    assert source.names == ["NVIDIA H100 80GB HBM3"] and source.driver_version == "580.95.05"
    [s] = source.sample()
    assert (s.index, s.temperature_gpu, s.temperature_memory) == (0, 45, 52.0)
    assert (s.power_draw, s.power_limit) == (312.5, 700.0)  # mW -> W
    assert (s.utilization_gpu, s.utilization_memory) == (97, 61)
    assert (s.memory_used, s.memory_total) == (80_123, 81_559)  # bytes -> MiB
    assert (s.clock_sm, s.clock_memory, s.fan_speed, s.pcie_replay) == (1980, 2619, 40, 12)
    assert s.reasons() == ["software power cap"]
    assert (s.ecc_corrected_volatile, s.ecc_uncorrected_volatile) == (3, 1)
    assert (s.ecc_corrected_aggregate, s.ecc_uncorrected_aggregate) == (30, 2)
    assert (s.retired_sbe, s.retired_dbe, s.retired_pending) == (2, 1, True)
    assert (s.remapped_correctable, s.remapped_uncorrectable) == (5, 1)
    assert (s.remapped_pending, s.remapped_failure) == (True, False)
    source.close()


def test_not_supported_fields_read_na_and_the_rest_still_reads(monkeypatch):
    gpu = FakeGpu(0, unsupported={"fan", "ecc", "retired", "remapped", "pcie", "reasons",
                                  "memory_temperature", "power_limit"})
    install(monkeypatch, FakeNvml([gpu]))
    [s] = NvmlSource.open().sample()
    for name in ("fan_speed", "ecc_uncorrected_volatile", "ecc_corrected_aggregate",
                 "retired_sbe", "retired_pending", "remapped_pending", "remapped_failure",
                 "pcie_replay", "clocks_event_reasons", "temperature_memory", "power_limit"):
        assert getattr(s, name) is None, name
    assert s.temperature_gpu == 45 and s.power_draw == 312.5 and not s.lost
    assert s.reasons() == []


def test_real_pynvml_without_driver_says_so_in_one_line():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present on this machine")
    with pytest.raises(NvmlUnavailable) as info:
        NvmlSource.open()
    message = str(info.value)
    assert "\n" not in message and "no NVIDIA driver found" in message


@pytest.mark.parametrize(
    ("fake", "words"),
    [
        (FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), "Driver Not Loaded"),
        (FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "Library Not Found"),
        (FakeNvml(gpus=[]), "no NVIDIA GPU found"),
    ],
)
def test_no_driver_or_no_gpu_is_one_line(monkeypatch, fake, words):
    install(monkeypatch, fake)
    with pytest.raises(NvmlUnavailable, match=words) as info:
        NvmlSource.open()
    assert "\n" not in str(info.value)


def test_lost_gpu_is_reported_while_others_keep_sampling(monkeypatch):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1, name="NVIDIA A100")]))
    source = NvmlSource.open()
    store = TelemetryStore(capacity=16)
    assert ingest(store, source.sample()) == []
    fake.gpus[1].lost = True
    first = source.sample()
    assert [s.lost for s in first] == [False, True] and first[0].temperature_gpu == 45
    assert first[1].name == "NVIDIA A100" and first[1].temperature_gpu is None
    alerts = ingest(store, first)
    assert [(a.gpu, a.kind) for a in alerts] == [(1, "gpu_lost")]
    assert ingest(store, source.sample()) == []  # reported once, not on every tick


def test_driver_vanishing_mid_run_stops_sampler_with_an_alert(monkeypatch):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1)]))
    source = NvmlSource.open()
    store = TelemetryStore(capacity=64)
    sampler = Sampler(source, store, interval=0.1)
    sampler.start()
    assert _wait_for(lambda: store.count(1) >= 3)
    fake.driver_gone = True
    assert sampler.wait(5.0), "sampler did not stop after the driver vanished"
    sampler.stop()
    assert "driver stopped answering" in sampler.error and "Uninitialized" in sampler.error
    assert [a.kind for a in store.alerts][-1] == "source_lost"
    assert fake.event_sets_open == 0  # the XID thread freed its event set
    source.close()


def test_xid_event_is_stored_alerted_and_carried_by_the_next_sample(monkeypatch):
    fake = install(monkeypatch, FakeNvml([FakeGpu(0), FakeGpu(1)]))
    store = TelemetryStore(capacity=64)
    seen: list[GpuSample] = []
    alerts = []
    sampler = Sampler(NvmlSource.open(), store, interval=0.1,
                      on_samples=lambda samples, _: seen.extend(samples),
                      on_alert=alerts.append)
    sampler.start()
    try:
        assert _wait_for(lambda: len(seen) >= 2)
        fake.inject_xid(1, 79)
        assert _wait_for(lambda: any(s.xids for s in seen))
    finally:
        sampler.stop()
    [event] = store.xids
    assert (event.gpu, event.xid) == (1, 79)
    [alert] = [a for a in alerts if a.kind == "xid"]
    assert alert.message == "GPU 1: XID 79 (GPU has fallen off the bus)"
    assert [(s.index, s.xids) for s in seen if s.xids] == [(1, (79,))]
    assert fake.event_sets_open == 0


def test_alert_rules():
    base = GpuSample(0.0, 0, temperature_gpu=70, ecc_uncorrected_volatile=0,
                     ecc_uncorrected_aggregate=4, retired_pending=False, remapped_pending=False)

    def step(**changes):
        return GpuSample(**{**base.__dict__, "timestamp": 1.0, **changes})

    evaluate = AlertRules().evaluate
    # the first sample already shows 4 uncorrected (aggregate) errors: that alerts, once
    [first] = evaluate(None, base)
    assert (first.kind, first.severity) == ("ecc_uncorrected", "critical")
    assert "4 uncorrected ECC errors (aggregate)" in first.message
    assert evaluate(base, step()) == []
    [a] = evaluate(base, step(ecc_uncorrected_volatile=2))
    assert (a.kind, a.severity) == ("ecc_uncorrected", "critical")
    assert "volatile" in a.message and "from 0 to 2" in a.message
    assert [a.kind for a in evaluate(base, step(ecc_uncorrected_aggregate=5))] == [
        "ecc_uncorrected"]
    # an [N/A] sample between counts does not hide a rise (the rules keep the highest known)
    assert [a.message for a in evaluate(step(ecc_uncorrected_volatile=None),
                                        step(ecc_uncorrected_volatile=3))] == [
        "GPU 0: uncorrected ECC errors (volatile) rose from 2 to 3"]
    assert [a.kind for a in evaluate(base, step(retired_pending=True))] == ["retired_pending"]
    assert [a.kind for a in evaluate(base, step(remapped_pending=True))] == ["remapped_pending"]
    assert [a.kind for a in evaluate(base, step(remapped_failure=True))] == ["remapped_failure"]
    assert evaluate(step(retired_pending=True), step(retired_pending=True)) == []
    hot = AlertRules(temp_threshold=95)
    hot.evaluate(None, base)  # its first sample's 4 aggregate errors alert here, once
    assert hot.evaluate(base, step(temperature_gpu=91)) == []


def test_temperature_alerts_once_while_hovering_at_the_threshold():
    rules = AlertRules(temp_threshold=85, hysteresis=5)
    temps = [80, 86, 84, 86, 85, 87, 79, 86, 90]
    fired = []
    previous = None
    for i, temp in enumerate(temps):
        sample = GpuSample(float(i), 1, temperature_gpu=temp)
        fired += [(i, a.message) for a in rules.evaluate(previous, sample)]
        previous = sample
    # above 85 at i=1; the dips to 84/85 do not re-arm it; 79 (<= 80) does; 86 alerts again
    assert fired == [(1, "GPU 1: temperature 86 °C above 85 °C"),
                     (7, "GPU 1: temperature 86 °C above 85 °C")]
    other_gpu = rules.evaluate(None, GpuSample(9.0, 2, temperature_gpu=88))
    assert [a.gpu for a in other_gpu] == [2]  # each GPU has its own state


def test_ring_buffer_wraps_oldest_first():
    store = TelemetryStore(capacity=5)
    for i in range(12):
        store.add(GpuSample(float(i), 3, temperature_gpu=40 + i, fan_speed=None))
    times, temps = store.series(3, "temperature_gpu")
    assert times.tolist() == [7, 8, 9, 10, 11] and temps.tolist() == [47, 48, 49, 50, 51]
    _, fan = store.series(3, "fan_speed")
    assert fan.shape == (5,) and all(v != v for v in fan)  # NaN = n/a
    assert store.gpus() == [3] and store.count(3) == 5 and store.latest(3).timestamp == 11
    assert store.series(0, "temperature_gpu")[0].size == 0


def test_ring_holds_24_hours_at_1_hz_for_8_gpus_compactly():
    store = TelemetryStore()
    assert DEFAULT_CAPACITY >= 24 * 3600
    for gpu in range(8):
        store.add(GpuSample(0.0, gpu, temperature_gpu=50))
    # 8 GPUs x 86,400 samples x every field: float32 values + float64 times, no per-sample
    # objects.
    assert store.nbytes() <= 8 * DEFAULT_CAPACITY * (len(FIELDS) * 4 + 8)
    assert store.nbytes() < 80 * 1024 * 1024


def test_sampler_keeps_its_interval_and_rejects_too_fast(monkeypatch):
    install(monkeypatch, FakeNvml([FakeGpu(0)]))
    with pytest.raises(ValueError, match=r"at least 0\.1"):
        Sampler(NvmlSource.open(), TelemetryStore(16), interval=0.05)
    store = TelemetryStore(capacity=64)
    sampler = Sampler(NvmlSource.open(), store, interval=0.1)
    sampler.start()
    time.sleep(1.0)
    sampler.stop()
    # A starved 2-core machine may delay ticks but never hurries them: bounds are one-sided
    # where scheduling could stretch them.
    assert 3 <= sampler.ticks <= 12
    times, _ = store.series(0, "temperature_gpu")
    assert 0.08 < np.diff(times).mean() < 0.35
    assert not any(t.name.startswith("telemetry-") for t in threading.enumerate())


def _real_driver() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _real_driver(), reason="no NVIDIA driver/GPU on this machine")
def test_real_nvml_samples_every_gpu_at_10_hz():
    source = NvmlSource.open()
    try:
        [first, *_] = source.sample()
        assert first.name and "NVIDIA" in first.name.upper()
        assert first.temperature_gpu is not None and 0 < first.temperature_gpu < 120
        assert first.memory_total and first.memory_total > 1024
        assert first.power_draw is not None and first.clock_sm is not None
        store = TelemetryStore(capacity=256)
        sampler = Sampler(source, store, interval=0.1)
        sampler.start()
        time.sleep(2.0)
        sampler.stop()
        assert sampler.error is None and 15 <= sampler.ticks <= 25
        assert store.count(0) == sampler.ticks
    finally:
        source.close()
