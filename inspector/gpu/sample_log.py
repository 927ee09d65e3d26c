"""The shipped sample telemetry log: two GPUs for two minutes, made by this module, so a
machine without a GPU has something to look at (the GPU pane's "Open the sample log", and
`telemetry --replay` named in the no-GPU line).

GPU 0 runs hot and throttles: from 40 s its temperature climbs past 85 °C, the clock-event
reasons turn to software and hardware thermal slowdown, the SM clock drops and the thermal
violation counter runs. GPU 1 takes an uncorrected ECC error at 80 s: its volatile and
aggregate counts go from 0 to 1, a row remap is pending, one bank has used a spare row and the
driver's recovery action asks for a GPU reset. Everything else reads healthy. The samples are
made here (`samples()`); `scripts/make_sample_telemetry.py` writes them to `RESOURCE` with
`smi_csv.write_log`, and the tests hold that the shipped file reads back as these samples.
"""

from __future__ import annotations

from pathlib import Path

from inspector.gpu.telemetry import GpuSample

RESOURCE = "telemetry/sample-two-gpus-ecc-throttle.csv"
START = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
SECONDS = 120
THROTTLE_FROM, COOL_FROM = 40, 75
ECC_AT = 80
THERMAL = 0x020 | 0x040  # software and hardware thermal slowdown (telemetry.CLOCK_REASONS)
POWER_CAP = 0x004
GPU_RESET = 1  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
NAMES = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
UUIDS = ("GPU-5a1e0000-0000-4000-8000-000000000000", "GPU-5a1e0001-0000-4000-8000-000000000001")


def path() -> Path:
    """Where the shipped log is (a checkout's `resources/`, or the installed package's)."""
    from inspector.resources_path import resource

    return Path(str(resource(RESOURCE)))


def samples() -> list[GpuSample]:
    """The log's samples, two per second, GPU 0 then GPU 1."""
    return [gpu(i, t) for t in range(SECONDS) for i in (0, 1)]


def gpu(index: int, t: int) -> GpuSample:
    """GPU `index` at second `t` of the log."""
    s = GpuSample(START + t, index, NAMES[index], UUIDS[index])
    hot = index == 0 and THROTTLE_FROM <= t < COOL_FROM
    s.temperature_gpu = _temperature(index, t)
    s.temperature_memory = s.temperature_gpu + 6
    s.power_draw, s.power_limit = (612.0 if not hot else 548.0) - 10 * index, 700.0
    s.utilization_gpu, s.utilization_memory = 98.0, 64.0 - 3 * index
    s.memory_used, s.memory_total = 78_211.0 + 100 * index, 81_559.0
    s.clock_sm, s.clock_memory = (1410.0 if hot else 1980.0), 2619.0
    s.clocks_event_reasons = THERMAL if hot else POWER_CAP
    s.fan_speed = None  # passively cooled SXM boards report no fan
    s.pcie_replay = 0.0
    s.thermal_violation = float(max(0, min(t, COOL_FROM) - THROTTLE_FROM) * 1_000_000
                                if index == 0 else 0)
    s.power_violation = float(t * 250_000)
    broken = index == 1 and t >= ECC_AT
    s.ecc_corrected_volatile = s.ecc_corrected_aggregate = 2.0 if broken else 0.0
    s.ecc_uncorrected_volatile = s.ecc_uncorrected_aggregate = 1.0 if broken else 0.0
    s.retired_sbe = s.retired_dbe = 0.0
    s.retired_pending = False
    s.remapped_correctable, s.remapped_uncorrectable = 0.0, (1.0 if broken else 0.0)
    s.remapped_pending, s.remapped_failure = broken, False
    s.recovery_action = float(GPU_RESET if broken else 0)
    for unit in ("l2", "sm", "pcie", "mcu", "other"):
        setattr(s, f"sram_uncorrected_{unit}", 0.0)
    s.sram_threshold_exceeded = False
    s.remap_banks_max, s.remap_banks_high = (8191.0, 1.0) if broken else (8192.0, 0.0)
    s.remap_banks_partial = s.remap_banks_low = s.remap_banks_none = 0.0
    return s


def _temperature(index: int, t: int) -> float:
    """GPU 1 steady; GPU 0 climbing 1 °C a second to 89 °C while throttled, then cooling."""
    if index == 1 or t < THROTTLE_FROM:
        return 74.0 if index == 1 else 71.0
    if t < COOL_FROM:
        return 71.0 + min(t - THROTTLE_FROM, 18)
    return max(71.0, 89.0 - (t - COOL_FROM) / 2)
