"""Benchmark the desktop app: launch to first paint, and drop to a complete inspection.

Measured from the parent, with CLOCK_MONOTONIC shared by parent and child:

- **first paint**: from just before the child process is started to the main window's first
  paint event (the window is on screen and drawn), with the empty window and with a file
  given on the command line; the GUI process must not import torch (checked and printed);
- **complete inspection** of a generated 100 MB checkpoint: from the same launch to the moment
  the window holds every tensor's statistics, the file's SHA-256 and the sandbox level;
- **baselines** a user would otherwise run, measured in the same run: `python -c "import torch"`
  (what any script that opens a checkpoint pays first) and a plain script that does
  `torch.load(weights_only=True)` plus the same statistics and hashes, with no scan and no jail.

Target: first paint under 1 s. Run with QT_QPA_PLATFORM=offscreen on a machine without a display:

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_gui_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (importing it compiles the project's bytecode first)

PY = sys.executable

GUI_CHILD = r"""
import json, sys, time
from PySide6.QtCore import QEvent, QObject, QTimer
from inspector.gui.app import create_application
from inspector.gui.main_window import MainWindow

marks = {}

class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and "paint" not in marks:
            marks["paint"] = time.monotonic()
            QTimer.singleShot(0, after_paint)
        return False

app = create_application([])
window = MainWindow()
window.resize(1200, 780)
watch = FirstPaint()
window.installEventFilter(watch)
window.show()
docs = window.open_paths(sys.argv[1:]) if len(sys.argv) > 1 else []

def after_paint():
    if not docs:
        finish()
    else:
        poll()

def poll():
    doc = docs[0]
    if doc.state in ("loaded", "load_failed", "blocked", "error") and doc.sha256:
        marks["done"] = time.monotonic()
        marks["state"] = doc.state
        marks["tensors"] = len(doc.tensors)
        finish()
    else:
        QTimer.singleShot(5, poll)

def finish():
    marks["torch_imported"] = "torch" in sys.modules
    print(json.dumps(marks))
    window.close()
    app.quit()

app.exec()
"""

BASELINE = r"""
import hashlib, sys, torch
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True, mmap=True)
h = hashlib.sha256()
with open(sys.argv[1], "rb") as fh:
    for chunk in iter(lambda: fh.read(1 << 22), b""):
        h.update(chunk)
for key, t in sd.items():
    f = t.float()
    finite = f[torch.isfinite(f)]
    stats = (finite.min(), finite.max(), finite.mean(), finite.std(), torch.isnan(f).sum(),
             torch.isinf(f).sum(), (f == 0).sum(), torch.histc(finite, 64))
    hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
"""

MAKE = r"""
import sys, torch
g = torch.Generator().manual_seed(0)
n = int(sys.argv[2]) // 4 // 25
torch.save({f"layers.{i}.weight": torch.randn(n, generator=g) for i in range(25)}, sys.argv[1])
"""


def launch_gui(env: dict[str, str], *files: str) -> dict:
    """One app launch; marks are seconds since just before the process was started."""
    t0 = time.monotonic()
    done = subprocess.run([PY, "-c", GUI_CHILD, *files], capture_output=True, text=True,
                          env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"GUI child failed:\n{done.stderr[-2000:]}")
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("paint", "done"):
        if key in marks:
            marks[key] -= t0
    return marks


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one child command."""
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=600)
    return time.monotonic() - t0


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.0f} ms"


def main() -> int:
    """Run every measurement `--repeats` times and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size-mb", type=int, default=100)
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="bench-gui-") as tmp:
        env["XDG_CONFIG_HOME"] = env["XDG_CACHE_HOME"] = tmp
        ckpt = Path(tmp) / "model-100mb.pt"
        subprocess.run([PY, "-c", MAKE, str(ckpt), str(args.size_mb << 20)], check=True)
        size = ckpt.stat().st_size
        ckpt.read_bytes()  # warm the page cache so every contender reads from memory
        launch_gui(env)  # warm the interpreter's and Qt's files too
        empty, with_file, inspect, torch_import, plain = [], [], [], [], []
        torch_seen = False
        for _ in range(args.repeats):
            marks = launch_gui(env)
            empty.append(marks["paint"])
            marks = launch_gui(env, str(ckpt))
            assert marks["state"] == "loaded" and marks["tensors"] == 25, marks
            with_file.append(marks["paint"])
            inspect.append(marks["done"])
            torch_seen |= marks["torch_imported"]
            torch_import.append(timed([PY, "-c", "import torch"], env))
            plain.append(timed([PY, "-c", BASELINE, str(ckpt)], env))
    print(f"checkpoint: {size / 1e6:.0f} MB, 25 float32 tensors; {args.repeats} runs, medians;"
          f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"launch → first paint, empty window       {median_ms(empty)}   (target < 1000 ms)")
    print(f"launch → first paint, FILE given         {median_ms(with_file)}")
    print(f"python -c 'import torch' (baseline)       {median_ms(torch_import)}")
    print(f"  first paint / torch import              "
          f"{statistics.median(empty) / statistics.median(torch_import):8.2f}x")
    print(f"launch → complete inspection (GUI)       {median_ms(inspect)}"
          "   scan + SHA-256 + jailed load + stats + hashes")
    print(f"plain torch.load + stats + hashes script {median_ms(plain)}   no scan, no jail")
    print(f"  GUI inspection / plain script           "
          f"{statistics.median(inspect) / statistics.median(plain):8.2f}x")
    print(f"torch imported by the GUI process: {'YES (bug)' if torch_seen else 'no'}")
    return 1 if torch_seen else 0


if __name__ == "__main__":
    sys.exit(main())
