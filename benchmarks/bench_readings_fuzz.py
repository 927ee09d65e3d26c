"""Differential fuzz of the verdict's imports against CPython's C unpickler: 100,000 mutants.

    .venv/bin/python benchmarks/bench_readings_fuzz.py [--files 100000] [--batch 1000] [--seed 1]

Seeds are the fuzz seeds of every format (`tests/factories.fuzz_seeds`, those under 200 KB);
each mutant (`factories.mutate`) is scanned in memory (`scan_bytes`) with its readings
deferred, and each batch's readings run in one jailed `dry-run` job (`sandbox.client.
dry_run_reader`), as a folder scan runs them. The ground truth is a separate recording of the C
unpickler (`tests/readings_samples.truths`, in a child under a 2 GB address-space limit:
back-to-back pickles from the first byte, every find_class kept, inert stand-ins). Reported:

- missed: mutants where the C unpickler resolves an import the verdict's globals lack (target
  0: the verdict uses every import the real reader resolves);
- equal: mutants whose verdict imports equal the truth exactly; the rest hold imports only the
  walker sees (from readings other than the first byte's, or past where the C reader fails),
  each of which the verdict also counts;
- differentials: mutants where the scan names a `parser-differential` finding;
- time per mutant (scan + its share of the jailed readings) and the payload canary.
Exit 1 when a mutant is missed or the canary appears.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import load_average, tests_on_path


def main() -> int:
    """Run the fuzz and print the numbers."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tests_on_path()
    from factories import fuzz_seeds, mutate
    from readings_samples import truths

    from inspector.core import readings
    from inspector.core.scan import scan_bytes
    from inspector.sandbox.client import dry_run_reader

    missed: list[tuple[int, list]] = []
    equal = differential = 0
    verdicts: Counter = Counter()
    per_batch: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-readings-") as tmp:
        work = Path(tmp)
        seeds = [p.read_bytes() for p in fuzz_seeds(work / "seeds")
                 if p.stat().st_size < 200_000]
        t_all = time.perf_counter()
        for first in range(0, args.files, args.batch):
            count = min(args.batch, args.files - first)
            mutants = [mutate(seeds[i % len(seeds)],
                              random.Random(args.seed * 1_000_003 + i))
                       for i in range(first, first + count)]
            t0 = time.perf_counter()
            with readings.deferred():
                results = [scan_bytes(m) for m in mutants]
            readings.read(results, dry_run_reader)
            per_batch.append((time.perf_counter() - t0) / count)
            for i, (truth, res) in enumerate(zip(truths(mutants, work), results, strict=True)):
                used = {(g.module, g.name) for g in res.globals}
                if truth - used:
                    missed.append((first + i, sorted(truth - used)))
                equal += truth == used
                differential += any(f.code == "parser-differential" for f in res.findings)
                verdicts[res.verdict] += 1
            print(f"\r{first + count}/{args.files} missed {len(missed)}", end="",
                  file=sys.stderr, flush=True)
        wall = time.perf_counter() - t_all
        canary = (work / "seeds" / "CANARY_EXECUTED").exists()
    print(file=sys.stderr)
    print(f"Readings fuzz: {args.files} mutants of {len(seeds)} seeds (seed {args.seed}), "
          f"batches of {args.batch}, {wall:.0f} s wall, {load_average()}")
    print(f"missed real imports: {len(missed)}; verdict imports equal to the C unpickler's: "
          f"{equal} ({equal / args.files:.1%}); parser-differential findings: {differential}")
    print(f"per mutant, scan and jailed readings: median {statistics.median(per_batch) * 1e3:.2f}"
          f" ms (batch medians); payload ran {canary}")
    print("verdicts:", dict(verdicts))
    for i, names in missed[:10]:
        print("  missed", i, names)
    return 1 if missed or canary else 0


if __name__ == "__main__":
    raise SystemExit(main())
