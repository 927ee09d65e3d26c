"""The in-process static scan, this tree against an older checkout of it, on the labelled corpus.

    .venv/bin/python benchmarks/bench_scan_before_after.py [--before /tmp/before] [--rounds 15]

Each tree is run by its own interpreter (`TREE/.venv/bin/python`, else this one) from inside the
tree, so each imports its own `inspector`; the scan function is looked up where each tree keeps
it (`inspector.scan.engine.scan_file`, before the redesign `inspector.core.scan.scan_file`). The
trees take turns, --rounds times each, so background load on a shared machine hits both alike.
Per turn a tree warms up on the first file, then scans every corpus file --repeat times and keeps
each file's median scanning-thread CPU time and wall time; per tree the median over turns of
each file's value counts, and the table gives the median over files, in ms per file, the sum
over the corpus, and the ratios after / before (below 1: this tree is faster). Without an
older tree (--before absent or missing) it times this tree alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "picklescan"

HARNESS = r"""
import importlib, json, statistics, sys, time
cfg = json.load(sys.stdin)
for name in ("inspector.scan.engine", "inspector.core.scan"):
    try:
        scan = importlib.import_module(name).scan_file
        break
    except ImportError:
        continue
scan(cfg["files"][0])
out = {}
for path in cfg["files"]:
    cpu, wall = [], []
    for _ in range(cfg["repeat"]):
        t0, c0 = time.perf_counter(), time.thread_time()
        scan(path)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    out[path] = [statistics.median(cpu), statistics.median(wall)]
print(json.dumps({"module": scan.__module__, "times": out}))
"""


def corpus_files() -> list[str]:
    """The corpus's labelled sample files, sorted."""
    rows = (CORPUS / "labels.tsv").read_text().splitlines()[1:]
    return sorted(str(CORPUS / line.split("\t")[0]) for line in rows if line)


def interpreter(tree: Path) -> str:
    """The tree's own virtual environment's Python, else the one running this script."""
    own = tree / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def one_turn(tree: Path, files: list[str], repeat: int) -> dict:
    """One tree's scan of every file, timed in a fresh interpreter started inside the tree."""
    cfg = json.dumps({"files": files, "repeat": repeat})
    done = subprocess.run([interpreter(tree), "-c", HARNESS], cwd=tree, input=cfg, text=True,
                          capture_output=True, check=True)
    return json.loads(done.stdout)


def main() -> int:
    """Alternate the trees' turns and print per-file medians and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, default=Path("/tmp/before"),
                    help="an older checkout of this repository (skipped when absent)")
    ap.add_argument("--rounds", type=int, default=15, help="turns each tree takes")
    ap.add_argument("--repeat", type=int, default=5, help="scans per file per turn (median)")
    args = ap.parse_args()
    if not (CORPUS / "labels.tsv").is_file():
        print(f"corpus not found at {CORPUS}; nothing to time", file=sys.stderr)
        return 0
    trees = {"after": REPO}
    if (args.before / "inspector").is_dir():
        trees = {"before": args.before.resolve(), **trees}
    else:
        print(f"no older tree at {args.before}; timing this tree alone")
    files = corpus_files()
    turns: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            turns[name].append(one_turn(tree, files, args.repeat))
    per_file = {}
    for name, runs in turns.items():
        cpu = [statistics.median(r["times"][f][0] for r in runs) for f in files]
        wall = [statistics.median(r["times"][f][1] for r in runs) for f in files]
        per_file[name] = (statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3,
                          sum(cpu) * 1e3)
        print(f"{name:7} {runs[0]['module']:24} CPU {per_file[name][0]:.4f} ms/file  "
              f"wall {per_file[name][1]:.4f} ms/file  corpus CPU {per_file[name][2]:.2f} ms  "
              f"({len(files)} files, {args.rounds} turns)")
    if "before" in per_file:
        ratios = [per_file["after"][i] / per_file["before"][i] for i in range(3)]
        print("ratio after/before: CPU {:.3f}x  wall {:.3f}x  corpus CPU {:.3f}x".format(*ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
