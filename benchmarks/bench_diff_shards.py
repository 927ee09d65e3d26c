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

import json
import sys

from bench_convert_folder import TRANSFORMERS, generate
from bench_inspect_convert import timed
from common import PY, load_average, medians, run_script, scratch, size_options, warm_page_cache

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
    args = size_options(__doc__, 1.0, 200)
    shard = f"{args.shard_mb}MB"
    with scratch("bench-diff-shards-", args.dir) as work:
        bins, sts = work / "bin", work / "st"
        generate(bins, args.size_gb, shard)
        run_script(TRANSFORMERS, bins, sts, shard)
        files = [*bins.glob("*.bin"), *sts.glob("*.safetensors")]
        size = sum(p.stat().st_size for p in bins.glob("*.bin"))
        print(f"GPT-2 shape, {len(list(bins.glob('*.bin')))} .bin shards against "
              f"{len(list(sts.glob('*.safetensors')))} safetensors shards, {size / 1e9:.2f} GB "
              f"a side; {load_average()}; {args.repeats} repeats (medians)")
        warm_page_cache(files)
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
                rows[name].append(row)
        med = medians(rows)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
