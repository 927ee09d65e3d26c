"""The Tensors pane with 100,000 streamed rows: appends, sorting, filtering and painting."""

from __future__ import annotations

import math
import time

from PySide6.QtCore import Qt

from inspector.gui.document import FileDocument
from inspector.gui.tensor_models import COLUMNS
from inspector.gui.tensors_pane import TensorsPane

ROWS = 100_000
BATCH = 2_000


def fake_row(i: int) -> dict:
    bad = i % 9973 == 0
    return {"key": f"model.layers.{i // 100}.block{i % 100}.weight", "dtype": "float32",
            "shape": [64, i % 7 + 1], "numel": 64 * (i % 7 + 1), "nbytes": 256 * (i % 7 + 1),
            "min": -float(i % 13), "max": float(i % 17), "mean": (i % 101) / 100,
            "std": math.nan if bad else (i * 7919 % 1000) / 1000, "nan": int(bad), "inf": 0,
            "zeros": i % 3, "digest": f"{i:064x}"}


def column(field: str) -> int:
    return next(i for i, c in enumerate(COLUMNS) if c.field == field)


def test_hundred_thousand_rows_stream_sort_filter_and_paint_quickly(qtbot, tmp_path):
    pane = TensorsPane()
    qtbot.addWidget(pane)
    pane.resize(1200, 700)
    pane.show()
    doc = FileDocument(tmp_path / "big.pt")
    pane.set_document(doc)
    worst_append = 0.0
    for start in range(0, ROWS, BATCH):
        events = [{"type": "tensor", **fake_row(i)} for i in range(start, start + BATCH)]
        t0 = time.perf_counter()
        doc.apply_events(events)
        worst_append = max(worst_append, time.perf_counter() - t0)
    qtbot.waitUntil(lambda: pane.model.rowCount() == ROWS, timeout=10_000)
    assert "100,000 tensors" in pane.summary_label.text()
    assert "11 with NaN/Inf" in pane.summary_label.text()

    t0 = time.perf_counter()
    pane.table.sortByColumn(column("std"), Qt.SortOrder.DescendingOrder)
    sort_s = time.perf_counter() - t0
    assert math.isnan(pane.model.row_at(0)["std"])  # NaN sorts above every number
    stds = [r["std"] for r in pane.model.visible_rows()[11:]]
    assert stds == sorted(stds, reverse=True)

    pane.filter.setText("layers.99*.block5.weight")  # applied once typing pauses
    assert pane.model.rowCount() == ROWS
    t0 = time.perf_counter()
    pane._filter_timer.timeout.emit()
    filter_s = time.perf_counter() - t0
    keys = [r["key"] for r in pane.model.visible_rows()]
    assert len(keys) == 11  # layers 99 and 990-999
    assert all(k.startswith("model.layers.99") and k.endswith(".block5.weight") for k in keys)
    pane.filter.setText("")
    qtbot.waitUntil(lambda: pane.model.rowCount() == ROWS, timeout=5_000)

    pane.table.scrollToBottom()
    t0 = time.perf_counter()
    pane.table.viewport().repaint()
    paint_s = time.perf_counter() - t0
    print(f"\nworst 2,000-row append {worst_append * 1000:.0f} ms, sort {sort_s * 1000:.0f} ms,"
          f" filter {filter_s * 1000:.0f} ms, paint {paint_s * 1000:.0f} ms")
    # Regression bounds for a busy 2-core machine, about ten times the typical figures.
    assert worst_append < 0.5 and sort_s < 5 and filter_s < 3 and paint_s < 2
