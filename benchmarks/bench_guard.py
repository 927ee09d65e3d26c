"""Training-guard overhead: step time with the guard off, on (the weights' fingerprint every
step; with its background reader where a core is spare, and inline), a hand-written isfinite
check, the floor of any exact per-step weights check, and under detect_anomaly; the data-order
ledger's cost per sample.

Method: a ~10M-parameter MLP (4 x Linear(1600, 1600) with GELU, batch 64, SGD) trained on the
chosen device. The six modes run interleaved, round by round, in an order that rotates each
round (off, guard, guard-inline, isfinite, floor, anomaly; guard, guard-inline, ..., off; ...),
so a change in the machine's load and the cache left by the previous step hit each alike. Each
mode trains its own copy of the model (the same weights) with its own optimizer: the guard's
global optimizer hooks act only on the optimizer of the model it watches, so the other modes
pay nothing for a guard they do not use (before 2026-12-06 every mode paid the post-step
fingerprint, which understated the guard's overhead by ~2.6 points), and every mode finds its
model as cold in the cache as the others do (one copy shared by four modes ran warmer than the
guards' own); each round
times `--steps` steps of each mode after a warm-up, by the wall clock and by the process's CPU
time (steadier on a shared machine: time the scheduler gave to other processes is not
counted); the medians of the per-round mean step times are quoted, with ratios to off.
`guard.step` is also timed alone on one backward's gradients, `--steps` calls per round.
"guard" is the plain-loop API: `guard.step(loss, model, optimizer)` between backward and
`optimizer.step()` with the defaults: one fused norm over the gradients, the weights'
fingerprint after every optimizer step and at every check, their norms and largest |w|, one
device sync, the norms and the check's fingerprint on the background thread when
`weights.fingerprint.spare_core` finds a core torch does not use (`--threads 1` on 2+ cores);
"guard-inline" is the same with `overlap=False`, every read on the training thread;
"isfinite" is what a user writes by hand (`torch.isfinite` of the loss and of the total
gradient norm, one `.item()`, step only if both hold); "floor" is isfinite plus the two
bare passes any exact check of every weight between steps must add (the weights' fingerprint
before the optimizer step, compared in the same sync, and again after it: the step rewrites
every weight in between), so guard / floor is what the guard costs beyond that;
"anomaly" is the whole step under `torch.autograd.detect_anomaly()`, what users are told to
turn on instead.

The ledger: iterating a DataLoader (main process, batch 256, a dataset of ints) plain and
through `track` (ledger lines buffered, fsync at close), and `OrderLedger.record` alone; the
difference per sample.

Targets: guard overhead at most 3 % of step time (the issue's bar with the fingerprint every
step).
Run: `python benchmarks/bench_guard.py [--device cuda] [--rounds 30] [--steps 1] [--threads 1]
[--batch 64]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import load_average


def build(device: str, batch: int = 64):
    """The model, its optimizer and a fixed batch."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    width = 1600
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)
    return model, opt, x, y


def time_steps(mode: str, model, opt, x, y, guard, steps: int, device: str,
               prints: list) -> tuple[float, float]:
    """Mean wall and CPU seconds per step over `steps` steps in one mode; `prints` holds the
    floor mode's last fingerprint."""
    import torch
    from torch import nn

    from inspector.guard.weights.fingerprint import fingerprint

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    weights = list(model.parameters())
    sync()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        if mode == "anomaly":
            with torch.autograd.detect_anomaly():
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
        else:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
        if guard is not None:
            if guard.step(loss, model, opt).take_step:
                opt.step()
        elif mode in ("isfinite", "floor"):
            total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            fine = torch.isfinite(loss) & torch.isfinite(total)
            if mode == "isfinite":
                if bool(fine.item()):
                    opt.step()
                continue
            # the other modes' steps moved the weights: the comparison is read, not obeyed
            same = (fingerprint(weights).flat == prints[0].flat).all()
            if torch.stack([fine, same]).tolist()[0]:
                opt.step()
                prints[0] = fingerprint(weights)
        else:
            opt.step()
    sync()
    return (time.perf_counter() - start) / steps, (time.process_time() - cpu) / steps


def bench_steps(args: argparse.Namespace, run_dir: Path) -> tuple[dict[str, float],
                                                                  dict[str, float]]:
    """Median step time per mode: by the wall clock (with the guard's parts timed alone) and
    by CPU time."""
    import warnings

    import torch

    from inspector.guard.guard import Guard, GuardConfig
    from inspector.guard.weights.fingerprint import fingerprint

    modes = ["off", "guard", "guard-inline", "isfinite", "floor", "anomaly"]
    guards = {m: Guard(run_dir / m, GuardConfig(warmup=10, fingerprint_every=1,
                                                overlap=None if m == "guard" else False))
              for m in ("guard", "guard-inline")}
    trained = {m: build(args.device, args.batch)[:2] for m in modes}
    x, y = build(args.device, args.batch)[2:]
    wall: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    prints = [fingerprint(list(trained["floor"][0].parameters()))]

    def timed(m: str, steps: int) -> tuple[float, float]:
        return time_steps(m, *trained[m], x, y, guards.get(m), steps, args.device, prints)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # detect_anomaly warns that it is slow
        for m in modes:
            timed(m, 3)
        for r in range(args.rounds):
            for m in modes[r % len(modes):] + modes[:r % len(modes)]:
                w, c = timed(m, args.steps)
                wall[m].append(w)
                cpu[m].append(c)
    guard = guards["guard-inline"]
    wall["guard.step alone"] = isolated_check(*trained["guard-inline"], x, y, guard, args)
    wall["fingerprint alone"] = isolated_fingerprint(guard, args)
    for g in guards.values():
        g.close()
        assert not g.alarms, g.alarms
    print(f"background reader: {'on' if guards['guard'].models.all()[0].watch.worker else 'off'} "
          f"(torch threads {torch.get_num_threads()})")
    n = sum(p.numel() for p in trained["off"][0].parameters())
    print(f"model: {n / 1e6:.2f}M parameters on {args.device}, batch {args.batch}; "
          f"{args.rounds} rounds x "
          f"{args.steps} steps; load {load_average()}")
    return ({m: statistics.median(v) for m, v in wall.items()},
            {m: statistics.median(v) for m, v in cpu.items()})


def isolated_check(model, opt, x, y, guard, args: argparse.Namespace) -> list[float]:
    """Per round, the mean time of `guard.step` itself (every read inline) on one backward's
    gradients: the overhead without the noise of subtracting two step times on a busy
    machine."""
    import torch
    from torch import nn

    opt.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    out = []
    for _ in range(args.rounds):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            guard.step(loss, model, opt)
        out.append((time.perf_counter() - start) / args.steps)  # each step() syncs once
    return out


def isolated_fingerprint(guard, args: argparse.Namespace) -> list[float]:
    """Per round, the mean time of the fingerprint the optimizer post-hook takes (no sync of
    its own: timed with one)."""
    import torch

    watch = guard.models.all()[0].watch  # the one model this benchmark guards
    out = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps):
            watch.after_step()
            watch.expected.flat.sum().item()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / args.steps)
    return out


def bench_ledger(run_dir: Path, samples: int = 200_000, batch: int = 256) -> dict[str, float]:
    """Seconds per sample: plain loader, tracked loader, and `record` alone."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from inspector.guard.order import OrderLedger, track

    data = TensorDataset(torch.arange(samples))

    def loop(loader) -> float:
        start = time.perf_counter()
        for _ in loader:
            pass
        return (time.perf_counter() - start) / samples

    plain = min(loop(DataLoader(data, batch_size=batch, shuffle=True)) for _ in range(3))
    tracked_times = []
    for i in range(3):
        ld = track(DataLoader(data, batch_size=batch, shuffle=True), run_dir / f"ledger-{i}")
        tracked_times.append(loop(ld))
        ld.ledger.close()
    ledger = OrderLedger(run_dir / "record-only")
    ids = [list(range(j, j + batch)) for j in range(0, samples, batch)]
    start = time.perf_counter()
    for b in ids:
        ledger.record(b)
    ledger.close()
    record = (time.perf_counter() - start) / samples
    return {"plain": plain, "tracked": min(tracked_times), "record": record}


def main() -> int:
    """Run both benchmarks and print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64,
                    help="rows per step (the guard's passes over the weights do not grow with "
                         "it; the step does)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch CPU threads (0: torch's default); on a shared machine 1 keeps "
                         "OpenMP reductions from stalling on busy cores")
    ap.add_argument("--no-ledger", action="store_true")
    ap.add_argument("--json", action="store_true",
                    help="also print the step-time medians as one last JSON line")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        med, cpu = bench_steps(args, Path(tmp) / "steps")
        off = med["off"]
        for m, v in med.items():
            by_cpu = (f"  | CPU {cpu[m] * 1000:7.2f} ms {cpu[m] / cpu['off']:6.3f}x"
                      if m in cpu else "")
            print(f"  {m:17s} {v * 1000:9.2f} ms/step  {v / off:6.3f}x off{by_cpu}")
        print(f"  guard overhead {100 * (med['guard'] / off - 1):+.2f} % from step times "
              f"({100 * (cpu['guard'] / cpu['off'] - 1):+.2f} % by CPU time; inline "
              f"{100 * (med['guard-inline'] / off - 1):+.2f} %; floor "
              f"{100 * (cpu['floor'] / cpu['off'] - 1):+.2f} %), "
              f"{100 * med['guard.step alone'] / off:.2f} % from guard.step alone, "
              f"{100 * med['fingerprint alone'] / off:.2f} % of it the post-step fingerprint "
              "(target <= 3 %)")
        if not args.no_ledger:
            led = bench_ledger(Path(tmp))
            extra = led["tracked"] - led["plain"]
            print(f"ledger: plain loader {led['plain'] * 1e6:.2f} us/sample, tracked "
                  f"{led['tracked'] * 1e6:.2f} us/sample (+{extra * 1e6:.2f}), "
                  f"OrderLedger.record alone {led['record'] * 1e6:.3f} us/sample")
        if args.json:
            print(json.dumps({"device": args.device, "rounds": args.rounds,
                              "ms_per_step": {m: v * 1000 for m, v in med.items()},
                              "cpu_ms_per_step": {m: v * 1000 for m, v in cpu.items()},
                              "overhead_percent": 100 * (med["guard"] / off - 1),
                              "inline_percent": 100 * (med["guard-inline"] / off - 1),
                              "isfinite_percent": 100 * (med["isfinite"] / off - 1),
                              "guard_step_alone_percent": 100 * med["guard.step alone"] / off}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
