"""A stand-in for the `pynvml` module: scripted GPUs, NotSupported fields, a vanishing driver, XIDs.

It re-exports the real nvidia-ml-py constants and exception classes (the real module imports
fine without a driver), so the code under test sees exactly the errors NVML would raise.
Install it with `monkeypatch.setitem(sys.modules, "pynvml", fake)`.
"""

from __future__ import annotations

import queue
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    """One scripted GPU; edit its attributes between samples to change what NVML reports."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    temperature: int = 45
    memory_temperature: int = 52
    power_mw: int = 312_500
    power_limit_mw: int = 700_000
    util_gpu: int = 97
    util_memory: int = 61
    memory_used: int = 80_123 * MIB
    memory_total: int = 81_559 * MIB
    clock_sm: int = 1980
    clock_memory: int = 2619
    reasons: int = real.nvmlClocksEventReasonSwPowerCap
    fan: int = 40
    pcie_replay: int = 0
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    retired: dict[int, list[int]] = field(default_factory=dict)
    retired_pending: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    recovery_action: int = real.NVML_GPU_RECOVERY_ACTION_NONE
    sram_uncorrected: dict[str, int] = field(default_factory=dict)  # unit (L2, Sm...) -> count
    sram_threshold_exceeded: bool = False
    remap_banks: tuple[int, int, int, int, int] = (16, 0, 0, 0, 0)  # max, high, partial, low, none
    violation_ns: dict[int, int] = field(default_factory=dict)  # perf policy -> ns
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False


@dataclass
class _Handle:
    index: int


class FakeNvml(types.ModuleType):
    """Module-like object answering the NVML calls inspector.gpu.nvml_source makes."""

    def __init__(self, gpus: list[FakeGpu] | None = None, init_error: int | None = None) -> None:
        super().__init__("pynvml")
        for name in dir(real):
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocks")):
                setattr(self, name, getattr(real, name))
        # the SRAM status call fills the real ctypes struct the caller passes by reference
        self.c_nvmlEccSramErrorStatus_v1_t = real.c_nvmlEccSramErrorStatus_v1_t
        self.nvmlEccSramErrorStatus_v1 = real.nvmlEccSramErrorStatus_v1
        self.gpus = gpus if gpus is not None else [FakeGpu(0)]
        self.init_error = init_error
        self.driver_gone = False
        self.initialised = False
        self.xids: queue.Queue[tuple[int, int]] = queue.Queue()
        self.event_sets_open = 0
        self.calls = 0

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Make the next nvmlEventSetWait return this XID on this GPU."""
        self.xids.put((gpu, xid))

    def _fail(self, code: int) -> None:
        raise real.NVMLError(code)

    def _gpu(self, handle: _Handle, fn: str) -> FakeGpu:
        self.calls += 1
        if self.driver_gone:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            self._fail(real.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.unsupported:
            self._fail(real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            self._fail(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return self._gpu(h, "name").name

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return f"GPU-0000000{h.index}-fake-uuid"

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._gpu(h, "temperature").temperature

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list[int]) -> list[Any]:
        gpu = self._gpu(h, "field_values")
        attribute = {real.NVML_FI_DEV_MEMORY_TEMP: "memory_temperature",
                     real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: "recovery_action"}
        assert len(field_ids) == 1 and field_ids[0] in attribute
        name = attribute[field_ids[0]]
        value = real.c_nvmlFieldValue_t()
        value.fieldId = field_ids[0]
        value.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
        if name in gpu.unsupported:
            value.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        else:
            value.nvmlReturn = real.NVML_SUCCESS
            value.value.uiVal = getattr(gpu, name)
        return [value]

    def nvmlDeviceGetViolationStatus(self, h: _Handle, policy: int) -> Any:
        gpu = self._gpu(h, "violation")
        status = real.c_nvmlViolationTime_t()
        status.referenceTime, status.violationTime = 1, gpu.violation_ns.get(policy, 0)
        return status

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        return self._gpu(h, "power").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:
        return self._gpu(h, "power_limit").power_limit_mw

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> Any:
        gpu = self._gpu(h, "utilization")
        return types.SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> Any:
        gpu = self._gpu(h, "memory")
        free = gpu.memory_total - gpu.memory_used
        return types.SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used, free=free)

    def nvmlDeviceGetClockInfo(self, h: _Handle, kind: int) -> int:
        gpu = self._gpu(h, "clocks")
        return gpu.clock_sm if kind == real.NVML_CLOCK_SM else gpu.clock_memory

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        return self._gpu(h, "reasons").reasons

    def nvmlDeviceGetFanSpeed(self, h: _Handle) -> int:
        return self._gpu(h, "fan").fan

    def nvmlDeviceGetPcieReplayCounter(self, h: _Handle) -> int:
        return self._gpu(h, "pcie").pcie_replay

    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter: int) -> int:
        return self._gpu(h, "ecc").ecc.get((error_type, counter), 0)

    def nvmlDeviceGetRetiredPages(self, h: _Handle, cause: int) -> list[int]:
        return list(self._gpu(h, "retired").retired.get(cause, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> int:
        return self._gpu(h, "retired").retired_pending

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        return self._gpu(h, "remapped").remapped

    def nvmlDeviceGetSramEccErrorStatus(self, h: _Handle, status_ref: Any) -> int:
        gpu = self._gpu(h, "sram")
        status = status_ref._obj  # ctypes.byref(struct), as the real binding passes it on
        assert status.version == real.nvmlEccSramErrorStatus_v1
        for unit, count in gpu.sram_uncorrected.items():
            setattr(status, f"aggregateUncBucket{unit}", count)
        status.bThresholdExceeded = int(gpu.sram_threshold_exceeded)
        return real.NVML_SUCCESS

    def nvmlDeviceGetRowRemapperHistogram(self, h: _Handle) -> Any:
        banks = self._gpu(h, "histogram").remap_banks
        values = real.c_nvmlRowRemapperHistogramValues()
        values.max, values.high, values.partial, values.low, values.none = banks
        return values

    def nvmlEventSetCreate(self) -> object:
        if self.driver_gone:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        self.event_sets_open += 1
        return object()

    def nvmlDeviceRegisterEvents(self, h: _Handle, types_mask: int, event_set: object) -> None:
        assert types_mask & real.nvmlEventTypeXidCriticalError
        self._gpu(h, "events")

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> Any:
        if self.driver_gone:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        try:
            gpu, xid = self.xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            self._fail(real.NVML_ERROR_TIMEOUT)
        return types.SimpleNamespace(
            device=_Handle(gpu), eventType=real.nvmlEventTypeXidCriticalError, eventData=xid
        )

    def nvmlEventSetFree(self, event_set: object) -> None:
        self.event_sets_open -= 1


def install(monkeypatch: Any, fake: FakeNvml) -> FakeNvml:
    """Make `import pynvml` return the stand-in for the rest of the test."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake
