"""The GPU pane's current-values table: one row per GPU, its reading in words."""

from __future__ import annotations

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem

from inspector.core.termtext import counted
from inspector.gpu.telemetry import SRAM_UNITS, GpuSample, decode_clock_reasons, recovery_words
from inspector.gui.widgets.gpu_pens import gpu_colour

COLUMNS = ("GPU", "Temp", "Power", "Util", "Memory", "SM clock", "Clock events", "ECC unc.",
           "Health")
BANKS = (("max", "all"), ("high", "most"), ("partial", "some"), ("low", "few"), ("none", "none"))
"""The remapper histogram's buckets and how many spare rows a bank in each has left."""
HEALTH_CALLS = {"sram": "nvmlDeviceGetSramEccErrorStatus",
                "banks": "nvmlDeviceGetRowRemapperHistogram"}


def _num(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f} {unit}".rstrip()


def sample_cells(gpu: int, s: GpuSample) -> tuple[str, ...]:
    """One GPU's reading as the table's cells, in COLUMNS order."""
    state = []
    # NVML's own summaries (retirement, remap) can read clean while the ECC counter holds
    # uncorrected errors since the last reset: the counter is the check, so it rules here too
    if s.ecc_uncorrected_volatile:
        state.append(f"{s.ecc_uncorrected_volatile:.0f} ECC unc.")
    if s.retired_pending:
        state.append("retirement pending")
    if s.remapped_pending:
        state.append("remap pending")
    if s.remapped_failure:
        state.append("REMAP FAILED")
    if wanted := recovery_words(s.recovery_action):
        state.append(f"driver asks: {wanted}")
    if s.sram_threshold_exceeded:
        state.append("SRAM ECC THRESHOLD")
    sram = sum(getattr(s, f"sram_uncorrected_{u}") or 0 for u in SRAM_UNITS)
    if sram:
        state.append(f"{sram:.0f} SRAM unc.")
    if s.remap_banks_none:
        state.append(f"{counted(round(s.remap_banks_none), 'bank')} without spare rows")
    reasons = decode_clock_reasons(s.clocks_event_reasons)
    return (
        f"GPU{gpu} {(s.name or '').removeprefix('NVIDIA ')}".strip()
        + (" (LOST)" if s.lost else ""),
        _num(s.temperature_gpu, "°C"),
        f"{_num(s.power_draw, '')} / {_num(s.power_limit, 'W')}",
        _num(s.utilization_gpu, "%"),
        f"{_num(s.memory_used, '')} / {_num(s.memory_total, 'MiB')}",
        _num(s.clock_sm, "MHz"),
        ", ".join(reasons) or ("n/a" if s.clocks_event_reasons is None else "none"),
        _num(s.ecc_uncorrected_volatile, ""),
        ", ".join(state) or "ok",
    )


def health_tip(s: GpuSample, unavailable: dict[str, str] | None = None) -> str:
    """Every NVML health reading of one GPU, one per line; n/a with NVML's reason where the
    live source recorded one (`NvmlSource.unavailable`)."""
    why = unavailable or {}

    def na(call: str) -> str:
        reason = why.get(HEALTH_CALLS[call])
        return f"n/a ({reason})" if reason else "n/a"

    sram = [(u, getattr(s, f"sram_uncorrected_{u}")) for u in SRAM_UNITS]
    banks = [(words, getattr(s, f"remap_banks_{name}")) for name, words in BANKS]
    lines = [
        "Recovery action: " + ("n/a" if s.recovery_action is None
                               else recovery_words(s.recovery_action) or "none"),
        "Uncorrected SRAM ECC: " + (", ".join(f"{u.upper()} {v:.0f}" for u, v in sram)
                                    if all(v is not None for _u, v in sram) else na("sram")),
        "SRAM ECC threshold exceeded: " + ("yes" if s.sram_threshold_exceeded else
                                           "no" if s.sram_threshold_exceeded is not None
                                           else na("sram")),
        "Banks by spare rows left: " + (", ".join(f"{w} {v:.0f}" for w, v in banks)
                                        if all(v is not None for _w, v in banks)
                                        else na("banks")),
        "Remapped rows: " + ("n/a" if s.remapped_correctable is None else
                             f"{s.remapped_correctable:.0f} correctable, "
                             f"{(s.remapped_uncorrectable or 0):.0f} uncorrectable"),
    ]
    return "\n".join(lines)


class GpuTable(QTableWidget):
    """Each GPU's reading (the latest, or the one in force at a replay's cursor) in a row."""

    def __init__(self) -> None:
        super().__init__(0, len(COLUMNS))
        self.setHorizontalHeaderLabels(COLUMNS)
        self.verticalHeader().hide()
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)

    def show_samples(self, samples: list[tuple[int, GpuSample | None]],
                     palette: QPalette, unavailable: dict[str, str] | None = None) -> None:
        """One row per (GPU, its reading or None while it has none), the GPU in its colour;
        the Health cell's tooltip lists every health reading (`health_tip`)."""
        self.setRowCount(len(samples))
        for row, (gpu, sample) in enumerate(samples):
            if sample is None:
                self.setItem(row, 0, QTableWidgetItem(f"GPU{gpu} (no sample yet)"))
                continue
            for col, text in enumerate(sample_cells(gpu, sample)):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setForeground(gpu_colour(gpu, palette))
                if col == len(COLUMNS) - 1:
                    item.setToolTip(health_tip(sample, unavailable))
                self.setItem(row, col, item)
