"""Benchmark `diff` of two sharded folders of one model (`.bin` shards against safetensors
shards) against the usual way to compare them, in one run:

(a) `ckpt-inspector diff BIN_DIR ST_DIR --json` (one jailed worker for both sides, one shard per
    side open at a time, bit-flip forensics);
(b) every shard of both sides loaded (`torch.load` of each `.bin`, `safetensors.torch.load_file`
    of each `.safetensors`) and compared key by key with `torch.equal`, the tied
    `lm_head.weight` against the embedding.

The folders are `bench_convert_folder`'s GPT-2 shaped model (float32, tied embeddings, about
--size-gb) in transformers 4's `.bin` layout, and transformers' own `save_pretrained` of it.
Each command runs as a child process after the page cache is warmed; wall time and peak RSS
(wait4) are measured, and for ours the worker's peak RSS. Target: the worker's peak RSS at
most a third of the load-everything baseline's, whatever the model size.

    .venv/bin/python benchmarks/bench_diff_shards.py [--size-gb 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_convert_folder import GENERATE, TRANSFORMERS
from bench_inspect_convert import timed

PY = sys.executable

LOAD_ALL = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file
sides = []
for index in sys.argv[1:3]:
    index = Path(index)
    state = {}
    for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        path = index.parent / shard
        state.update(load_file(path) if shard.endswith(".safetensors")
                     else torch.load(path, weights_only=True))
    sides.append(state)
a, b = sides
b.setdefault("lm_head.weight", b["transformer.wte.weight"])
assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
"""


def main() -> int:
    """Generate, measure, print medians and the ratio, delete."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shard-mb", type=int, default=200, help="max_shard_size of both sides")
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-diff-shards-", dir=args.dir))
    shard = f"{args.shard_mb}MB"
    try:
        bins, sts = work / "bin", work / "st"
        for command in ([PY, "-c", GENERATE, str(bins), str(args.size_gb), shard],
                        [PY, "-c", TRANSFORMERS, str(bins), str(sts), shard]):
            made = subprocess.run(command, capture_output=True, text=True)
            if made.returncode:
                raise SystemExit(f"generating the folders failed: {made.stderr[-2000:]}")
        files = [*bins.glob("*.bin"), *sts.glob("*.safetensors")]
        size = sum(p.stat().st_size for p in bins.glob("*.bin"))
        print(f"GPT-2 shape, {len(list(bins.glob('*.bin')))} .bin shards against "
              f"{len(list(sts.glob('*.safetensors')))} safetensors shards, {size / 1e9:.2f} GB "
              f"a side; {args.repeats} repeats (medians)")
        for part in files:
            subprocess.run(["cat", str(part)], stdout=subprocess.DEVNULL, check=True)
        script = work / "load_all.py"
        script.write_text(LOAD_ALL)
        commands = {
            "load every shard of both sides, torch.equal": [
                PY, str(script), str(bins / "pytorch_model.bin.index.json"),
                str(sts / "model.safetensors.index.json")],
            "ckpt-inspector diff BIN_DIR ST_DIR": [
                PY, "-m", "inspector", "diff", str(bins), str(sts), "--json"],
        }
        rows: dict[str, list[dict]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                row = timed(command)
                if name.startswith("ckpt-inspector"):
                    result = json.loads(row.pop("out"))
                    assert result["identical"], "the two folders should be identical"
                    row["worker_rss"] = result["timing"]["worker_peak_rss_kb"] >> 10
                row.pop("out", None)
                rows[name].append(row)
        med = {name: {k: statistics.median(r[k] for r in measured) for k in measured[0]}
               for name, measured in rows.items()}
        print(f"\n{'command':<46} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13}  notes")
        for name, m in med.items():
            note = f"worker peak RSS {m['worker_rss']:.0f} MiB" if "worker_rss" in m else ""
            print(f"{name:<46} {m['wall']:>8.2f} {m['cpu']:>7.2f} {m['rss']:>13.0f}  {note}")
        ours = med["ckpt-inspector diff BIN_DIR ST_DIR"]
        theirs = med["load every shard of both sides, torch.equal"]
        ratio = max(ours["rss"], ours["worker_rss"]) / theirs["rss"]
        verdict = "target met" if ratio <= 1 / 3 else "TARGET MISSED"
        print(f"\npeak RSS, ours / load-everything: {ratio:.2f} (target <= 0.33) {verdict}; "
              f"wall time {ours['wall'] / theirs['wall']:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
