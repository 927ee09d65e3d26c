"""The app's pipeline: a loaded file is scanned once, its jailed inspection admitted on the
scan the document already has."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from gui_support import wait_loaded

from inspector.scan import engine

pytest_plugins = ("gui_fixtures",)  # fixtures: window


def test_a_loaded_file_is_scanned_once(window, qtbot, tmp_path, monkeypatch):
    path = tmp_path / "small.pt"
    torch.save({"w": torch.ones(2, 2), "b": torch.zeros(2)}, path)
    scans: Counter[Path] = Counter()
    real = engine.scan_file

    def counted(p, *args, **kwargs):
        scans[Path(p).resolve()] += 1
        return real(p, *args, **kwargs)

    monkeypatch.setattr(engine, "scan_file", counted)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    assert doc.verdict == "safe" and len(doc.tensors) == 2
    assert scans == {path.resolve(): 1}
