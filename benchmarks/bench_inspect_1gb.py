"""Benchmark `inspect` of a ~1 GB checkpoint, start-up included, against hashing the file alone
(issue 17's target: at most 1.5x `openssl dgst -sha256`), all in one run, interleaved:

`openssl dgst -sha256 FILE`, `sha256sum FILE`, `python -I -c "import torch"` (what a cold
worker's start-up costs at least), the floor (below) and `ckpt-inspector inspect FILE --json` on a
generated ~1 GB `.pt` and the same tensors as a `.safetensors`, the page cache warm (each file
is read once first). With `--before PYTHON` the same inspect also runs with an interpreter
whose `inspector` is another checkout, so a change is measured before and after in the same
session. PYTHONPATH cannot do that: the worker runs `python -I`, which ignores it and would
import this tree's worker. Such an interpreter: `git worktree add /tmp/before HEAD~3`,
`python3 -m venv --without-pip /tmp/bv`, its site-packages replaced by a hard-linked copy of
this venv's (`cp -al`; the jail lets a worker read only its own prefix) less the editable
install's `__editable__*` files, plus an `a.pth` holding /tmp/before. Medians of --repeats; the load
average is printed at the start and the end (the machine may be shared).

The floor (`.safetensors` only) is what no implementation of inspect's answer can skip, done
as cheaply as NumPy allows and without torch: one `python -I` that hashes the whole file on
one thread (the client's SHA-256) while two threads hash each tensor and take its minimum,
maximum, sum, sum of squares, zero count and 64-bin histogram. It reads no pickle, so it
stands for a torch-free worker; a `.pt` file cannot have one while the worker's load is
`torch.load(weights_only=True)`.

    .venv/bin/python benchmarks/bench_inspect_1gb.py [--size-gb 1.0] [--repeats 3]
        [--before /tmp/bv/bin/python]

Measured 2026-12-01 02:35 UTC, load 0.9-1.2, medians of 3: openssl 0.94-0.97 s; `import torch`
2.05-2.21x openssl; inspect 3.07x (.pt, 2.90 s, start-up 1.34 s) and 3.34x (.safetensors); the
floor 1.70x (1.65 s, CPU 3.02 s); `sha256sum` (coreutils, no SHA extensions) 4.8-5.0x, so
inspect takes 0.61-0.70x of sha256sum's time. Even the floor misses 1.5x here.
Earlier, 2026-12-01, 1.04 GB, 2 cores shared with other sessions, medians of 3: the target is
out of reach of a cold worker here, whose start-up alone (`import torch`, 2.00 s) is 2.08x
openssl. At load 1.9-2.7: openssl 0.96 s; inspect 4.93 s = 5.14x (.pt; start-up 1.95 s, CPU
4.81 s), 4.77 s = 4.22x (.safetensors); an earlier run at load 4.0-4.8: 5.97x and 3.56x. In
the worker (load 4): start-up 2.14 s, load (mmap) 0.02 s, statistics and digests 1.93 s on
two threads; the client's file hash (1.2 s) runs beside the start-up, its scan takes 0.04 s
and the JSON after the last tensor 0.03 s. CPU per GB: `import torch` 1.5-1.8 s, tensor
digests 0.75 s, statistics 0.9-1.2 s, file hash 1.0 s; at a load near 2 the run gets about
one core, so inspect costs about its CPU time (4.8 s); each part reads what the answer
depends on, so only the statistics' own cost (a few passes per chunk) is left to cut.
With --before (760a2d2's parent: a tied weight described twice) at load 2.8 -> 1.6: .pt
inspect 3.47 -> 3.38 s = 3.63x -> 3.55x openssl (CPU 5.02 -> 4.92 s; start-up 1.45 / 1.64
s; `import torch` 1.67x), .safetensors (no tied tensor) 3.60x / 3.57x. With --before
c5c90c2's parent (every tensor's statistics on one thread, hashing on the other) at load
3.0: .pt 4.32 -> 4.12 s = 4.29x -> 4.09x (after start-up 2.32 -> 2.23 s; CPU 4.63 -> 4.48
s; worker 421 -> 441 MiB), .safetensors 4.95 -> 4.34 s = 4.26x -> 3.73x; `import torch`
1.94-2.06x. At that load the run gets about one core, so the second thread gains little
here; `describe_tensors` alone at load 2: 1.47 -> 1.00 s for the same tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_inspect_convert import GENERATE, median, timed

PY = sys.executable

TO_SAFETENSORS = r"""
import sys, torch
from safetensors.torch import save_file
state = torch.load(sys.argv[1], weights_only=True, mmap=True)
seen = set()
out = {}
for key, t in state.items():
    if t.untyped_storage().data_ptr() not in seen:  # safetensors refuses shared storage
        seen.add(t.untyped_storage().data_ptr())
        out[key] = t.contiguous()
save_file(out, sys.argv[2])
"""


FLOOR = r"""
import hashlib, json, mmap, struct, sys, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np
with open(sys.argv[1], "rb") as f:
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
file_hash = threading.Thread(target=lambda: hashlib.sha256(data).hexdigest())
file_hash.start()
size = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + size])
header.pop("__metadata__", None)
raw = np.frombuffer(data, dtype=np.uint8)[8 + size:]
kinds = {"F32": np.float32, "F16": np.float16}
STEP = 1 << 20
def one(meta):
    start, end = meta["data_offsets"]
    values = raw[start:end].view(kinds[meta["dtype"]])
    digest, parts = hashlib.sha256(), []
    for i in range(0, values.size, STEP):
        c = values[i:i + STEP]
        digest.update(c)
        parts.append((c.min(), c.max(), c.sum(dtype=np.float64), np.dot(c, c),
                      np.count_nonzero(c == 0)))
    lo, hi = min(p[0] for p in parts), max(p[1] for p in parts)
    width = np.float32((hi - lo) / 64 or 1)
    counts = sum(np.bincount(((values[i:i + STEP] - lo) / width).astype(np.uint8),
                             minlength=65) for i in range(0, values.size, STEP))
    return digest.hexdigest(), counts
def nbytes(meta):
    return meta["data_offsets"][1] - meta["data_offsets"][0]
with ThreadPoolExecutor(2) as pool:
    list(pool.map(one, sorted(header.values(), key=nbytes, reverse=True)))
file_hash.join()
"""


def run_inspect(path: Path, python: str) -> dict:
    """One timed inspect; its worker start-up and peak RSS as the report gives them."""
    row = timed([python, "-m", "inspector", "inspect", str(path), "--json", "--quiet"])
    report = json.loads(row.pop("out"))
    if report.get("error"):
        raise SystemExit(f"inspect {path.name}: {report['error']}")
    timing = report.get("timing") or {}
    row["startup"] = timing.get("startup_s") or 0.0
    row["worker_rss"] = (timing.get("worker_peak_rss_kb") or 0) // 1024
    return row


def main() -> int:
    """Generate both files, measure interleaved, print medians, ratios and the load; delete."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", default=None, metavar="PYTHON",
                    help="an interpreter whose inspector is the checkout to compare with")
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-inspect-1gb-", dir=args.dir))
    try:
        pt = work / "model.pt"
        st = work / "model.safetensors"
        subprocess.run([PY, "-c", GENERATE, str(pt), str(args.size_gb)], check=True,
                       capture_output=True)
        subprocess.run([PY, "-c", TO_SAFETENSORS, str(pt), str(st)], check=True,
                       capture_output=True)
        for f in (pt, st):
            subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
        print(f"{pt.name} {pt.stat().st_size / 1e9:.2f} GB, {st.name} "
              f"{st.stat().st_size / 1e9:.2f} GB; {os.cpu_count()} CPUs; {args.repeats} "
              f"repeats, interleaved (medians); load average at start {os.getloadavg()}")
        pythons = {"after": PY} if args.before is None else {"before": args.before,
                                                             "after": PY}
        rows: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.repeats):
            for f in (pt, st):
                # the worker's start-up alone: the floor of inspect's wall time
                for name, cmd in (("openssl", ["openssl", "dgst", "-sha256", str(f)]),
                                  ("sha256sum", ["sha256sum", str(f)]),
                                  ("import torch", [PY, "-I", "-c", "import torch"])):
                    row = timed(cmd)
                    row.pop("out")
                    rows.setdefault((f.suffix, name), []).append(row)
                if f is st:
                    floor = timed([PY, "-I", "-c", FLOOR, str(f)])
                    floor.pop("out")
                    rows.setdefault((f.suffix, "floor (NumPy)"), []).append(floor)
                for label, python in pythons.items():
                    rows.setdefault((f.suffix, f"inspect {label}"), []).append(
                        run_inspect(f, python))
        print(f"load average at end {os.getloadavg()}\n")
        print(f"{'file':<13} {'command':<16} {'wall s':>7} {'CPU s':>7} {'RSS MiB':>8}  "
              f"{'start-up s':>10} {'worker MiB':>10}  x openssl  x sha256sum")
        for (suffix, name), measured in rows.items():
            ssl = median(rows[(suffix, "openssl")], "wall")
            sha = median(rows[(suffix, "sha256sum")], "wall")
            wall = median(measured, "wall")
            extra = (f"{median(measured, 'startup'):>10.2f} {median(measured, 'worker_rss'):>10.0f}"
                     if "startup" in measured[0] else f"{'':>10} {'':>10}")
            print(f"{suffix:<13} {name:<16} {wall:>7.2f} {median(measured, 'cpu'):>7.2f} "
                  f"{median(measured, 'rss'):>8.0f}  {extra}  {wall / ssl:>9.2f}  "
                  f"{wall / sha:>10.2f}")
        print("\ntarget: inspect (after) at most 1.5x openssl dgst -sha256")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
