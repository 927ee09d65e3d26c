"""Benchmark the fleet-scale paths: verify of a large sharded folder, and --shard across processes.

1. `verify -m SHA256SUMS DIR` of a --size-gb GB sharded safetensors folder (8 shards), all
   cores in use (`--jobs` = cores), against `sha256sum -c SHA256SUMS` (one process, what a user
   runs) and against `openssl dgst -sha256` of the same files on every core at once (xargs -P);
   throughput ratio to openssl (target: at least 0.9x) and to sha256sum -c.
2. `scan DIR --shard I/N --results` as N=2 processes at once against one process over the
   same folder of --files small checkpoints, then `merge`: wall-clock ratio.
3. `verify -m SHA256SUMS s3://bench/model/` of the same folder served by a local S3-compatible
   server (moto's server mode on 127.0.0.1, in this process) against the same verify of the
   folder on local disk (what streaming from object storage costs) and against what a user
   would otherwise run, a boto3 download of the objects then `sha256sum -c` (--no-s3 skips
   it; it needs the dev extra's moto[server]).
4. The exporter's scrape latency and CPU at 8 replayed GPUs is `benchmarks/bench_exporter.py`.

Medians of --runs, interleaved round by round, warm page cache; the machine's load is printed.

Measured 2026-12-01 at --size-gb 0.2 --files 20 --runs 3, 2 CPUs shared with other jobs:
- load 8-10, four objects hashed at once: verify from the local S3 server 7.60 s, a boto3
  download then sha256sum -c 7.56 s (ours 1.01x its time), verify from local disk 1.61 s
  (4.71x); verify 1.94 s, sha256sum -c 3.29 s, openssl x2 0.83 s (0.43x openssl's throughput
  at that load); scan of 20 files 0.74 s in one process, 2.45 s as 2 shards + merge.
- load 9-10, one object at a time: 20.93 s from S3 against 16.27 s for boto3 + sha256sum -c
  (1.29x) and 4.35 s from local disk (4.81x).
moto's server runs in Python in this process: at this load it serves about 25-30 MB/s, which
bounds both S3 rows; not yet measured at 4 GB or against MinIO or a real S3.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import load_average, scratch, warm_page_cache

BIN = Path(sys.executable).parent
CORES = len(os.sched_getaffinity(0))


def sharded_folder(folder: Path, size_gb: float, shards: int = 8) -> list[Path]:
    """`shards` safetensors files of float32 tensors, size_gb GB in all, and SHA256SUMS."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    per_shard = int(size_gb * 1e9 / shards)
    files = []
    for i in range(shards):
        state = {f"layers.{i}.{j}.weight": torch.randn(per_shard // 4 // 8, generator=gen)
                 for j in range(8)}
        path = folder / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file(state, path)
        files.append(path)
    sums = subprocess.run(["sha256sum", *(p.name for p in files)], cwd=folder,
                          capture_output=True, text=True, check=True).stdout
    (folder / "SHA256SUMS").write_text(sums)
    return files


def timed(cmd: list[str] | str, cwd: Path, shell: bool = False) -> float:
    """Wall-clock seconds of one command, which must succeed."""
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, shell=shell, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def verify_rounds(folder: Path, files: list[Path], runs: int) -> dict[str, float]:
    """Medians of verify, sha256sum -c and openssl on all cores over the same files."""
    names = " ".join(p.name for p in files)
    cmds = {
        "ckpt-inspector verify": ([str(BIN / "ckpt-inspector"), "verify", "-m", "SHA256SUMS",
                                   "--jobs", str(CORES), *(p.name for p in files)], False),
        "sha256sum -c": (["sha256sum", "-c", "--quiet", "SHA256SUMS"], False),
        f"openssl dgst x{CORES}": (f"printf '%s\\n' {names} | xargs -P {CORES} -n 1 "
                                   "openssl dgst -sha256", True),
    }
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, (cmd, shell) in cmds.items():
            times[name].append(timed(cmd, folder, shell))
    return {name: statistics.median(t) for name, t in times.items()}


def s3_rounds(folder: Path, files: list[Path], runs: int) -> dict[str, float]:
    """Medians of verify from a local S3 server against verify of the same files on disk."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        keys = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
        client = boto3.client("s3", endpoint_url=keys["AWS_ENDPOINT_URL"],
                              aws_access_key_id="bench", aws_secret_access_key="bench",
                              region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        for path in files:
            client.upload_file(str(path), "bench", f"model/{path.name}")
        cli = str(BIN / "ckpt-inspector")
        env = {**os.environ, **keys}
        # what a user would otherwise run: download the objects (boto3, as `aws s3 cp`
        # does), then sha256sum -c
        fetch = ("import boto3, sys; c = boto3.client('s3'); "
                 "[c.download_file('bench', 'model/' + n, 'dl/' + n) for n in sys.argv[1:]]")
        names = " ".join(p.name for p in files)
        cmds = {"verify, local disk": [cli, "verify", "-m", "SHA256SUMS",
                                       *(p.name for p in files)],
                "verify, local S3 server": [cli, "verify", "-m", "SHA256SUMS",
                                            "s3://bench/model/"],
                "boto3 download + sha256sum -c": (
                    f"rm -rf dl && mkdir dl && {sys.executable} -c \"{fetch}\" {names} && "
                    "cp SHA256SUMS dl/ && cd dl && sha256sum -c --quiet SHA256SUMS")}
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(runs):
            for name, cmd in cmds.items():
                start = time.perf_counter()
                subprocess.run(cmd, cwd=folder, env=env, check=True, shell=isinstance(cmd, str),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - start)
    finally:
        server.stop()
    return {name: statistics.median(t) for name, t in times.items()}


def small_folder(folder: Path, count: int) -> None:
    """`count` small torch.save checkpoints."""
    import torch

    gen = torch.Generator().manual_seed(1)
    for i in range(count):
        torch.save({"w": torch.randn(64, 64, generator=gen)}, folder / f"ckpt-{i:04d}.pt")


def shard_rounds(folder: Path, work: Path, runs: int, shards: int = 2) -> dict[str, float]:
    """Medians of one scan process against `shards` processes at once plus their merge."""
    cli = str(BIN / "ckpt-inspector")
    one, many = [], []
    for run in range(runs):
        one.append(timed([cli, "scan", str(folder), "--json"], work))
        start = time.perf_counter()
        procs = [subprocess.Popen([cli, "scan", str(folder), "--shard", f"{i}/{shards}",
                                   "--results", str(work / f"r{run}-{i}.jsonl")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for i in range(shards)]
        for p in procs:
            p.wait()
        subprocess.run([cli, "merge", *(str(work / f"r{run}-{i}.jsonl") for i in range(shards)),
                        "-o", str(work / f"merged-{run}.json")], check=True,
                       stdout=subprocess.DEVNULL)
        many.append(time.perf_counter() - start)
    return {"scan, 1 process": statistics.median(one),
            f"scan, {shards} shards + merge": statistics.median(many)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=4.0)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-s3", action="store_true", help="skip verify from a local S3 server")
    args = ap.parse_args()
    print(f"bench_fleet: {load_average()}")
    with scratch("bench-fleet-") as tmp:
        folder = tmp / "model"
        folder.mkdir()
        files = sharded_folder(folder, args.size_gb)
        warm_page_cache(files)
        size = sum(p.stat().st_size for p in files)
        verify = verify_rounds(folder, files, args.runs)
        openssl = next(v for k, v in verify.items() if k.startswith("openssl"))
        print(f"verify of {size / 1e9:.2f} GB in {len(files)} shards, {CORES} cores "
              f"(medians of {args.runs}; {load_average()}):")
        for name, seconds in verify.items():
            print(f"  {name:<24} {seconds:6.2f} s  {size / seconds / 1e9:5.2f} GB/s  "
                  f"{openssl / seconds:4.2f}x openssl's throughput")
        if not args.no_s3:
            remote = s3_rounds(folder, files, args.runs)
            disk = remote["verify, local disk"]
            print(f"verify from object storage, one process (medians of {args.runs}; "
                  f"{load_average()}):")
            for name, seconds in remote.items():
                print(f"  {name:<24} {seconds:6.2f} s  {size / seconds / 1e9:5.2f} GB/s  "
                      f"{seconds / disk:4.2f}x local disk's time")
        small = tmp / "small"
        small.mkdir()
        small_folder(small, args.files)
        work = tmp / "work"
        work.mkdir()
        shard = shard_rounds(small, work, args.runs)
        base = shard["scan, 1 process"]
        print(f"scan of {args.files} checkpoints (medians of {args.runs}; {load_average()}):")
        for name, seconds in shard.items():
            print(f"  {name:<28} {seconds:6.2f} s  {seconds / base:4.2f}x one process")


if __name__ == "__main__":
    main()
