"""Replayed GPU logs and run journals for the Prometheus exporter, reader and rules tests."""

from __future__ import annotations

from pathlib import Path

from inspector.gpu.smi_csv import write_log
from inspector.gpu.telemetry import GpuSample


def gpu_samples(gpus: int = 2, ticks: int = 6, start: float = 1_790_000_000.0,
                dbe_from: int | None = 3, dbe_gpu: int = 1, xid_at: int | None = None,
                step: float = 1.0) -> list[GpuSample]:
    """`ticks` readings of `gpus` healthy GPUs, except that `dbe_gpu` counts two uncorrected
    ECC errors from tick `dbe_from` on and (optionally) reports XID 79 at tick `xid_at`."""
    out = []
    for t in range(ticks):
        for gpu in range(gpus):
            bad = dbe_from is not None and gpu == dbe_gpu and t >= dbe_from
            out.append(GpuSample(
                timestamp=start + t * step, index=gpu, name="NVIDIA H100 80GB HBM3",
                uuid=f"GPU-{gpu:08d}-aaaa-bbbb-cccc-000000000000",
                xids=(79,) if xid_at == t and gpu == dbe_gpu else (),
                temperature_gpu=40.0 + gpu + t, temperature_memory=50.0, power_draw=300.5,
                power_limit=700.0, utilization_gpu=90.0, utilization_memory=60.0,
                memory_used=1000.0, memory_total=81559.0, clock_sm=1980.0, clock_memory=2619.0,
                clocks_event_reasons=0x40 if gpu == 0 else 0x4, fan_speed=None,
                pcie_replay=0.0, ecc_corrected_volatile=5.0,
                ecc_uncorrected_volatile=2.0 if bad else 0.0, ecc_corrected_aggregate=5.0,
                ecc_uncorrected_aggregate=2.0 if bad else 0.0, retired_sbe=0.0,
                retired_dbe=0.0, retired_pending=False, remapped_correctable=0.0,
                remapped_uncorrectable=0.0, remapped_pending=False, remapped_failure=False,
            ))
    return out


def write_replay(path: Path, **kwargs) -> Path:
    """gpu_samples(**kwargs) recorded as this tool's nvidia-smi-column CSV."""
    write_log(path, gpu_samples(**kwargs))
    return path
