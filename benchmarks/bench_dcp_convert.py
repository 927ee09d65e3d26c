"""Benchmark `convert DCP_DIR` against the usual way from a torch.distributed.checkpoint folder
to one safetensors file, in one run:

(a) torch's `dcp_to_torch_save(DIR, X.pt)`, then `safetensors.torch.save_file(torch.load(X.pt))`
    (the consolidation step DCP's documentation gives, then the safetensors library's own
    save; no verification of the result);
(b) `ckpt-inspector convert DIR -o X.safetensors` (the folder scanned, `.metadata` read with
    the weights_only unpickler in the jailed worker, chunks reassembled, output streamed,
    reopened and compared bit for bit).

The folder is written by `dcp.save` in one process: float32 matrices of 8 MiB each, about
--size-gb in all. Each command runs as a child process after the page cache is warmed; wall
time, CPU time and peak RSS (the largest process of the child's tree) are medians. No target
is set by the issue; the ratios are printed for the record.

    .venv/bin/python benchmarks/bench_dcp_convert.py [--size-gb 1] [--repeats 3]
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

from bench_inspect_convert import timed
from common import run_script

PY = sys.executable

GENERATE = r"""
import sys, warnings, torch, torch.distributed.checkpoint as dcp
warnings.simplefilter("ignore")
folder, size_gb = sys.argv[1], float(sys.argv[2])
count = max(1, round(size_gb * 2**30 / (8 << 20)))
gen = torch.Generator().manual_seed(0)
state = {"model": {f"layers.{i}.weight": torch.randn(1024, 2048, generator=gen)
                   for i in range(count)}, "step": 1000}
dcp.save(state, checkpoint_id=folder)
print(count)
"""

USUAL = r"""
import sys, torch
from safetensors.torch import save_file
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
folder, pt, out = sys.argv[1:4]
dcp_to_torch_save(folder, pt)
state = torch.load(pt, weights_only=False)
save_file(state["model"], out)
"""


def generate_folder(folder: Path, size_gb: float) -> tuple[str, int]:
    """A `dcp.save` folder of about `size_gb` of float32 matrices: how many, and its bytes."""
    count = run_script(GENERATE, folder, size_gb).strip()
    return count, sum(p.stat().st_size for p in folder.iterdir())


def main() -> int:
    """Generate, measure, print medians and ratios, delete."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dcp-", dir=args.dir))
    try:
        folder = work / "dcp"
        count, size = generate_folder(folder, args.size_gb)
        print(f"folder: dcp.save of {count} float32 matrices, {size / 1e9:.2f} GB; "
              f"{len(os.sched_getaffinity(0))} CPUs; {args.repeats} repeats (medians)")
        for part in folder.iterdir():
            subprocess.run(["cat", str(part)], stdout=subprocess.DEVNULL, check=True)
        script = work / "usual.py"
        script.write_text(USUAL)
        commands = {
            "dcp_to_torch_save + safetensors save_file":
                lambda out: [PY, str(script), str(folder), str(out) + ".pt", str(out)],
            "ckpt-inspector convert DCP_DIR":
                lambda out: [PY, "-m", "inspector", "convert", str(folder), "--key", "model",
                             "-o", str(out), "--json"],
        }
        rows: dict[str, list[dict]] = {name: [] for name in commands}
        for repeat in range(args.repeats):
            for number, (name, command) in enumerate(commands.items()):
                out = work / f"out-{repeat}-{number}.safetensors"
                row = timed(command(out))
                if name.startswith("ckpt-inspector"):
                    row["worker_rss"] = json.loads(row.pop("out"))["timing"][
                        "worker_peak_rss_kb"] >> 10
                rows[name].append(row)
                for leftover in work.glob(f"out-{repeat}-{number}*"):
                    leftover.unlink()
        print(f"\n{'command':<44} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13}  notes")
        med = {name: {k: statistics.median(r[k] for r in measured) for k in measured[0]
                      if k != "out"} for name, measured in rows.items()}
        for name, m in med.items():
            note = f"worker peak RSS {m['worker_rss']:.0f} MiB" if "worker_rss" in m else ""
            print(f"{name:<44} {m['wall']:>8.2f} {m['cpu']:>7.2f} {m['rss']:>13.0f}  {note}")
        ours, theirs = (med["ckpt-inspector convert DCP_DIR"],
                        med["dcp_to_torch_save + safetensors save_file"])
        print("\nratios (ours / the usual way; < 1 means ours is faster or smaller):")
        print(f"  wall time  {ours['wall'] / theirs['wall']:6.2f}")
        print(f"  peak RSS   {ours['rss'] / theirs['rss']:6.2f}  (ours: the larger of the CLI "
              "process and the worker)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
