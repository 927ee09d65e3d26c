"""GPU telemetry model: one sample per GPU per tick, its fields, a compact ring buffer and the
source protocol; the alert rules are `gpu.alerts`, the live sampler `gpu.sampler`.

Pure Python + NumPy; no NVML, Qt or torch here, so the CLI, the GUI and replayed logs share it.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.1
# 24 h at 1 Hz per GPU; a ring is allocated per GPU seen, so 8 GPUs hold 8 of these.
DEFAULT_CAPACITY = 24 * 3600
DEFAULT_TEMP_THRESHOLD_C = 85.0
TEMP_HYSTERESIS_C = 5.0


def _f(smi: str, unit: str, label: str, kind: str = "number", aliases: tuple[str, ...] = (),
       ring: bool = True):
    """A GpuSample field whose metadata names its nvidia-smi column, unit and chart label;
    `ring` False keeps a rarely changing health counter out of the per-sample ring (its
    changes are kept instead, see `GpuRing`)."""
    meta = {"smi": smi, "unit": unit, "label": label, "kind": kind, "aliases": aliases,
            "ring": ring}
    return field(default=None, metadata=meta)


@dataclass
class GpuSample:
    """One reading of one GPU; every measurement is optional (None = n/a on this device)."""

    timestamp: float
    index: int
    name: str | None = None
    uuid: str | None = None
    lost: bool = False
    xids: tuple[int, ...] = ()
    temperature_gpu: float | None = _f("temperature.gpu", "", "GPU temperature (°C)")
    temperature_memory: float | None = _f("temperature.memory", "", "Memory temperature (°C)")
    power_draw: float | None = _f("power.draw", "W", "Power draw (W)")
    power_limit: float | None = _f(
        "enforced.power.limit", "W", "Power limit (W)", aliases=("power.limit",)
    )
    utilization_gpu: float | None = _f("utilization.gpu", "%", "GPU utilisation (%)")
    utilization_memory: float | None = _f("utilization.memory", "%", "Memory utilisation (%)")
    memory_used: float | None = _f("memory.used", "MiB", "Memory used (MiB)")
    memory_total: float | None = _f("memory.total", "MiB", "Memory total (MiB)")
    clock_sm: float | None = _f(
        "clocks.current.sm", "MHz", "SM clock (MHz)", aliases=("clocks.sm",)
    )
    clock_memory: float | None = _f(
        "clocks.current.memory", "MHz", "Memory clock (MHz)", aliases=("clocks.mem",)
    )
    clocks_event_reasons: int | None = _f(
        "clocks_event_reasons.active", "", "Clock-event reasons", "mask",
        ("clocks_throttle_reasons.active",),
    )
    fan_speed: float | None = _f("fan.speed", "%", "Fan (%)")
    pcie_replay: float | None = _f("pcie.replay_counter", "", "PCIe replays")
    ecc_corrected_volatile: float | None = _f(
        "ecc.errors.corrected.volatile.total", "", "ECC corrected (volatile)"
    )
    ecc_uncorrected_volatile: float | None = _f(
        "ecc.errors.uncorrected.volatile.total", "", "ECC uncorrected (volatile)"
    )
    ecc_corrected_aggregate: float | None = _f(
        "ecc.errors.corrected.aggregate.total", "", "ECC corrected (aggregate)"
    )
    ecc_uncorrected_aggregate: float | None = _f(
        "ecc.errors.uncorrected.aggregate.total", "", "ECC uncorrected (aggregate)"
    )
    retired_sbe: float | None = _f(
        "retired_pages.single_bit_ecc.count", "", "Retired pages (single-bit)",
        aliases=("retired_pages.sbe",),
    )
    retired_dbe: float | None = _f(
        "retired_pages.double_bit.count", "", "Retired pages (double-bit)",
        aliases=("retired_pages.dbe", "retired_pages.double_bit_ecc.count"),
    )
    retired_pending: bool | None = _f("retired_pages.pending", "", "Retirement pending", "bool")
    remapped_correctable: float | None = _f(
        "remapped_rows.correctable", "", "Remapped rows (correctable)"
    )
    remapped_uncorrectable: float | None = _f(
        "remapped_rows.uncorrectable", "", "Remapped rows (uncorrectable)"
    )
    remapped_pending: bool | None = _f("remapped_rows.pending", "", "Remap pending", "bool")
    remapped_failure: bool | None = _f("remapped_rows.failure", "", "Remap failure", "bool")
    # NVML's violation time (nvmlDeviceGetViolationStatus) since the driver loaded, in µs; a
    # log replays it from nvidia-smi's counter of the same clock-event reason.
    power_violation: float | None = _f(
        "clocks_event_reasons_counters.sw_power_cap", "us", "Power-capped time (µs)"
    )
    thermal_violation: float | None = _f(
        "clocks_event_reasons_counters.sw_thermal_slowdown", "us", "Thermal slowdown time (µs)"
    )
    # NVML's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (driver 570+): 0 none, 1 GPU reset, 2 node
    # reboot, 3 drain P2P, 4 drain and reset. nvidia-smi has no CSV column for it; the name is
    # this tool's own recordings' column.
    recovery_action: float | None = _f("recovery_action", "", "Recovery action")
    # NVML's nvmlDeviceGetSramEccErrorStatus (Hopper and later): uncorrected SRAM ECC errors
    # since the driver was installed, by the unit they hit, and whether their count passed the
    # threshold at which the GPU should be taken out of service. Not nvidia-smi columns.
    sram_uncorrected_l2: float | None = _f(
        "sram_ecc.uncorrected.l2", "", "SRAM ECC uncorrected (L2)", ring=False)
    sram_uncorrected_sm: float | None = _f(
        "sram_ecc.uncorrected.sm", "", "SRAM ECC uncorrected (SM)", ring=False)
    sram_uncorrected_pcie: float | None = _f(
        "sram_ecc.uncorrected.pcie", "", "SRAM ECC uncorrected (PCIe)", ring=False)
    sram_uncorrected_mcu: float | None = _f(
        "sram_ecc.uncorrected.mcu", "", "SRAM ECC uncorrected (MCU)", ring=False)
    sram_uncorrected_other: float | None = _f(
        "sram_ecc.uncorrected.other", "", "SRAM ECC uncorrected (other)", ring=False)
    sram_threshold_exceeded: bool | None = _f(
        "sram_ecc.threshold_exceeded", "", "SRAM ECC threshold exceeded", "bool", ring=False)
    # NVML's nvmlDeviceGetRowRemapperHistogram: how many memory banks have all, most, some,
    # few or none of their spare rows left; a bank with none left cannot remap another row.
    remap_banks_max: float | None = _f(
        "remapped_rows.banks.max", "", "Banks: all spare rows left", ring=False)
    remap_banks_high: float | None = _f(
        "remapped_rows.banks.high", "", "Banks: most spare rows left", ring=False)
    remap_banks_partial: float | None = _f(
        "remapped_rows.banks.partial", "", "Banks: some spare rows left", ring=False)
    remap_banks_low: float | None = _f(
        "remapped_rows.banks.low", "", "Banks: few spare rows left", ring=False)
    remap_banks_none: float | None = _f(
        "remapped_rows.banks.none", "", "Banks: no spare row left", ring=False)

    def reasons(self) -> list[str]:
        """The clock-event (throttle) reasons in words; empty when none or n/a."""
        return decode_clock_reasons(self.clocks_event_reasons)


RECOVERY_ACTIONS: dict[int, str] = {
    0: "none", 1: "reset the GPU", 2: "reboot the node", 3: "drain peer-to-peer traffic",
    4: "drain the GPU and reset it", 5: "recover the IMEX domain", 6: "reset the PCIe bus",
    7: "reboot the system",
}
"""NVML's nvmlGpuRecoveryAction_t values (NVML_GPU_RECOVERY_ACTION_*) in words."""

SRAM_UNITS = ("l2", "sm", "pcie", "mcu", "other")
"""The units NVML splits uncorrected SRAM ECC errors into (`sram_uncorrected_<unit>`)."""


def recovery_words(action: float | None) -> str | None:
    """What the driver's recovery action asks for, in words; None when n/a or none."""
    if action is None or int(action) == 0:
        return None
    return RECOVERY_ACTIONS.get(int(action), f"recovery action {int(action)}")


@dataclass(frozen=True)
class Field:
    """Metadata of one measurement: attribute name, nvidia-smi column, unit, chart label."""

    name: str
    smi: str
    unit: str
    label: str
    kind: str
    aliases: tuple[str, ...]
    ring: bool = True


FIELDS: tuple[Field, ...] = tuple(
    Field(f.name, **f.metadata) for f in dataclasses.fields(GpuSample) if f.metadata
)
RING_FIELDS = tuple(f for f in FIELDS if f.ring)
"""Stored every sample: 24 h of 8 GPUs at 1 Hz stays under 80 MiB."""
SPARSE_FIELDS = tuple(f for f in FIELDS if not f.ring)
"""Health counters that change a few times a year: stored when they change."""
FIELD_INDEX: dict[str, tuple[bool, int]] = {
    **{f.name: (True, i) for i, f in enumerate(RING_FIELDS)},
    **{f.name: (False, i) for i, f in enumerate(SPARSE_FIELDS)},
}
"""Where a field is kept: (in the ring, its column there or in the change rows)."""

# Bit values are NVML's nvmlClocksEventReason* constants (checked against pynvml in the tests).
CLOCK_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "applications clocks setting"),
    (0x004, "software power cap"),
    (0x008, "hardware slowdown"),
    (0x010, "sync boost"),
    (0x020, "software thermal slowdown"),
    (0x040, "hardware thermal slowdown"),
    (0x080, "hardware power brake"),
    (0x100, "display clock setting"),
)

# The XIDs a user most often meets, from NVIDIA's XID catalogue; others show their number only.
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def decode_clock_reasons(mask: int | None) -> list[str]:
    """Words for the set bits of a clock-event reason mask; unknown bits as hex."""
    if not mask:
        return []
    words = [word for bit, word in CLOCK_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_REASONS:
        known |= bit
    if mask & ~known:
        words.append(f"other (0x{mask & ~known:x})")
    return words


@dataclass(frozen=True)
class XidEvent:
    """An XID critical error reported by the driver for one GPU."""

    timestamp: float
    gpu: int
    xid: int

    def describe(self) -> str:
        """One line: the XID number and, where known, what it means."""
        meaning = XID_MEANINGS.get(self.xid)
        return f"XID {self.xid}" + (f" ({meaning})" if meaning else "")


@dataclass(frozen=True)
class Alert:
    """Something a user must see: a banner and a line in the event log."""

    timestamp: float
    gpu: int | None
    kind: str
    severity: str
    """An `AlertSeverity`; its word and colour are `core.badges.alert_look`'s."""
    message: str


class GpuRing:
    """Fixed-size ring of (time, field values) for one GPU; float32 values, NaN = n/a. The
    sparse fields' rows are kept only when they change (`changes`), and read back as the row
    in force at each sample's time."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.times = np.empty(capacity, dtype=np.float64)
        self.values = np.empty((capacity, len(RING_FIELDS)), dtype=np.float32)
        self.changes: deque[tuple[float, np.ndarray]] = deque(maxlen=capacity)
        self._next = 0
        self.count = 0

    def append(self, timestamp: float, row: np.ndarray, sparse: np.ndarray) -> None:
        """Store one row, overwriting the oldest once full; the sparse row when it changed."""
        self.times[self._next] = timestamp
        self.values[self._next] = row
        self._next = (self._next + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)
        if not self.changes or not np.array_equal(self.changes[-1][1], sparse, equal_nan=True):
            self.changes.append((timestamp, sparse))

    def _order(self) -> np.ndarray | slice:
        if self.count < self.capacity:
            return slice(0, self.count)
        return np.r_[self._next : self.capacity, 0 : self._next]

    def series(self, column: int, in_ring: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Chronological copies of the times and one field's values."""
        order = self._order()
        times = self.times[order].copy()
        if in_ring:
            return times, self.values[order, column].copy()
        at = np.array([t for t, _row in self.changes])
        column_values = np.array([row[column] for _t, row in self.changes], dtype=np.float32)
        which = np.searchsorted(at, times, side="right") - 1
        values = np.where(which >= 0, column_values[np.maximum(which, 0)], np.nan)
        return times, values.astype(np.float32)


def _row(fields: tuple[Field, ...]) -> Callable[[GpuSample], np.ndarray]:
    getter = operator.attrgetter(*(f.name for f in fields))

    def row(sample: GpuSample) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in getter(sample)], dtype=np.float32)

    return row


sample_row = _row(RING_FIELDS)
"""A sample's ring measurements as one float32 row, NaN where n/a."""
sparse_row = _row(SPARSE_FIELDS)
"""A sample's health counters as one float32 row, NaN where n/a."""


class TelemetryStore:
    """Thread-safe history of samples per GPU, XID events and alerts; what charts read."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_events: int = 10_000) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._rings: dict[int, GpuRing] = {}
        self._latest: dict[int, GpuSample] = {}
        self.xids: deque[XidEvent] = deque(maxlen=max_events)
        self.alerts: deque[Alert] = deque(maxlen=max_events)
        self.version = 0

    def add(self, sample: GpuSample) -> GpuSample | None:
        """Store a sample; returns the previous sample of that GPU (for alert rules)."""
        row, sparse = sample_row(sample), sparse_row(sample)
        with self._lock:
            ring = self._rings.get(sample.index)
            if ring is None:
                ring = self._rings[sample.index] = GpuRing(self.capacity)
            ring.append(sample.timestamp, row, sparse)
            previous = self._latest.get(sample.index)
            self._latest[sample.index] = sample
            self.version += 1
        return previous

    def add_xid(self, event: XidEvent) -> None:
        """Record an XID event."""
        with self._lock:
            self.xids.append(event)
            self.version += 1

    def add_alert(self, alert: Alert) -> None:
        """Record an alert."""
        with self._lock:
            self.alerts.append(alert)
            self.version += 1

    def gpus(self) -> list[int]:
        """GPU indices seen so far, sorted."""
        with self._lock:
            return sorted(self._rings)

    def latest(self, gpu: int) -> GpuSample | None:
        """The most recent sample of one GPU."""
        with self._lock:
            return self._latest.get(gpu)

    def count(self, gpu: int) -> int:
        """How many samples of one GPU the ring holds."""
        with self._lock:
            ring = self._rings.get(gpu)
            return ring.count if ring else 0

    def series(self, gpu: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of one field of one GPU, oldest first; NaN where n/a."""
        with self._lock:
            ring = self._rings.get(gpu)
            if ring is None:
                return np.empty(0), np.empty(0, dtype=np.float32)
            in_ring, column = FIELD_INDEX[name]
            return ring.series(column, in_ring)

    def nbytes(self) -> int:
        """Memory held by the sample rings."""
        with self._lock:
            return sum(r.times.nbytes + r.values.nbytes
                       + sum(row.nbytes + 8 for _t, row in r.changes)
                       for r in self._rings.values())


class SourceLost(Exception):
    """The telemetry source stopped answering (driver unloaded, library gone)."""


class TelemetrySource(Protocol):
    """What the sampler reads: NVML, or a stand-in in tests."""

    def sample(self) -> list[GpuSample]:
        """One sample per GPU now; raises SourceLost when the driver is gone."""
        ...

    def watch_xids(self, on_event: Callable[[XidEvent], None], stop: threading.Event) -> None:
        """Block, calling on_event for each XID, until stop is set or the source is lost."""
        ...

    def close(self) -> None:
        """Release the source."""
        ...


def peak_decimate(
    times: np.ndarray, values: np.ndarray, start: float, end: float, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """Clip a series to [start, end] (plus one neighbour each side) and, if it still has more
    than `max_points`, keep each bucket's minimum and maximum so spikes survive decimation."""
    if times.size and np.all(times[1:] >= times[:-1]):
        first, last = np.searchsorted(times, (start, end))
        times = times[max(first - 1, 0):last + 1]
        values = values[max(first - 1, 0):last + 1]
    buckets = max(1, max_points // 2)
    if times.size <= max_points:
        return times, values
    size = -(-times.size // buckets)
    pad = buckets * size - times.size
    t = np.concatenate([times, np.full(pad, times[-1])]).reshape(buckets, size)
    v = np.concatenate([values, np.full(pad, np.nan, values.dtype)]).reshape(buckets, size)
    with np.errstate(invalid="ignore"):
        low, high = np.fmin.reduce(v, axis=1), np.fmax.reduce(v, axis=1)
    out_t = np.empty(2 * buckets)
    out_t[0::2] = t[:, 0]
    out_t[1::2] = (t[:, 0] + t[:, -1]) / 2
    out_v = np.empty(2 * buckets, dtype=values.dtype)
    out_v[0::2], out_v[1::2] = low, high
    return out_t, out_v
