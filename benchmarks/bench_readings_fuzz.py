"""Differential fuzz of the verdict's imports against CPython's unpicklers: 100,000 mutants.

    .venv/bin/python benchmarks/bench_readings_fuzz.py [--files 100000] [--batch 1000] [--seed 1]
        [--keep DIR]

Seeds are the fuzz seeds of every format (`tests/factories.fuzz_seeds`, those under 200 KB);
each mutant (`factories.mutate`) is scanned in memory (`scan_bytes`) with its readings
deferred, and each batch's readings run in one jailed `dry-run` job (`sandbox.host.client.
dry_run_reader`), as a folder scan runs them. The ground truth is written apart from the op and
from the scanner (`tests/readings_samples.truths`, in a child under a 2 GB address-space
limit): every reading a real loader makes, decided by the loaders' own readers (torch's zip
reader `PyTorchFileReader`, zipfile and NumPy's header reader for numpy.load, tarfile, the
stdlib's decoders), each pickle read by CPython's unpicklers with inert stand-ins. Reported:

- missed: mutants where a real reading resolves an import the verdict's globals lack;
- extra: mutants whose verdict holds an import no real loader's reading resolves;
  target 0 for both, by seed;
- differentials: mutants where the scan names a `parser-differential` finding, and those
  whose damaged archive torch's own zip reader read in the jail (`zip-reader-differential`
  where it handed out other bytes than the scan's reading);
- time per mutant (scan + its share of the jailed readings) and the payload canary.
Exit 1 on any missed or extra mutant, or when the canary appears. `--keep DIR` writes each
disagreeing mutant there (`NUMBER-SEED`): the seeds are made afresh each run (torch.save writes
a random serialization id), so a mutant's number alone does not make it again.
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
    ap.add_argument("--keep", type=Path, help="folder for the disagreeing mutants")
    args = ap.parse_args()
    tests_on_path()
    from factories import fuzz_seeds, mutate
    from readings_samples import disagreement, truths

    from inspector.sandbox.host.client import dry_run_reader
    from inspector.scan import readings
    from inspector.scan.engine import scan_bytes

    missed: list[tuple[int, list]] = []
    extra: list[tuple[int, list]] = []
    classes: Counter = Counter()
    differential = asked = zip_differential = 0
    verdicts: Counter = Counter()
    per_batch: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-readings-") as tmp:
        work = Path(tmp)
        paths = [p for p in fuzz_seeds(work / "seeds") if p.stat().st_size < 200_000]
        seeds = [p.read_bytes() for p in paths]
        t_all = time.perf_counter()
        for first in range(0, args.files, args.batch):
            count = min(args.batch, args.files - first)
            mutants = [mutate(seeds[i % len(seeds)],
                              random.Random(args.seed * 1_000_003 + i))
                       for i in range(first, first + count)]
            t0 = time.perf_counter()
            with readings.deferred():
                results = [scan_bytes(m) for m in mutants]
            asked += sum(any(b.zip for b in r._blobs) for r in results)
            readings.read(results, dry_run_reader)
            per_batch.append((time.perf_counter() - t0) / count)
            for i, (truth, res) in enumerate(zip(truths(mutants, work), results, strict=True)):
                lacks, holds = disagreement(truth, res)
                seed = paths[(first + i) % len(seeds)].name
                if lacks:
                    missed.append((first + i, sorted(lacks)))
                    classes[("missed", seed)] += 1
                if holds:
                    extra.append((first + i, sorted(holds)))
                    classes[("extra", seed)] += 1
                if args.keep and (lacks or holds):
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / f"{first + i}-{seed}").write_bytes(mutants[i])
                codes = {f.code for f in res.findings}
                differential += "parser-differential" in codes
                zip_differential += "zip-reader-differential" in codes
                verdicts[res.verdict] += 1
            print(f"\r{first + count}/{args.files} missed {len(missed)} extra {len(extra)}",
                  end="", file=sys.stderr, flush=True)
        wall = time.perf_counter() - t_all
        canary = (work / "seeds" / "CANARY_EXECUTED").exists()
    print(file=sys.stderr)
    print(f"Readings fuzz: {args.files} mutants of {len(seeds)} seeds (seed {args.seed}), "
          f"batches of {args.batch}, {wall:.0f} s wall, {load_average()}")
    print(f"disagreements: missed {len(missed)} (real imports the verdict lacks); extra "
          f"{len(extra)} (verdict imports no real reading resolves); parser-differential "
          f"findings: {differential}; damaged archives read by torch's own zip reader: "
          f"{asked} ({zip_differential} handed out other pickles than the scan's reading)")
    print(f"per mutant, scan and jailed readings: median {statistics.median(per_batch) * 1e3:.2f}"
          f" ms (batch medians); payload ran {canary}")
    print("verdicts:", dict(verdicts))
    for (side, seed), n in sorted(classes.items()):
        print(f"  {side} {seed}: {n}")
    for label, cases in (("missed", missed), ("extra", extra)):
        for i, names in cases[:10]:
            print(f"  {label}: mutant {i}", names)
    return 1 if missed or extra or canary else 0


if __name__ == "__main__":
    raise SystemExit(main())
