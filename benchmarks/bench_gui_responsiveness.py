"""Benchmark how long the UI thread ever waits while big checkpoints are opened.

A fresh GUI process (no torch, as the app runs) opens one and then three 256 MiB checkpoints
at once, with a 10 ms UI timer ticking. Two measures per gap between ticks: the wall time
(what a user sees: the UI cannot repaint or react in that gap) and the CPU time the UI thread
spent in it (the app's own work). Target: no wait over 100 ms. The baseline is the same
timer in an idle window of the same process, which shows what the machine alone costs.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_gui_responsiveness.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PY = sys.executable
TESTS = Path(__file__).resolve().parent.parent / "tests"

CHILD = r"""
import json, sys, time
from PySide6.QtCore import QElapsedTimer, QTimer
from inspector.gui.app import create_application
from inspector.gui.main_window import MainWindow

app = create_application([])
window = MainWindow()
window.resize(1280, 720)
window.show()
files = sys.argv[1:]
clock, gaps, cpu = QElapsedTimer(), [], [time.thread_time()]

def tick():
    now = time.thread_time()
    gaps.append((clock.restart(), (now - cpu[0]) * 1000))
    cpu[0] = now

timer = QTimer()
timer.setInterval(10)
timer.timeout.connect(tick)

def idle_done():
    global gaps
    idle = gaps
    gaps = []
    docs = window.open_paths(files)

    def poll():
        if all(d.state in ("loaded", "load_failed", "error") and d.sha256 for d in docs):
            timer.stop()
            print(json.dumps({"idle": idle, "load": gaps,
                              "torch": "torch" in sys.modules,
                              "states": [d.state for d in docs]}))
            app.quit()
        else:
            QTimer.singleShot(20, poll)

    poll()

clock.start()
timer.start()
QTimer.singleShot(1000, idle_done)
app.exec()
"""


def build_files(folder: Path, count: int) -> list[Path]:
    """`count` 256 MiB checkpoints of 64 four-MiB tensors each (built with torch, in a child)."""
    out = []
    for i in range(count):
        sub = folder / f"f{i}"
        if not (sub / "big.pt").exists():
            subprocess.run([PY, "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                            "from gui_support import build; from pathlib import Path;"
                            "build(Path(sys.argv[2]), 'big', '256')", str(TESTS), str(sub)],
                           check=True)
        out.append(sub / "big.pt")
    return out


def run(files: list[Path]) -> dict:
    """One GUI process opening `files` at once; its measurements."""
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
           "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="bench-gui-cache-")}
    done = subprocess.run([PY, "-c", CHILD, *map(str, files)], capture_output=True, text=True,
                          env=env, timeout=900, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["torch"]:
        raise SystemExit("the GUI process imported torch")
    return result


def main() -> None:
    """Run the benchmark and print medians of the worst waits."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-gui-resp-"))
    files = build_files(work, 3)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| files | worst wait (median) | worst UI-thread work | idle worst wait | ticks |")
    print("|---|---|---|---|---|")
    for count in (1, 3):
        worst_wall, worst_cpu, idle_wall, ticks = [], [], [], []
        for _ in range(args.repeats):
            r = run(files[:count])
            worst_wall.append(max(w for w, _ in r["load"]))
            worst_cpu.append(max(c for _, c in r["load"]))
            idle_wall.append(max(w for w, _ in r["idle"]))
            ticks.append(len(r["load"]))
        print(f"| {count} × 256 MiB | {statistics.median(worst_wall):.0f} ms "
              f"(runs {worst_wall}) | {statistics.median(worst_cpu):.0f} ms | "
              f"{statistics.median(idle_wall):.0f} ms | {int(statistics.median(ticks))} |")
    print("target: worst wait ≤ 100 ms")


if __name__ == "__main__":
    main()
