"""What watching a model's buffers costs the guard per step: BatchNorm's running statistics
read for their norm and largest |value| in two fused reductions, and each running variance
for its lowest value (`_buffer_values`, what the guard does; also timed without the
sign), against one reduction per buffer as the parameters are read (`_values`), and against
one `guard.step` on the same model with the buffers and without them.

The buffers are ResNet-50's: its 53 BatchNorm2d layers (64 to 2048 channels), 106 float32
buffers. The model is those layers in a Sequential over a (batch, 2048) input reshaped to each
width, so a step costs little beyond the guard's own reads: the ratios show the buffers' cost
against the guard's, not against a convolution's. Medians of --rounds, each the mean of
--calls calls, interleaved.

    .venv/bin/python benchmarks/bench_guard_buffers.py [--rounds 30] [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import load_average

# ResNet-50's BatchNorm2d widths: the stem, then each bottleneck's three (and a downsample
# for the first block of each stage)
STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))


def widths() -> list[int]:
    """The channel count of each of ResNet-50's 53 BatchNorm2d layers."""
    out = [64]
    for mid, blocks in STAGES:
        for block in range(blocks):
            out += [mid, mid, mid * 4] + ([mid * 4] if block == 0 else [])
    return out


def build():
    """A model holding ResNet-50's BatchNorm layers, each fed its own slice of one input."""
    import torch
    from torch import nn

    class Norms(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norms = nn.ModuleList(nn.BatchNorm1d(w) for w in widths())
            self.head = nn.Linear(len(self.norms), 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            outs = [norm(x[:, :norm.num_features]).mean(1) for norm in self.norms]
            return self.head(torch.stack(outs, 1))

    torch.manual_seed(0)
    return Norms(), torch.randn(32, 2048), torch.randn(32, 1)


def mean_call(fn, calls: int) -> float:
    """Mean seconds of one call over `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    """Time the four ways, interleaved, and print medians and ratios."""
    import torch
    from torch import nn

    from inspector.guard.guard import Guard, GuardConfig
    from inspector.guard.weights import fingerprint

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    model, x, y = build()
    buffers = [b for _, b in model.named_buffers() if b.is_floating_point()]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    with tempfile.TemporaryDirectory(prefix="bench-guard-buffers-") as tmp:
        watched = Guard(Path(tmp) / "with", GuardConfig())
        unwatched = Guard(Path(tmp) / "without", GuardConfig())
        bare = unwatched.models.watch(model)[0].watch  # the same guard, the buffers left out
        bare.buffers = []
        bare.names = bare.names[:len(bare.params)]
        bare.variances = []
        watch = watched.models.watch(model)[0].watch
        ways = {
            "fused (the guard)": lambda: fingerprint._buffer_values(watch.buffers,
                                                                   watch.variances),
            "fused, no variance sign": lambda: fingerprint._buffer_values(watch.buffers, []),
            "one per buffer": lambda: fingerprint._values(buffers, True),
            "guard.step, buffers watched": lambda: watched.step(loss, model, opt),
            "guard.step, buffers left out": lambda: unwatched.step(loss, model, opt),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for fn in ways.values():
            fn()  # warm-up
        for _ in range(args.rounds):
            for name, fn in ways.items():
                times[name].append(mean_call(fn, args.calls))
        watched.close()
        unwatched.close()
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"{len(buffers)} float buffers ({sum(b.numel() for b in buffers):,} values), "
          f"medians of {args.rounds} rounds x {args.calls} calls ({load_average()})")
    for name, value in med.items():
        print(f"  {name:30s} {value * 1e3:8.3f} ms")
    with_, without = med["guard.step, buffers watched"], med["guard.step, buffers left out"]
    sign = med["fused (the guard)"] - med["fused, no variance sign"]
    print(f"the {len(watch.variances)} running variances' sign: +{sign * 1e3:.3f} ms a step")
    print(f"fused / one per buffer = {med['fused (the guard)'] / med['one per buffer']:.2f}x; "
          f"guard.step with / without the buffers = {with_ / without:.2f}x "
          f"(+{(with_ - without) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
