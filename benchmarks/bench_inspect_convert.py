"""Benchmark `inspect` and `convert` on a generated >= 1 GB checkpoint against what a user
would otherwise run, all in one run:

(a) `ckpt-inspector inspect FILE --json` (static scan + file SHA-256 + jailed load + statistics
    and SHA-256 of every tensor) against `sha256sum FILE`, `openssl dgst -sha256 FILE`, and a
    plain script that does `torch.load` and the same statistics and tensor hashes;
(b) `ckpt-inspector convert FILE` (streamed, verified) against the safetensors project's
    approach: `torch.load`, drop shared names, `.contiguous()`, `safetensors.torch.save_file`,
    reload and `torch.equal` every tensor.

Each command runs as a child process; wall time and the peak RSS (from wait4: the largest
single process in the child's tree) are measured, plus the worker's own start-up time and
peak RSS as it reports them, and the seconds the user's process spent checking the worker's
reply against the files' bytes (`timing.claims_s`, `sandbox.host.claims`). The page cache is
warmed first so every tool reads from memory.

`--before PYTHON` also runs `inspect` and `convert` with another checkout's interpreter (e.g.
a `git worktree` of an older commit with its own venv) in the same run, and prints the
after / before ratios.

    .venv/bin/python benchmarks/bench_inspect_convert.py [--size-gb 1.1] [--repeats 3]
        [--before /tmp/old/.venv/bin/python]
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
import time
from pathlib import Path

import common  # noqa: F401  (importing it compiles the project's bytecode first)

PY = sys.executable

BASELINE_STATS = r"""
import hashlib, sys, torch
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True, mmap=False)
def leaves(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{prefix}{k}.")
    elif isinstance(obj, torch.Tensor):
        yield prefix[:-1], obj
out = {}
for key, t in leaves(sd):
    f = t.float()
    finite = f[torch.isfinite(f)]
    out[key] = dict(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()),
                    std=float(finite.std(unbiased=False)), absmax=float(finite.abs().max()),
                    nan=int(torch.isnan(f).sum()), inf=int(torch.isinf(f).sum()),
                    zeros=int((f == 0).sum()),
                    hist=torch.histc(finite, 64, float(finite.min()), float(finite.max())).tolist(),
                    sha256=hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest())
print(len(out))
"""

BASELINE_CONVERT = r"""
import sys, torch
from safetensors.torch import load_file, save_file
loaded = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
by_storage = {}
for name, t in loaded.items():
    by_storage.setdefault(t.untyped_storage().data_ptr(), []).append(name)
for names in by_storage.values():
    for name in sorted(names)[1:]:
        loaded.pop(name)
loaded = {k: v.contiguous() for k, v in loaded.items()}
save_file(loaded, sys.argv[2], metadata={"format": "pt"})
reloaded = load_file(sys.argv[2])
for k, v in loaded.items():
    assert torch.equal(v, reloaded[k]), k
print(len(reloaded))
"""


GENERATE = r"""
import sys, torch
path, size_gb = sys.argv[1], float(sys.argv[2])
hidden, vocab = 1024, 32000
g = torch.Generator().manual_seed(0)
state = {"embed.weight": torch.randn(vocab, hidden, generator=g)}
state["lm_head.weight"] = state["embed.weight"]  # tied, as in most language models
per_layer = (4 * hidden * hidden + 2 * hidden * 4 * hidden + 10 * hidden) * 4
layers = max(1, int((size_gb * 1e9 - vocab * hidden * 4) // per_layer) + 1)
for i in range(layers):
    p = f"layers.{i}."
    for name in ("q", "k", "v", "o"):
        state[p + f"attn.{name}.weight"] = torch.randn(hidden, hidden, generator=g) * 0.02
        state[p + f"attn.{name}.bias"] = torch.zeros(hidden)
    state[p + "mlp.up.weight"] = torch.randn(4 * hidden, hidden, generator=g) * 0.02
    state[p + "mlp.down.weight"] = torch.randn(hidden, 4 * hidden, generator=g) * 0.02
    state[p + "norm.weight"] = torch.ones(hidden)
    state[p + "norm.bias"] = torch.zeros(hidden).half()
torch.save(state, path)
print(len(state))
"""


def make_checkpoint(path: Path, size_gb: float) -> int:
    """A transformer-shaped float32 state dict of about size_gb (generated in a child)."""
    done = subprocess.run([PY, "-c", GENERATE, str(path), str(size_gb)], check=True,
                          capture_output=True, text=True)
    return int(done.stdout.strip())


def timed(cmd: list[str], cwd: Path | None = None) -> dict:
    """Wall and CPU seconds, peak RSS (MiB, largest process of the tree) and stdout of cmd,
    run in `cwd` (default the temp folder: outside any checkout, so `-m inspector` is the
    interpreter's own install).

    The benchmark process stays small (it never imports torch), because a child's maximum
    RSS starts from its parent's RSS at fork time.
    """
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL,
                                cwd=cwd or tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        text = out.read().decode()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed with exit code {code}: {text[-500:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss // 1024,
            "out": text}


def median(rows: list[dict], key: str) -> float:
    """Median of one measured quantity."""
    return statistics.median(r[key] for r in rows)


def main() -> int:
    """Generate, measure, print medians and ratios, delete."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    ap.add_argument("--before", metavar="PYTHON", default=None,
                    help="also run inspect and convert with this interpreter's install")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-inspect-", dir=args.dir))
    try:
        ckpt = work / "model.pt"
        n = make_checkpoint(ckpt, args.size_gb)
        size = ckpt.stat().st_size
        print(f"checkpoint: {n} tensors, {size / 1e9:.2f} GB; {os.cpu_count()} CPUs; "
              f"{args.repeats} repeats (medians)")
        subprocess.run(["cat", str(ckpt)], stdout=subprocess.DEVNULL, check=True)
        baseline_stats = work / "baseline_stats.py"
        baseline_stats.write_text(BASELINE_STATS)
        baseline_convert = work / "baseline_convert.py"
        baseline_convert.write_text(BASELINE_CONVERT)
        commands = {
            "sha256sum": ["sha256sum", str(ckpt)],
            "openssl dgst -sha256": ["openssl", "dgst", "-sha256", str(ckpt)],
            "torch.load + stats script": [PY, str(baseline_stats), str(ckpt)],
            "ckpt-inspector inspect": [PY, "-m", "inspector", "inspect", str(ckpt), "--json"],
            "torch.load + save_file": [PY, str(baseline_convert), str(ckpt),
                                       str(work / "baseline.safetensors")],
            "ckpt-inspector convert": [PY, "-m", "inspector", "convert", str(ckpt), "-o",
                                       str(work / "ours.safetensors"), "--force", "--json"],
        }
        if args.before:
            commands["inspect (before)"] = [args.before, "-m", "inspector", "inspect",
                                            str(ckpt), "--json"]
            commands["convert (before)"] = [args.before, "-m", "inspector", "convert",
                                            str(ckpt), "-o", str(work / "before.safetensors"),
                                            "--force", "--json"]
        rows: dict[str, list[dict]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, cmd in commands.items():
                row = timed(cmd, work)
                if cmd[1:3] == ["-m", "inspector"]:
                    report = json.loads(row.pop("out"))
                    if report.get("error"):
                        raise SystemExit(f"{name}: {report['error']}")
                    timing = report["timing"]
                    row["startup"] = timing["startup_s"]
                    row["worker_rss"] = (timing["worker_peak_rss_kb"] or 0) // 1024
                    row["claims"] = timing.get("claims_s")
                rows[name].append(row)
        print(f"\n{'command':<28} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13}  notes")
        for name, measured in rows.items():
            note = ""
            if "startup" in measured[0]:
                note = (f"worker start-up {median(measured, 'startup'):.2f} s, "
                        f"worker peak RSS {median(measured, 'worker_rss'):.0f} MiB")
                if measured[0]["claims"] is not None:
                    note += f", claims checked in {median(measured, 'claims'):.2f} s"
            print(f"{name:<28} {median(measured, 'wall'):>8.2f} {median(measured, 'cpu'):>7.2f}"
                  f" {median(measured, 'rss'):>13.0f}  {note}")
        ours = median(rows["ckpt-inspector inspect"], "wall")
        startup = median(rows["ckpt-inspector inspect"], "startup")
        sha = median(rows["sha256sum"], "wall")
        ssl = median(rows["openssl dgst -sha256"], "wall")
        plain = median(rows["torch.load + stats script"], "wall")
        conv = median(rows["ckpt-inspector convert"], "wall")
        base = median(rows["torch.load + save_file"], "wall")
        conv_rss = median(rows["ckpt-inspector convert"], "rss")
        base_rss = median(rows["torch.load + save_file"], "rss")
        print("\nratios (ours / theirs; < 1 means ours is faster or smaller):")
        checks = [
            ("inspect / sha256sum", ours / sha, "< 1", ours < sha),
            ("inspect / openssl", ours / ssl, "<= 2", ours <= 2 * ssl),
            ("(inspect - worker start-up) / openssl", (ours - startup) / ssl, "<= 2",
             ours - startup <= 2 * ssl),
            ("inspect / torch.load + stats", ours / plain, "", True),
            ("convert / torch.load + save_file (wall)", conv / base, "<= 1", conv <= base),
            ("convert / torch.load + save_file (peak RSS)", conv_rss / base_rss, "<= 0.3",
             conv_rss <= 0.3 * base_rss),
        ]
        if args.before:
            conv_before = median(rows["convert (before)"], "wall")
            claims = median(rows["ckpt-inspector convert"], "claims")
            checks += [
                ("convert after / before (wall)", conv / conv_before, "<= 1.1",
                 conv <= 1.1 * conv_before),
                ("convert's claims check / convert (wall)", claims / conv, "<= 0.1",
                 claims <= 0.1 * conv),
                ("inspect after / before (wall)",
                 ours / median(rows["inspect (before)"], "wall"), "", True),
                ("convert after / before (peak RSS)",
                 conv_rss / median(rows["convert (before)"], "rss"), "", True),
            ]
        for label, ratio, target, met in checks:
            verdict = "" if not target else ("target met" if met else "TARGET MISSED")
            print(f"  {label:<44} {ratio:6.2f}  {target:>5}  {verdict}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
