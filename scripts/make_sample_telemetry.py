"""Write the shipped sample telemetry log (`inspector.gpu.sample_log`) into resources/.

Run from the repository root: `.venv/bin/python scripts/make_sample_telemetry.py`. Times are
written in UTC, so the file is the same wherever it is made."""

from __future__ import annotations

import os
import time
from pathlib import Path

from inspector.gpu import sample_log
from inspector.gpu.smi_csv import write_log

if __name__ == "__main__":
    os.environ["TZ"] = "UTC"
    time.tzset()
    out = Path(__file__).resolve().parent.parent / "resources" / sample_log.RESOURCE
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = write_log(out, sample_log.samples(), overwrite=True)
    print(f"wrote {rows} rows to {out}")
