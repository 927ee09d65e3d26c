"""dcgm-exporter's metric name for every telemetry field, so dashboards built for it work unchanged.

Data beside the field registry (`telemetry.FIELDS`): one row per field, in its order; a field
no DCGM field stands for is named `ckpt_inspector_gpu_<field>`. The names are DCGM's field
identifiers as dcgm-exporter publishes them (the names in its `etc/default-counters.csv`; DCGM
4.x renamed many fields with their base unit, `DCGM_FI_DEV_GPU_TEMP_CELSIUS` and so on, and
those newer names are aliases a Prometheus reader also accepts where the unit stayed the
same: `GPU_UTIL_RATIO` or `SM_CLOCK_HERTZ` are not). Several are off in
dcgm-exporter's default counters (ECC, retired pages, violations) or absent from it
(`FB_TOTAL`, `ENFORCED_POWER_LIMIT`, `FAN_SPEED`, `CLOCKS_EVENT_REASONS`, `ROW_REMAP_PENDING`,
`GET_GPU_RECOVERY_ACTION`): a user adds them to its counters file under these names. Values
are in DCGM's units: a field's own unit times `scale` (the violation counters are µs in
nvidia-smi and this tool, ns in DCGM); a boolean field is 1 or 0. The test suite holds that
every field has a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

# The labels dcgm-exporter puts on every GPU series, spelled as it spells them.
GPU_LABELS: tuple[str, ...] = ("gpu", "UUID", "device", "modelName", "Hostname")


@dataclass(frozen=True)
class DcgmName:
    """One telemetry field under its dcgm-exporter name (and other names it is published as);
    the published value is the field's times `scale`."""

    field: str
    metric: str
    aliases: tuple[str, ...] = ()
    scale: float = 1.0


DCGM_NAMES: tuple[DcgmName, ...] = (
    DcgmName("temperature_gpu", "DCGM_FI_DEV_GPU_TEMP", ("DCGM_FI_DEV_GPU_TEMP_CELSIUS",)),
    DcgmName("temperature_memory", "DCGM_FI_DEV_MEMORY_TEMP",
             ("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",)),
    DcgmName("power_draw", "DCGM_FI_DEV_POWER_USAGE", ("DCGM_FI_DEV_BOARD_POWER_WATTS",)),
    DcgmName("power_limit", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
             ("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",)),
    DcgmName("utilization_gpu", "DCGM_FI_DEV_GPU_UTIL"),
    DcgmName("utilization_memory", "DCGM_FI_DEV_MEM_COPY_UTIL"),
    DcgmName("memory_used", "DCGM_FI_DEV_FB_USED"),
    DcgmName("memory_total", "DCGM_FI_DEV_FB_TOTAL"),
    DcgmName("clock_sm", "DCGM_FI_DEV_SM_CLOCK"),
    DcgmName("clock_memory", "DCGM_FI_DEV_MEM_CLOCK"),
    DcgmName("clocks_event_reasons", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
             ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",)),
    DcgmName("fan_speed", "DCGM_FI_DEV_FAN_SPEED"),
    DcgmName("pcie_replay", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
    DcgmName("ecc_corrected_volatile", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    DcgmName("ecc_uncorrected_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    DcgmName("ecc_corrected_aggregate", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
    DcgmName("ecc_uncorrected_aggregate", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
    DcgmName("retired_sbe", "DCGM_FI_DEV_RETIRED_SBE"),
    DcgmName("retired_dbe", "DCGM_FI_DEV_RETIRED_DBE"),
    DcgmName("retired_pending", "DCGM_FI_DEV_RETIRED_PENDING",
             ("DCGM_FI_DEV_PAGE_RETIRED_PENDING",)),
    DcgmName("remapped_correctable", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
    DcgmName("remapped_uncorrectable", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
    DcgmName("remapped_pending", "DCGM_FI_DEV_ROW_REMAP_PENDING"),
    DcgmName("remapped_failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
             ("DCGM_FI_DEV_ROW_REMAP_FAILED",)),
    DcgmName("power_violation", "DCGM_FI_DEV_POWER_VIOLATION", scale=1000.0),
    DcgmName("thermal_violation", "DCGM_FI_DEV_THERMAL_VIOLATION", scale=1000.0),
    DcgmName("recovery_action", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
             ("DCGM_FI_DEV_GPU_RECOVERY_ACTION", "ckpt_inspector_gpu_recovery_action")),
    # NVML readings this tool publishes under its own names (no DCGM name is claimed for them)
    *(DcgmName(name, f"ckpt_inspector_gpu_{name}") for name in (
        "sram_uncorrected_l2", "sram_uncorrected_sm", "sram_uncorrected_pcie",
        "sram_uncorrected_mcu", "sram_uncorrected_other", "sram_threshold_exceeded",
        "remap_banks_max", "remap_banks_high", "remap_banks_partial", "remap_banks_low",
        "remap_banks_none")),
)

# Not a field: the number of the last XID the driver reported (0 = none), as dcgm-exporter has it.
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
