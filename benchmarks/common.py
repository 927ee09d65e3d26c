"""What several benchmarks share: the repository's paths, the project's bytecode, scratch
folders, child scripts, a warm page cache, medians and best-of timings, the machine's load, and
a checkpoint of large matrices.

A benchmark runs as `python benchmarks/bench_X.py`, so this folder is on its path and it
imports this module as `common`. Nothing here imports torch or inspector at module level: a
child's peak RSS (wait4) starts from its parent's RSS at fork time, so the measuring process
stays small.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
PY = sys.executable

T = TypeVar("T")


def compile_project() -> None:
    """Write the project's bytecode (a no-op once it is fresh), as an install does: with
    PYTHONDONTWRITEBYTECODE set, every command a benchmark times would otherwise compile the
    project first (about 0.4 s), which no user's installed copy does."""
    subprocess.run([PY, "-m", "compileall", "-q", str(REPO / "inspector")], check=True,
                   stdout=subprocess.DEVNULL)


compile_project()  # each benchmark imports this module before it times anything


def tests_on_path() -> None:
    """Make the test helpers importable (`factories`, `fake_pynvml`, `consistency_models`)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


@contextmanager
def scratch(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A fresh temporary folder (under `parent`, e.g. a --dir option), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def size_options(doc: str, size_gb: float, shard_mb: int | None = None) -> argparse.Namespace:
    """The parsed options of a benchmark over a generated checkpoint: --size-gb, --repeats,
    --dir and, for a sharded model, --shard-mb (the max_shard_size of every side)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=size_gb)
    ap.add_argument("--repeats", type=int, default=3)
    if shard_mb is not None:
        ap.add_argument("--shard-mb", type=int, default=shard_mb,
                        help="max_shard_size of every side")
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    return ap.parse_args()


def run_script(source: str, *args: object) -> str:
    """Run Python `source` in a child (`python -c`); its stdout, or SystemExit with its stderr."""
    done = subprocess.run([PY, "-c", source, *map(str, args)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"a child script failed: {done.stderr[-2000:]}")
    return done.stdout


def warm_page_cache(paths: Iterable[Path]) -> None:
    """Read every file once, so the first timed command does not pay for the disk."""
    for path in paths:
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)


def medians(rows: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Per command, the median of every number its runs measured (text such as `out` is left)."""
    return {name: {key: statistics.median(run[key] for run in runs)
                   for key, value in runs[0].items() if isinstance(value, (int, float))}
            for name, runs in rows.items()}


def best_of(fn: Callable[[], T], repeat: int = 5) -> tuple[float, T]:
    """The shortest of `repeat` timed calls of `fn`, in seconds, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def load_average() -> str:
    """The machine's state, printed beside every result: 'load average 1.23 on 2 CPUs'."""
    return f"load average {os.getloadavg()[0]:.2f} on {len(os.sched_getaffinity(0))} CPUs"


def matrix_checkpoint(path: Path, megabytes: float, side: int) -> Path:
    """`torch.save` of `side` x `side` matrices, float32 and bfloat16 in turn, each with a zero
    bias, until the matrices reach `megabytes` MB; keys `layers.N.weight` / `layers.N.bias`."""
    import torch

    gen = torch.Generator().manual_seed(0)
    state, total, i = {}, 0, 0
    while total < megabytes * 1e6:
        dtype = torch.bfloat16 if i % 2 else torch.float32
        weight = torch.randn(side, side, generator=gen).to(dtype)
        state[f"layers.{i}.weight"] = weight
        state[f"layers.{i}.bias"] = torch.zeros(side, dtype=dtype)
        total += weight.nbytes
        i += 1
    torch.save(state, path)
    return path
