"""Benchmark `convert DIR` on a sharded `.bin` model folder against transformers' own way to the
same result, in one run:

(a) `ckpt-inspector convert DIR -o OUT` (each shard streamed through the jailed worker,
    reopened and compared bit for bit, then the index written and checked);
(b) `GPT2LMHeadModel.from_pretrained(DIR)` + `save_pretrained(OUT, max_shard_size=...)`, what
    the transformers documentation suggests (no verification of the result).

The folder is a GPT-2 shaped model (float32, tied embeddings) of about --size-gb, saved in
transformers 4's sharded `.bin` layout with the shard boundaries transformers chooses. Each
command runs as a child process; wall time and peak RSS (wait4: the largest single process of
the child's tree) are measured after the page cache is warmed, and for ours the worker
start-ups (one jailed worker per shard) and the worker's peak RSS. Issue 15's target: convert
at most transformers' time and at most a third of its peak RSS.

    .venv/bin/python benchmarks/bench_convert_folder.py [--size-gb 2] [--repeats 3]
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

PY = sys.executable

GENERATE = r"""
import json, shutil, sys, torch, transformers
from pathlib import Path
folder, size_gb, shard = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
hidden, vocab = 1280, 50257
per_layer = 12 * hidden * hidden * 4
layers = max(1, round((size_gb * 1e9 - vocab * hidden * 4) / per_layer))
config = transformers.GPT2Config(n_layer=layers, n_embd=hidden, n_head=20, vocab_size=vocab)
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(config)
staging = folder.parent / "staging"
model.save_pretrained(staging, max_shard_size=shard)
index = json.loads((staging / "model.safetensors.index.json").read_text())
folder.mkdir()
shutil.copy(staging / "config.json", folder / "config.json")
state = model.state_dict()
weight_map = {}
for name in sorted(set(index["weight_map"].values())):
    keys = [k for k, s in index["weight_map"].items() if s == name]
    if "transformer.wte.weight" in keys:
        keys.append("lm_head.weight")
    out = name.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
    torch.save({k: state[k] for k in keys}, folder / out)
    weight_map.update(dict.fromkeys(keys, out))
doc = {"metadata": index["metadata"], "weight_map": weight_map}
(folder / "pytorch_model.bin.index.json").write_text(json.dumps(doc, indent=2))
shutil.rmtree(staging)
print(layers, len(set(weight_map.values())))
"""

TRANSFORMERS = r"""
import sys, transformers
model = transformers.GPT2LMHeadModel.from_pretrained(sys.argv[1])
model.save_pretrained(sys.argv[2], max_shard_size=sys.argv[3])
"""


def main() -> int:
    """Generate, measure, print medians and ratios, delete."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shard-mb", type=int, default=500, help="max_shard_size of both sides")
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-convert-folder-", dir=args.dir))
    shard = f"{args.shard_mb}MB"
    try:
        folder = work / "model"
        made = subprocess.run([PY, "-c", GENERATE, str(folder), str(args.size_gb), shard],
                              capture_output=True, text=True)
        if made.returncode:
            raise SystemExit(f"generating the folder failed: {made.stderr[-2000:]}")
        layers, shards = made.stdout.split()
        size = sum(p.stat().st_size for p in folder.glob("*.bin"))
        print(f"folder: GPT-2 shape, {layers} layers, {shards} .bin shards, {size / 1e9:.2f} GB; "
              f"{len(os.sched_getaffinity(0))} CPUs; {args.repeats} repeats "
              "(medians)")
        for part in folder.glob("*.bin"):
            subprocess.run(["cat", str(part)], stdout=subprocess.DEVNULL, check=True)
        script = work / "transformers_convert.py"
        script.write_text(TRANSFORMERS)
        commands = {
            "transformers from_pretrained + save_pretrained":
                lambda out: [PY, str(script), str(folder), str(out), shard],
            "ckpt-inspector convert DIR":
                lambda out: [PY, "-m", "inspector", "convert", str(folder), "-o", str(out),
                             "--json"],
        }
        rows: dict[str, list[dict]] = {name: [] for name in commands}
        for repeat in range(args.repeats):
            for number, (name, command) in enumerate(commands.items()):
                out = work / f"out-{repeat}-{number}"
                row = timed(command(out))
                if name.startswith("ckpt-inspector"):
                    shards = json.loads(row.pop("out"))["shards"]
                    row["startup"] = sum(s["timing"]["startup_s"] for s in shards)
                    row["worker_rss"] = max(s["timing"]["worker_peak_rss_kb"] for s in shards) >> 10
                rows[name].append(row)
                shutil.rmtree(out)
        print(f"\n{'command':<48} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13}  notes")
        med = {name: {k: statistics.median(r[k] for r in measured) for k in measured[0]
                      if k != "out"} for name, measured in rows.items()}
        for name, m in med.items():
            note = (f"worker start-ups {m['startup']:.2f} s in all, worker peak RSS "
                    f"{m['worker_rss']:.0f} MiB" if "startup" in m else "")
            print(f"{name:<48} {m['wall']:>8.2f} {m['cpu']:>7.2f} {m['rss']:>13.0f}  {note}")
        ours, theirs = med["ckpt-inspector convert DIR"], med[
            "transformers from_pretrained + save_pretrained"]
        print("\nratios (ours / transformers; < 1 means ours is faster or smaller):")
        for label, ratio, limit in (("wall time", ours["wall"] / theirs["wall"], 1.0),
                                    ("peak RSS", ours["rss"] / theirs["rss"], 1 / 3)):
            verdict = "target met" if ratio <= limit else "TARGET MISSED"
            print(f"  {label:<10} {ratio:6.2f}  (target <= {limit:.2f})  {verdict}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
