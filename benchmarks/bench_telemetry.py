"""Benchmark the GPU-health code: sampler overhead, log replay, and weights-probe throughput.

1. Sampler overhead at 10 Hz: the telemetry Sampler (NVML mapping, ring buffer, alert rules,
   XID watcher thread) against the stand-in pynvml of the tests (tests/fake_pynvml.py) with
   1 and 8 GPUs, as CPU % of one core over --seconds, minus an idle baseline measured the
   same way. Target: < 2 %. With --real-nvml the real driver is sampled instead (GPU machine).
2. Replay: parse a recorded 1 h x 8 GPU nvidia-smi style log (rows/s).
3. Weights probe: GB of weights per second through repeated W @ x on --device (CPU here,
   cuda:0 on a GPU machine), in process, against a plain loop a user would write (W @ x
   repeated, torch.equal with the first), on a generated checkpoint of --probe-mb MB; and the
   same check end to end through `ckpt-inspector consistency` (jailed worker, start-up
   included).

    .venv/bin/python benchmarks/bench_telemetry.py [--seconds 20] [--probe-mb 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, load_average, matrix_checkpoint, tests_on_path

tests_on_path()  # the stand-in pynvml lives with the tests


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_percent(run_for: float, start=None, stop=None) -> float:
    """CPU % of one core this process used over `run_for` seconds of wall time."""
    if start:
        start()
    c0, w0 = _cpu(), time.perf_counter()
    time.sleep(run_for)
    c1, w1 = _cpu(), time.perf_counter()
    if stop:
        stop()
    return 100 * (c1 - c0) / (w1 - w0)


def sampler_overhead(seconds: float, gpus: int, real: bool) -> dict:
    """CPU % of one core for sampling `gpus` GPUs at 10 Hz, idle baseline subtracted."""
    from inspector.gpu.nvml_source import NvmlSource
    from inspector.gpu.sampler import Sampler
    from inspector.gpu.telemetry import TelemetryStore

    if not real:
        from fake_pynvml import FakeGpu, FakeNvml

        sys.modules["pynvml"] = FakeNvml([FakeGpu(i) for i in range(gpus)])
    source = NvmlSource.open()
    store = TelemetryStore()
    sampler = Sampler(source, store, interval=0.1)
    idle = _cpu_percent(seconds / 2)
    busy = _cpu_percent(seconds, sampler.start, sampler.stop)
    source.close()
    sys.modules.pop("pynvml", None)
    ticks = sampler.ticks
    return {"gpus": len(source.names), "ticks": ticks, "samples_per_s": ticks * len(source.names)
            / seconds, "cpu_percent": busy - idle, "idle_percent": idle}


def nvidia_smi_overhead(seconds: float) -> float:
    """CPU % of one core nvidia-smi itself uses logging the same fields at 10 Hz."""
    from inspector.gpu.telemetry import FIELDS

    query = ",".join(["timestamp", "index"] + [f.smi for f in FIELDS])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv", "-lms", "100"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    proc.terminate()
    proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return 100 * used / (time.perf_counter() - start)


def replay_speed(folder: Path) -> dict:
    """Rows per second parsing a 1 h x 8 GPU log written in nvidia-smi's columns."""
    import numpy as np

    from inspector.gpu.alerts import ingest
    from inspector.gpu.smi_csv import read_log, write_log
    from inspector.gpu.telemetry import GpuSample, TelemetryStore

    rng = np.random.default_rng(0)
    samples = [GpuSample(1.79e9 + t, g, "NVIDIA H100 80GB HBM3",
                         temperature_gpu=float(rng.integers(30, 80)),
                         power_draw=float(rng.normal(400, 50)), utilization_gpu=97.0,
                         memory_used=70000.0, memory_total=81559.0, clock_sm=1980.0,
                         ecc_uncorrected_volatile=0.0, pcie_replay=0.0)
               for t in range(3600) for g in range(8)]
    path = folder / "replay.csv"
    write_log(path, samples)
    start = time.perf_counter()
    log = read_log(path)
    parsed = time.perf_counter() - start
    store = TelemetryStore(capacity=3600)
    start = time.perf_counter()
    ingest(store, log.samples)
    stored = time.perf_counter() - start
    return {"rows": len(log.samples), "parse_rows_per_s": len(log.samples) / parsed,
            "ingest_rows_per_s": len(log.samples) / stored, "bytes": path.stat().st_size}


def plain_loop(state: dict, device, repeats: int) -> float:
    """What a user would write: W @ x repeated, torch.equal with the first; GB/s of weights."""
    import torch

    mats = [(t.reshape(t.shape[0], -1).to(device), torch.randn(t[0].numel(), 8, dtype=t.dtype,
                                                                device=device))
            for t in state.values() if t.is_floating_point() and t.dim() >= 2]
    nbytes = sum(m.nbytes for m, _ in mats)
    start = time.perf_counter()
    for m, x in mats:
        first = m @ x
        for _ in range(repeats - 1):
            assert torch.equal(m @ x, first)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return nbytes * repeats / (time.perf_counter() - start) / 1e9


def probe_speed(path: Path, device_name: str, repeats: int, rounds: int) -> dict:
    """The weights probe in process and through the CLI, against the plain loop."""
    import torch

    from inspector.sandbox.worker.consistency.bitcheck import choose_device
    from inspector.sandbox.worker.consistency.weights_probe import weights_probe

    device, label = choose_device(device_name)
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    probe, plain, walls = [], [], []
    for _ in range(rounds):  # interleaved so background load hits both alike
        start = time.perf_counter()
        result = weights_probe(state, device, repeats=repeats)
        walls.append(time.perf_counter() - start)
        probe.append(result["weights_gb_per_s"])
        plain.append(plain_loop(state, device, repeats))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "inspector", "consistency", str(path),
                           "--device", device_name, "--repeats", str(repeats), "--json"],
                          capture_output=True, text=True, cwd=REPO)
    cli_wall = time.perf_counter() - start
    cli = json.loads(proc.stdout) if proc.returncode in (0, 1) and proc.stdout else {}
    return {
        "device": label,
        "weights_gb": result["probed_bytes"] / 1e9,
        "probe_gb_per_s": statistics.median(probe),
        "plain_gb_per_s": statistics.median(plain),
        "probe_wall_s": statistics.median(walls),
        "cli_wall_s": cli_wall,
        "cli_consistent": cli.get("consistent"),
        "cli_error": None if cli else (proc.stderr.strip().splitlines() or ["?"])[-1],
        "cli_startup_s": (cli.get("timing") or {}).get("startup_s"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--probe-mb", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--real-nvml", action="store_true", help="sample the real driver")
    args = parser.parse_args()
    print(f"machine: {load_average()}")
    for gpus in (1, 8):
        r = sampler_overhead(args.seconds, gpus, args.real_nvml)
        verdict = "OK" if r["cpu_percent"] < 2 else "OVER TARGET"
        kind = "real NVML" if args.real_nvml else "stand-in"
        print(f"sampler @10 Hz, {r['gpus']} GPU(s) ({kind}): {r['cpu_percent']:.2f} % of one "
              f"core (idle {r['idle_percent']:.2f} %), "
              f"{r['samples_per_s']:.1f} samples/s -> {verdict} (target < 2 %)")
        if args.real_nvml:
            break
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        r = replay_speed(folder)
        print(f"replay: {r['rows']} rows ({r['bytes'] / 1e6:.1f} MB) parsed at "
              f"{r['parse_rows_per_s']:,.0f} rows/s, stored + alert rules at "
              f"{r['ingest_rows_per_s']:,.0f} rows/s")
        path = matrix_checkpoint(folder / "probe.pt", args.probe_mb, 2048)
        r = probe_speed(path, args.device, args.repeats, args.rounds)
        print(f"weights probe on {r['device']}: {r['weights_gb']:.2f} GB of weights x "
              f"{args.repeats} runs: {r['probe_gb_per_s']:.2f} GB/s (median of {args.rounds}; "
              f"{r['probe_wall_s']:.1f} s with round trip, reference and resident checks)")
        print(f"plain W@x + torch.equal loop: {r['plain_gb_per_s']:.2f} GB/s -> probe/plain "
              f"ratio {r['probe_gb_per_s'] / r['plain_gb_per_s']:.2f}")
        if r["cli_error"]:
            print(f"ckpt-inspector consistency (jailed worker): failed: {r['cli_error']}")
        else:
            print(f"ckpt-inspector consistency (jailed worker) end to end: {r['cli_wall_s']:.1f} s"
                  f" (worker start-up {r['cli_startup_s'] or 0:.1f} s), consistent="
                  f"{r['cli_consistent']}")
    if shutil.which("nvidia-smi") and args.real_nvml:
        smi = nvidia_smi_overhead(args.seconds)
        print(f"peer: nvidia-smi --query-gpu (same fields) -lms 100: {smi:.2f} % of one core")
    else:
        print("peer: nvidia-smi -lms 100 not run (no NVIDIA driver on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
