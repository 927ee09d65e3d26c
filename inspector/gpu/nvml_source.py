"""Live telemetry from NVML through nvidia-ml-py (`import pynvml`).

Every field is read on its own: a device that cannot report it (NotSupported, no permission)
gives None (n/a) for that field only. A driver that vanishes mid-run raises SourceLost; a GPU
that falls off the bus is reported as lost while the other GPUs keep being sampled.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from inspector.gpu.telemetry import SRAM_UNITS, GpuSample, SourceLost, XidEvent

MIB = 1024 * 1024
XID_WAIT_MS = 500


class NvmlUnavailable(Exception):
    """No usable NVML: library or driver missing, or no NVIDIA GPU; str() is one line."""


class _GpuLost(Exception):
    """One GPU stopped answering while the driver still does."""


def _load_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"no NVIDIA driver found: nvidia-ml-py is missing ({exc})") from None
    return pynvml


class NvmlSource:
    """Samples every NVIDIA GPU through NVML; use NvmlSource.open()."""

    def __init__(self, nv: ModuleType, handles: list[Any]) -> None:
        self._nv = nv
        self._handles = handles
        self._driver_gone = {
            nv.NVML_ERROR_UNINITIALIZED,
            nv.NVML_ERROR_DRIVER_NOT_LOADED,
            nv.NVML_ERROR_LIBRARY_NOT_FOUND,
            nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        }
        self._gpu_gone = {nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_RESET_REQUIRED}
        self.names = [self._static(nv.nvmlDeviceGetName, h) for h in handles]
        self.uuids = [self._static(nv.nvmlDeviceGetUUID, h) for h in handles]
        self.driver_version = self._static(nv.nvmlSystemGetDriverVersion)
        self.xid_unsupported: list[int] = []
        # Why a getter gave n/a (NVML's own words, by getter name): a field table can then say
        # "not supported" or "no permission" instead of a bare n/a.
        self.unavailable: dict[str, str] = {}
        self._reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    @classmethod
    def open(cls) -> NvmlSource:
        """Initialise NVML and enumerate GPUs; raises NvmlUnavailable with a one-line reason."""
        nv = _load_pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {exc})") from None
        try:
            count = nv.nvmlDeviceGetCount()
            handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nv.NVMLError as exc:
            _shutdown(nv)
            raise NvmlUnavailable(f"NVML could not list GPUs ({exc})") from None
        if not handles:
            _shutdown(nv)
            raise NvmlUnavailable("no NVIDIA GPU found (the driver reports 0 devices)")
        return cls(nv, handles)

    def close(self) -> None:
        """Shut NVML down; safe to call after the driver vanished."""
        _shutdown(self._nv)

    def _static(self, fn: Callable[..., Any], *args: Any) -> str | None:
        try:
            value = fn(*args)
        except self._nv.NVMLError:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def _read(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """Call one NVML getter: its value, or None where the device cannot report it."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._driver_gone:
                raise SourceLost(f"the NVIDIA driver stopped answering (NVML: {exc})") from None
            if code in self._gpu_gone:
                raise _GpuLost() from None
            self.unavailable[getattr(fn, "__name__", str(fn))] = str(exc)
            return None

    def sample(self) -> list[GpuSample]:
        """One sample per GPU now; raises SourceLost when the driver is gone."""
        now = time.time()
        samples = []
        for index, handle in enumerate(self._handles):
            try:
                samples.append(self._sample_gpu(index, handle, now))
            except _GpuLost:
                name, uuid = self.names[index], self.uuids[index]
                samples.append(GpuSample(now, index, name, uuid, lost=True))
        return samples

    def _sample_gpu(self, index: int, handle: Any, now: float) -> GpuSample:
        nv, read = self._nv, self._read
        s = GpuSample(now, index, self.names[index], self.uuids[index])
        s.temperature_gpu = read(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
        s.temperature_memory = self._field_value(handle, nv.NVML_FI_DEV_MEMORY_TEMP)
        s.power_draw = _scaled(read(nv.nvmlDeviceGetPowerUsage, handle), 1000)
        s.power_limit = _scaled(read(nv.nvmlDeviceGetEnforcedPowerLimit, handle), 1000)
        util = read(nv.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            s.utilization_gpu, s.utilization_memory = util.gpu, util.memory
        mem = read(nv.nvmlDeviceGetMemoryInfo, handle)
        if mem is not None:
            s.memory_used, s.memory_total = mem.used / MIB, mem.total / MIB
        s.clock_sm = read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        s.clock_memory = read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM)
        s.clocks_event_reasons = read(self._reasons_fn, handle)
        s.fan_speed = read(nv.nvmlDeviceGetFanSpeed, handle)
        s.pcie_replay = read(nv.nvmlDeviceGetPcieReplayCounter, handle)
        ecc = nv.nvmlDeviceGetTotalEccErrors
        corrected, uncorrected = (
            nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        )
        s.ecc_corrected_volatile = read(ecc, handle, corrected, nv.NVML_VOLATILE_ECC)
        s.ecc_uncorrected_volatile = read(ecc, handle, uncorrected, nv.NVML_VOLATILE_ECC)
        s.ecc_corrected_aggregate = read(ecc, handle, corrected, nv.NVML_AGGREGATE_ECC)
        s.ecc_uncorrected_aggregate = read(ecc, handle, uncorrected, nv.NVML_AGGREGATE_ECC)
        pages = nv.nvmlDeviceGetRetiredPages
        single, double = (
            nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        )
        s.retired_sbe = _length(read(pages, handle, single))
        s.retired_dbe = _length(read(pages, handle, double))
        pending = read(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        s.retired_pending = None if pending is None else pending == nv.NVML_FEATURE_ENABLED
        rows = read(nv.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            corr, unc, rows_pending, failure = rows
            s.remapped_correctable, s.remapped_uncorrectable = corr, unc
            s.remapped_pending, s.remapped_failure = bool(rows_pending), bool(failure)
        violation = nv.nvmlDeviceGetViolationStatus
        s.power_violation = _violation_us(read(violation, handle, nv.NVML_PERF_POLICY_POWER))
        s.thermal_violation = _violation_us(read(violation, handle, nv.NVML_PERF_POLICY_THERMAL))
        recovery = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if recovery is not None:
            s.recovery_action = self._field_value(handle, recovery)
        self._read_sram(handle, s)
        banks = read(getattr(nv, "nvmlDeviceGetRowRemapperHistogram", None), handle)
        if banks is not None:
            s.remap_banks_max, s.remap_banks_high = banks.max, banks.high
            s.remap_banks_partial, s.remap_banks_low = banks.partial, banks.low
            s.remap_banks_none = banks.none
        return s

    def _read_sram(self, handle: Any, s: GpuSample) -> None:
        """Uncorrected SRAM ECC errors by unit and the threshold flag; n/a (with NVML's reason
        in `unavailable`) on a GPU or driver without the call."""
        nv = self._nv
        fn = getattr(nv, "nvmlDeviceGetSramEccErrorStatus", None)
        struct = getattr(nv, "c_nvmlEccSramErrorStatus_v1_t", None)
        if fn is None or struct is None:
            self.unavailable["nvmlDeviceGetSramEccErrorStatus"] = "not in this nvidia-ml-py"
            return
        status = struct()
        status.version = nv.nvmlEccSramErrorStatus_v1
        if self._read(fn, handle, ctypes.byref(status)) is None:
            return
        for unit in SRAM_UNITS:
            setattr(s, f"sram_uncorrected_{unit}",
                    float(getattr(status, f"aggregateUncBucket{unit.capitalize()}")))
        s.sram_threshold_exceeded = bool(status.bThresholdExceeded)

    def _field_value(self, handle: Any, field_id: int) -> float | None:
        """A reading NVML exposes only as a field value (HBM/GDDR temperature, the recovery
        action); None where the device does not report it."""
        nv = self._nv
        values = self._read(nv.nvmlDeviceGetFieldValues, handle, [field_id])
        if not values or values[0].nvmlReturn != nv.NVML_SUCCESS:
            if values:
                self.unavailable["NVML_FI_DEV_MEMORY_TEMP"] = _error_text(nv, values[0].nvmlReturn)
            return None
        v = values[0]
        member = {
            nv.NVML_VALUE_TYPE_DOUBLE: "dVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
            nv.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        }.get(v.valueType)
        return None if member is None else float(getattr(v.value, member))

    def watch_xids(self, on_event: Callable[[XidEvent], None], stop: threading.Event) -> None:
        """Wait on an NVML event set for XID errors until `stop` is set or the driver is lost."""
        nv = self._nv
        try:
            event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            self._raise_if_driver_gone(exc)
            self.xid_unsupported = list(range(len(self._handles)))
            return
        try:
            for index, handle in enumerate(self._handles):
                try:
                    nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
                except nv.NVMLError as exc:
                    self._raise_if_driver_gone(exc)
                    self.xid_unsupported.append(index)
            if len(self.xid_unsupported) == len(self._handles):
                return
            while not stop.is_set():
                try:
                    data = nv.nvmlEventSetWait(event_set, XID_WAIT_MS)
                except nv.NVMLError as exc:
                    self._raise_if_driver_gone(exc)
                    if getattr(exc, "value", None) != nv.NVML_ERROR_TIMEOUT:
                        stop.wait(XID_WAIT_MS / 1000)  # an odd error must not spin the CPU
                    continue
                if data.eventType & nv.nvmlEventTypeXidCriticalError:
                    gpu = self._index_of(data.device)
                    on_event(XidEvent(time.time(), gpu, int(data.eventData)))
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(event_set)

    def _raise_if_driver_gone(self, exc: Exception) -> None:
        if getattr(exc, "value", None) in self._driver_gone:
            raise SourceLost(f"the NVIDIA driver stopped answering (NVML: {exc})") from None

    def _index_of(self, device: Any) -> int:
        try:
            return int(self._nv.nvmlDeviceGetIndex(device))
        except self._nv.NVMLError:
            return -1


def _error_text(nv: ModuleType, code: int) -> str:
    """NVML's own words for a return code, as its exceptions print them."""
    try:
        return str(nv.NVMLError(code))
    except Exception:  # an unknown code: the number is all there is
        return f"NVML error {code}"


def _scaled(value: float | None, divisor: float) -> float | None:
    return None if value is None else value / divisor


def _violation_us(status: Any) -> float | None:
    """NVML counts violation time in ns; the field is in µs, as nvidia-smi's counters are."""
    return None if status is None else status.violationTime / 1000


def _length(pages: list[Any] | None) -> int | None:
    return None if pages is None else len(pages)


def _shutdown(nv: ModuleType) -> None:
    with contextlib.suppress(nv.NVMLError):
        nv.nvmlShutdown()
