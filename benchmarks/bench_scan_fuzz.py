"""Fuzz the static scan: 10,000 mutated files of every format, no crash, no hang, bounded memory.

    .venv/bin/python benchmarks/bench_scan_fuzz.py [--files 10000] [--seed 1]

Seeds are small files of every format the scanner reads, benign and malicious
(`tests/factories.fuzz_seeds`); each mutant (`factories.mutate`: bit flips, boundary bytes,
inserted, deleted, repeated and truncated spans) is written to a file and scanned with
`scan_file` in a child interpreter that never imports torch. The parent gives each file 10 s:
a file that takes longer is a hang (the child is killed, the run goes on after it). Reported:
crashes (an exception out of scan_file), hangs, the slowest file, per-file median and p99, the
child's peak RSS (bound: 1 GB), and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import TESTS, load_average, tests_on_path

HANG_S = 10.0
RSS_BOUND_MB = 1024

CHILD = r"""
import json, random, resource, sys, time
sys.path.insert(0, sys.argv[1])
from factories import mutate
from inspector.scan.engine import scan_file
seeds = [open(p, "rb").read() for p in json.loads(sys.argv[2])]
first, count, seed, target = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
for i in range(first, count):
    rng = random.Random(seed * 1_000_003 + i)
    data = mutate(seeds[i % len(seeds)], rng)
    with open(target, "wb") as f:
        f.write(data)
    t0 = time.perf_counter()
    try:
        res = scan_file(target)
        out = {"i": i, "verdict": res.verdict,
               "one_line": res.error is None or "\n" not in res.error}
        json.dumps(res.to_json())
    except BaseException as exc:
        out = {"i": i, "crash": f"{type(exc).__name__}: {exc}"[:200]}
    out["ms"] = (time.perf_counter() - t0) * 1000
    print(json.dumps(out), flush=True)
# VmHWM is this process's own peak: ru_maxrss would include the parent's at fork, as Linux
# keeps it across exec
try:
    rss = next(int(line.split()[1]) for line in open("/proc/self/status")
               if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"done": True, "rss_kb": rss}), flush=True)
"""


def run(seeds: list[Path], files: int, seed: int, work: Path) -> dict:
    """Scan `files` mutants; a file over HANG_S kills the child, which restarts after it."""
    rows: dict[int, dict] = {}
    hangs: list[int] = []
    peak_kb = 0
    first = 0
    target = work / "mutant.bin"
    while first < files:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(TESTS), json.dumps([str(s) for s in seeds]),
             str(first), str(files), str(seed), str(target)],
            stdout=subprocess.PIPE, text=True, cwd=work)
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], HANG_S)
            if not ready:
                hangs.append(first)
                proc.kill()
                proc.wait()
                first += 1
                break
            line = proc.stdout.readline()
            if not line:  # the interpreter died on mutant `first`: a crash; go on after it
                proc.wait()
                rows[first] = {"i": first, "crash": f"child exited {proc.returncode}", "ms": 0}
                first += 1
                break
            row = json.loads(line)
            if row.get("done"):
                peak_kb = max(peak_kb, row["rss_kb"])
                proc.wait()
                first = files
                break
            rows[row["i"]] = row
            first = row["i"] + 1
    return {"rows": rows, "hangs": hangs, "peak_kb": peak_kb}


def main() -> int:
    """Build seeds, run the fuzz, print the numbers; exit 1 on a crash, hang or memory blow-up."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tests_on_path()
    from factories import fuzz_seeds

    with tempfile.TemporaryDirectory(prefix="bench-fuzz-") as tmp:
        work = Path(tmp)
        seeds = fuzz_seeds(work / "seeds")
        t0 = time.perf_counter()
        out = run(seeds, args.files, args.seed, work)
        wall = time.perf_counter() - t0
        canary = (work / "seeds" / "CANARY_EXECUTED").exists()
    rows = out["rows"].values()
    crashes = [r for r in rows if "crash" in r]
    multiline = [r for r in rows if r.get("one_line") is False]
    ms = sorted(r["ms"] for r in rows)
    slowest = max(rows, key=lambda r: r["ms"])
    peak_mb = out["peak_kb"] / 1024
    print(f"Scan fuzz: {len(rows)} mutated files from {len(seeds)} seeds (seed {args.seed}), "
          f"{wall:.1f} s wall, {load_average()}")
    print(f"crashes {len(crashes)}, hangs over {HANG_S:.0f} s {len(out['hangs'])}, multi-line "
          f"errors {len(multiline)}, payload ran {canary}")
    print(f"per file: median {statistics.median(ms):.2f} ms, p99 {ms[int(len(ms) * 0.99)]:.1f} "
          f"ms, max {slowest['ms']:.0f} ms (mutant {slowest['i']})")
    print(f"child peak RSS {peak_mb:.0f} MB (bound {RSS_BOUND_MB} MB)")
    print("verdicts:", dict(Counter(r.get("verdict", "crash") for r in rows)))
    for r in crashes[:10]:
        print("  crash", r["i"], r["crash"])
    bad = crashes or out["hangs"] or multiline or canary or peak_mb > RSS_BOUND_MB
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
