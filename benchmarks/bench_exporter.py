"""Benchmark `telemetry --serve`: scrape latency and CPU per scrape at 8 GPUs replayed.

The exporter runs as its own process (`ckpt-inspector telemetry --replay LOG --serve`) over a
generated 8-GPU log (and, for the per-GPU cost, a 1-GPU log), with and without a run journal
of --saves checkpoint records (--run). Each configuration is scraped --scrapes times in a row
with the Accept header Prometheus sends (OpenMetrics), after --warmup scrapes. Measured: the
median and 95th-percentile latency of one scrape (request to last byte), the exporter's CPU
time per scrape (utime + stime from /proc/PID/stat over the scrapes, minus what the same
process used over the same wall time with no scrape), and its idle CPU % of one core (the
replay tick and journal refresh every --interval).

What a user would otherwise run without a GPU exporter: an nvidia-smi script writing a
`.prom` file for node_exporter's textfile collector. Where `prometheus-node-exporter` is
installed (Debian's package; `.ci/run` installs only Prometheus itself), the same 8-GPU
exposition is served that way (`--collector.disable-defaults --collector.textfile`) and
scraped the same way, for the ratio. That side leaves out the nvidia-smi runs the script
would also cost.

Measured (2 CPUs shared with other work, medians of 3 runs of 300 scrapes), two runs:
- load 6.6-7.1, 24 fields: 8 GPUs 27.2 ms per scrape (p95 43.8 ms) and 8.1 ms of the
  exporter's CPU, 51.6 KB; 1 GPU 3.5 ms and 2.0 ms, so 0.87 ms of CPU and 5.9 KB per GPU per
  scrape; with a run of 200 saves beside the 8 GPUs 24.9 ms and 8.7 ms; node_exporter's
  textfile collector serving the same 8-GPU exposition 13.0 ms and 5.8 ms: ours 2.09x its
  latency, 1.40x its CPU;
- load 12.6-14.0, 27 fields (the violation times and recovery action added, n/a in this
  log): 8 GPUs 53.7 ms and 10.2 ms; 1 GPU 8.0 ms and 2.6 ms (1.10 ms of CPU per GPU); with
  the run 38.9 ms and 9.6 ms; node_exporter 17.7 ms and 6.3 ms: 3.04x latency, 1.63x CPU.
Idle (no scrapes; a replay tick and a journal refresh every second) 0-1.3 % of a core. At
Prometheus's default 15 s scrape, 8 GPUs cost under 0.1 % of one core. Latency beyond the CPU
time is waiting for a core on this loaded box. Before TCP_NODELAY an 8-GPU scrape took 41.5 ms
for 12.2 ms of CPU (Nagle against delayed ACK; one run, load 4.7).

    .venv/bin/python benchmarks/bench_exporter.py [--scrapes 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import PY, load_average, tests_on_path

tests_on_path()

from fleet_fixtures import write_replay  # noqa: E402

from inspector.run import journal  # noqa: E402

ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
          "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
TICKS = 3600  # an hour at 1 Hz: the replay keeps stepping through the whole run
HZ = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def _scrape(url: str) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as reply:
        size = len(reply.read())
    return time.perf_counter() - t0, size


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            _scrape(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} never answered") from None
            time.sleep(0.1)


def _measure(proc: subprocess.Popen, url: str, args: argparse.Namespace) -> dict:
    _wait_up(url)
    for _ in range(args.warmup):
        _scrape(url)
    c0, w0 = _cpu_s(proc.pid), time.perf_counter()
    time.sleep(args.idle)
    idle_rate = (_cpu_s(proc.pid) - c0) / (time.perf_counter() - w0)
    latencies, size = [], 0
    c0, w0 = _cpu_s(proc.pid), time.perf_counter()
    for _ in range(args.scrapes):
        latency, size = _scrape(url)
        latencies.append(latency)
    busy, wall = _cpu_s(proc.pid) - c0, time.perf_counter() - w0
    latencies.sort()
    return {
        "median_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
        "cpu_ms_per_scrape": 1000 * max(0.0, busy - idle_rate * wall) / args.scrapes,
        "idle_cpu_percent": 100 * idle_rate,
        "bytes": size,
    }


def _ours(log: Path, run: Path | None, args: argparse.Namespace) -> dict:
    port = _free_port()
    cmd = [PY, "-I", "-m", "inspector", "telemetry", "--replay", str(log), "--serve",
           f"127.0.0.1:{port}", "--interval", str(args.interval), "--hostname", "bench"]
    if run:
        cmd += ["--run", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _measure(proc, f"http://127.0.0.1:{port}/metrics", args)
    finally:
        proc.terminate()
        proc.wait(30)


def _node_exporter(exe: str, exposition: bytes, folder: Path, args: argparse.Namespace) -> dict:
    textfiles = folder / "textfile"
    textfiles.mkdir(exist_ok=True)
    # node_exporter's textfile parser reads the Prometheus text format, not OpenMetrics.
    (textfiles / "gpu.prom").write_bytes(exposition)
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfiles}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _measure(proc, f"http://127.0.0.1:{port}/metrics", args)
    finally:
        proc.terminate()
        proc.wait(30)


def _run_journal(folder: Path, saves: int) -> Path:
    run = folder / "run"
    now = time.time()
    for step in range(saves):
        journal.append(journal.journal_path(run), "ledger.save", {
            "step": step * 100, "time": now - (saves - step) * 600, "path": f"step{step}.pt",
            "size": 1, "sha256": "0" * 64, "verified": True})
    return run


def _text_exposition(log: Path) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest

    from inspector.gpu.exporter import Exporter, ticks
    from inspector.gpu.smi_csv import read_log

    exporter = Exporter("bench")
    exporter.update(ticks(read_log(log).samples)[0])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return generate_latest(registry)


def main() -> None:
    """Run every configuration --repeats times and print medians and ratios as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--idle", type=float, default=3.0, help="seconds of idle CPU measurement")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--saves", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(load_average(), file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix="bench-exporter-"))
    try:
        log8 = write_replay(folder / "gpu8.csv", gpus=8, ticks=TICKS, dbe_from=None)
        log1 = write_replay(folder / "gpu1.csv", gpus=1, ticks=TICKS, dbe_from=None)
        run = _run_journal(folder, args.saves)
        configs = {"ours, 8 GPUs": (log8, None), "ours, 1 GPU": (log1, None),
                   f"ours, 8 GPUs + a run of {args.saves} saves": (log8, run)}
        node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        rows: dict[str, list[dict]] = {name: [] for name in configs}
        if node_exporter:
            rows["node_exporter textfile, 8 GPUs"] = []
        for _ in range(args.repeats):
            for name, (log, with_run) in configs.items():
                rows[name].append(_ours(log, with_run, args))
            if node_exporter:
                rows["node_exporter textfile, 8 GPUs"].append(
                    _node_exporter(node_exporter, _text_exposition(log8), folder, args))
        result = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
                  for name, runs in rows.items()}
        eight, one = result["ours, 8 GPUs"], result["ours, 1 GPU"]
        result["per GPU (8 minus 1, over 7)"] = {
            key: (eight[key] - one[key]) / 7 for key in ("median_ms", "cpu_ms_per_scrape",
                                                          "bytes")}
        if node_exporter:
            other = result["node_exporter textfile, 8 GPUs"]
            result["ratio ours/node_exporter, 8 GPUs"] = {
                key: eight[key] / other[key] for key in ("median_ms", "cpu_ms_per_scrape")
                if other[key]}
        for name, numbers in result.items():
            print(json.dumps({"config": name, **{k: round(v, 3) for k, v in numbers.items()}}))
        print(load_average(), file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
