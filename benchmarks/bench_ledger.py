"""What proving a checkpoint costs: `inspector.ledger.save` against a plain `torch.save` and
against the floor of any proof (torch.save, fsync, one full re-read and one SHA-256 of the
file), and `inspector.ledger.save_pretrained` against `model.save_pretrained`, in the same run.

Method: each measurement is a fresh interpreter that builds the state in memory (float32
2048x2048 matrices for torch.save; a GPT-2 built from a config, no download, for
save_pretrained), records its peak RSS, then saves once into a scratch folder on the same
disk; the time is the save call alone, the RSS added is the peak during the save (VmHWM, reset
through /proc/self/clear_refs once the state is built) minus the RSS before it.
Before the clock, the torch.save, floor and ledger.save children save a 4-element state once
with the same writer (a training process saves many times; the first call's lazy imports are
not a save's cost).
The ledger's time includes its health check (the NaN scan and, with `--state adam`, the check of
Adam's moments, on a thread during the write),
every tensor's digest (hashed in memory on that thread as torch.save writes it), the fsyncs,
the file's SHA-256 (read back on a second thread as the file is written), the one re-read
(every tensor compared with memory), and the journal append; the plain writers neither fsync
nor read back. Runs alternate writer by writer, in an order that rotates each repeat, each
after an `os.sync()` (plain torch.save leaves its pages unflushed, and the writer after it met
a disk still writing them: at 252 MB that alone made the ledger, always second, look 1.6x the
floor); medians of --repeats.

Targets: `ledger.save` at most 1.2x the floor; the RSS added by the ledger stays small against
the state (the re-read streams pages of the file, dropped once read, against views of the
tensors: no second copy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from common import load_average, run_script, scratch

CHILD = r"""
import json, sys, time
from pathlib import Path
import torch
kind, mb, out, shape = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
if shape == "adam":  # a training state: weights plus the moments of two real Adam steps
    n = max(1, round(mb * 1e6 / (3 * 2048 * 2048 * 4)))
    params = [torch.nn.Parameter(torch.randn(2048, 2048)) for _ in range(n)]
    opt = torch.optim.Adam(params)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    state = {"model": {f"layers.{i}.weight": p.detach() for i, p in enumerate(params)},
             "optimizer": opt.state_dict()}
    size = 3 * n * 2048 * 2048 * 4
elif kind.endswith("save_pretrained"):
    import transformers
    layers = max(1, round((mb * 1e6 - 8192 * 1024 * 4) / (12.6e6 * 4)))
    cfg = transformers.GPT2Config(vocab_size=8192, n_positions=256, n_embd=1024,
                                  n_layer=layers, n_head=16)
    model = transformers.GPT2LMHeadModel(cfg)
    size = sum(p.numel() * 4 for p in model.parameters())
else:
    n = max(1, round(mb * 1e6 / (2048 * 2048 * 4)))
    state = {f"layers.{i}.weight": torch.randn(2048, 2048) for i in range(n)}
    size = n * 2048 * 2048 * 4
from inspector.ledger import save, save_pretrained  # imported before the clock starts
# a training process saves many times: one small save by the same writer first, so what is
# timed is a save, not the first call's lazy imports (~70 ms for the ledger's re-reader)
warm = out / "warm"
warm.mkdir()
small = {"w": torch.ones(4)}
if kind == "ledger.save":
    save(small, warm / "w.pt")
elif kind in ("torch.save", "floor"):
    torch.save(small, warm / "w.pt")
def status(field):
    line = next(l for l in open("/proc/self/status") if l.startswith(field + ":"))
    return int(line.split()[1])
# building the state peaked above where it settled: reset the peak (VmHWM) to the current RSS
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
before = status("VmRSS")
start = time.perf_counter()
if kind == "torch.save":
    torch.save(state, out / "plain.pt")
elif kind == "floor":
    import hashlib, os
    with open(out / "floor.pt", "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    digest = hashlib.sha256()
    with open(out / "floor.pt", "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
elif kind == "ledger.save":
    save(state, out / "ledger.pt", step=1)
elif kind == "save_pretrained":
    model.save_pretrained(out / "plain")
else:
    save_pretrained(model, out / "ledger", step=1)
seconds = time.perf_counter() - start
after = status("VmHWM")
print(json.dumps({"seconds": seconds, "rss_added_mib": (after - before) / 1024,
                  "state_mb": size / 1e6}))
"""

PAIRS = (("torch.save", "ledger.save"), ("floor", "ledger.save"),
         ("save_pretrained", "ledger.save_pretrained"))


def main() -> None:
    """Run every writer at every size and print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[200, 1000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="scratch parent (default: temp)")
    ap.add_argument("--state", choices=("weights", "adam"), default="weights",
                    help="adam: weights plus their Adam moments (a third each), as a training "
                         "checkpoint holds, for the moments' check (`ledger.health.moments`)")
    ap.add_argument("--no-pretrained", dest="pretrained", action="store_false",
                    help="skip the save_pretrained pair")
    args = ap.parse_args()
    print(load_average())
    for mb in args.sizes_mb:
        runs: dict[str, list[dict]] = {k: [] for pair in PAIRS for k in pair
                                       if args.pretrained or "pretrained" not in k}
        kinds = list(runs)
        for r in range(args.repeats):
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                os.sync()  # no writer meets the disk still flushing what the last one left
                with scratch("bench-ledger-", args.dir) as out:
                    runs[kind].append(json.loads(run_script(CHILD, kind, mb, out,
                                                            args.state)))
        med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
        for plain, ledger in PAIRS:
            if plain not in med:
                continue
            p, g = med[plain], med[ledger]
            print(f"{p['state_mb']:7.0f} MB  {plain:16} {p['seconds']:6.2f} s "
                  f"{p['rss_added_mib']:7.1f} MiB added | {ledger:23} {g['seconds']:6.2f} s "
                  f"{g['rss_added_mib']:7.1f} MiB added | time {g['seconds'] / p['seconds']:.2f}x"
                  f" (+{g['seconds'] - p['seconds']:.2f} s), RSS added "
                  f"{g['rss_added_mib'] - p['rss_added_mib']:+.1f} MiB")
    print(load_average())


if __name__ == "__main__":
    main()
