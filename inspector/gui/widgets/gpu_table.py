"""The GPU pane's current-values table: one row per GPU, its reading in words."""

from __future__ import annotations

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem

from inspector.gpu.telemetry import GpuSample, decode_clock_reasons
from inspector.gui.widgets.gpu_pens import gpu_colour

COLUMNS = ("GPU", "Temp", "Power", "Util", "Memory", "SM clock", "Clock events", "ECC unc.",
           "Retire/remap")


def _num(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f} {unit}".rstrip()


def sample_cells(gpu: int, s: GpuSample) -> tuple[str, ...]:
    """One GPU's reading as the table's cells, in COLUMNS order."""
    state = []
    if s.retired_pending:
        state.append("retirement pending")
    if s.remapped_pending:
        state.append("remap pending")
    if s.remapped_failure:
        state.append("REMAP FAILED")
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
                     palette: QPalette) -> None:
        """One row per (GPU, its reading or None while it has none), the GPU in its colour."""
        self.setRowCount(len(samples))
        for row, (gpu, sample) in enumerate(samples):
            if sample is None:
                self.setItem(row, 0, QTableWidgetItem(f"GPU{gpu} (no sample yet)"))
                continue
            for col, text in enumerate(sample_cells(gpu, sample)):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setForeground(gpu_colour(gpu, palette))
                self.setItem(row, col, item)
