"""The loaders' readings run whatever folder the user's command runs from, and a reading
worker that dies says what killed it (from its exit status), is retried once, and is never a
guess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from inspector.scan.engine import SMALL_FILE


def test_scan_with_a_relative_path_from_the_files_folder(tmp_path: Path) -> None:
    """A file read in place by the jailed reader (larger than SMALL_FILE) named relative to
    the command's folder: the worker runs elsewhere, so the name must reach it absolute."""
    import torch

    torch.save({"w": torch.arange(SMALL_FILE // 4 + 4096, dtype=torch.float32)},
               tmp_path / "tiny.pth")
    assert (tmp_path / "tiny.pth").stat().st_size > SMALL_FILE
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", "tiny.pth"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    record = json.loads(out.stdout.splitlines()[0])
    codes = [f["code"] for f in record["findings"]]
    assert "readings-unavailable" not in codes, record["findings"]
    assert (record["verdict"], out.returncode) == ("safe", 0)
