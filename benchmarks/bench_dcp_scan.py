"""Benchmark the static scan of a torch.distributed.checkpoint folder: bytes read and time.

The folder is written by `dcp.save` in one process (float32 matrices of 8 MiB each, about
--size-gb in all). Each run is a fresh process that first drops the folder's pages from the
page cache (`posix_fadvise(DONTNEED)`, this folder's files only), then runs
`scan.dcp_folder.scan_folder` and reports from `/proc/self/io` the bytes it had read from the
disk (`read_bytes`, page faults of its mappings included) and through read calls (`rchar`),
its peak RSS and the scan's wall time. With --before DIR, the same runs are made with that
checkout of the project on PYTHONPATH (e.g. `git worktree add /tmp/wt_dcp_before <commit>`),
alternating with this one, so both are measured in one session at the same load.

    .venv/bin/python benchmarks/bench_dcp_scan.py [--size-gb 0.4] [--repeats 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_dcp_convert import generate_folder

PY = sys.executable
HERE = Path(__file__).resolve().parents[1]

SCAN = r"""
import json, os, sys, time
folder = sys.argv[1]
for name in os.listdir(folder):
    fd = os.open(os.path.join(folder, name), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
from inspector.scan.dcp_folder import scan_folder

def io():
    fields = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    return int(fields["read_bytes"]), int(fields["rchar"])

read0, rchar0 = io()
t0 = time.perf_counter()
scan = scan_folder(folder)
wall = time.perf_counter() - t0
read1, rchar1 = io()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"verdict": scan["verdict"], "read_mb": (read1 - read0) / 1e6,
                  "rchar_mb": (rchar1 - rchar0) / 1e6, "wall": wall, "rss_mb": hwm / 1024}))
"""


def run_scan(checkout: Path, folder: Path) -> dict:
    """One scan in a fresh process with `checkout` first on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([PY, "-c", SCAN, str(folder)], capture_output=True, text=True,
                          env=env, cwd=checkout)
    if done.returncode:
        raise SystemExit(f"scan failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> int:
    """Generate, measure before/after alternately, print medians, delete."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=0.4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None,
                    help="another checkout of the project to measure alongside this one")
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dcp-scan-", dir=args.dir))
    try:
        folder = work / "dcp"
        count, size = generate_folder(folder, args.size_gb)
        print(f"folder: dcp.save of {count} float32 matrices, {size / 1e6:.0f} MB; "
              f"{len(os.sched_getaffinity(0))} CPUs; load average {os.getloadavg()[0]:.1f}; "
              f"{args.repeats} repeats (medians)")
        checkouts = {"this checkout": HERE}
        if args.before is not None:
            checkouts = {"before": args.before.resolve(), **checkouts}
        rows: dict[str, list[dict]] = {name: [] for name in checkouts}
        for _repeat in range(args.repeats):
            for name, checkout in checkouts.items():
                rows[name].append(run_scan(checkout, folder))
        print(f"\n{'scan_folder':<16} {'verdict':>8} {'read MB':>9} {'rchar MB':>9} "
              f"{'wall s':>8} {'peak RSS MB':>12}")
        for name, measured in rows.items():
            med = {k: statistics.median(r[k] for r in measured) for k in measured[0]
                   if k != "verdict"}
            print(f"{name:<16} {measured[0]['verdict']:>8} {med['read_mb']:>9.1f} "
                  f"{med['rchar_mb']:>9.1f} {med['wall']:>8.2f} {med['rss_mb']:>12.0f}")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
