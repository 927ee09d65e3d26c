"""Benchmark the fleet-scale paths: verify of a large sharded folder, --shard, S3, the exporter.

1. `verify -m SHA256SUMS DIR` of a --size GB sharded safetensors folder (8 shards; default 4 GB,
   what issue 27 names), which hashes a file per core at once (`integrity.hashing.HashAhead`),
   against `sha256sum -c SHA256SUMS` (one process, what a user runs) and against
   `openssl dgst -sha256` of the same files on every core at once (`xargs -P <cores>`):
   throughput ratio to openssl (target: at least 0.9x) and to sha256sum -c.
2. `--shard`: `verify --shard I/2` as 2 processes at once against one `verify` process over
   the same folder (the split of the 8 shards between them is printed), and `scan --shard I/2
   --results` + `merge` against one scan over --files small checkpoints.
3. `verify -m SHA256SUMS s3://bench/model/` of the same folder served by a local
   S3-compatible server (moto's server mode on 127.0.0.1, in this process) against the same
   verify of the folder on local disk (what streaming from object storage costs) and against
   what a user would otherwise run, a boto3 download of the objects then `sha256sum -c`
   (--no-s3 skips it; it needs the dev extra's moto[server], and memory for the objects).
4. The exporter's scrape latency and CPU at 8 replayed GPUs: `bench_exporter.py`, run from here
   with --scrapes (--no-exporter skips it).

Free disk (and, for 3, memory) is checked first. Medians of --runs, interleaved round by
round, warm page cache; the machine's load is printed beside each table. --json prints one
JSON document instead of the tables.

    .venv/bin/python benchmarks/bench_fleet.py [--size 4] [--runs 3] [--json]

Measured 2026-12-01 18:23 at the defaults (--size 4 --runs 3), quiet (load 1.0-1.2), the
project's bytecode compiled: verify 2.20 s against openssl dgst x2 2.06 s (0.94x its
throughput) and sha256sum -c 24.09 s; --shard over 2 processes 1.04x one process; from moto's
server 127.3 s (55x local disk: moto serves about 31 MB/s at 4 GB) against 247.9 s for a boto3
download then sha256sum -c (0.51x its time); scan of 200 checkpoints as 2 shards + merge 2.07x
one process; exporter at 8 GPUs 12.7 ms per scrape and 11.7 ms of CPU (node_exporter's
textfile collector 8.1 ms: 1.58x).
Measured 2026-12-01 at --size 0.5 --files 20 --runs 3 --scrapes 100, 2 CPUs shared with four
other helpers (load 8.4-10.8), verify hashing a file per core:
- verify 2.77 s (0.18 GB/s), openssl dgst x2 2.10 s, sha256sum -c 9.31 s: 0.76x openssl's
  throughput on all cores (target 0.9x, not met at this size and load: verify's start-up, 0.3 s
  of CPU for Python and its imports, is a fifth of the run here; its hashing costs what
  openssl's does, 0.82-0.97 s of CPU per GB against 0.9) and 3.36x sha256sum -c's;
- verify --shard over 2 processes (4 + 4 files) 4.71 s against 3.00 s in one process (1.57x:
  one process already fills both cores, and each shard pays the start-up);
- from the local S3 server 19.95 s against 2.47 s from local disk (8.06x) and 29.64 s for a
  boto3 download then sha256sum -c (ours 0.67x its time);
- scan of 20 checkpoints 10.47 s in one process, 9.84 s as 2 shards + merge (0.94x);
- exporter, 8 replayed GPUs: 27.7 ms per scrape (p95 48.1 ms), 9.7 ms of its CPU; 1 GPU
  4.7 ms and 2.2 ms (1.07 ms of CPU per GPU); node_exporter's textfile collector serving the
  same exposition 8.4 ms and 5.6 ms (ours 3.29x its latency, 1.73x its CPU); idle 0-1 %.
Measured earlier at --size-gb 0.2 --files 20 --runs 3, before verify hashed a file per core:
- load 8-10, four objects hashed at once: verify from the local S3 server 7.60 s, a boto3
  download then sha256sum -c 7.56 s (ours 1.01x its time), verify from local disk 1.61 s
  (4.71x); verify 1.94 s, sha256sum -c 3.29 s, openssl x2 0.83 s (0.43x openssl's throughput
  at that load); scan of 20 files 0.74 s in one process, 2.45 s as 2 shards + merge.
- load 9-10, one object at a time: 20.93 s from S3 against 16.27 s for boto3 + sha256sum -c
  (1.29x) and 4.35 s from local disk (4.81x).
moto's server runs in Python in this process: at this load it serves about 25-30 MB/s, which
bounds both S3 rows; not yet measured against MinIO or a real S3.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    (folder / "SHA256SUMS").write_text("".join(f"{_sha256(p)}  {p.name}\n" for p in files))
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def room_for(size_gb: float, s3: bool) -> str | None:
    """Why the machine cannot hold this run (None when it can): the folder (and, with S3, the
    boto3 download beside it) on the temp disk, and moto's in-memory copy of the objects."""
    need_disk = size_gb * 1e9 * (2 if s3 else 1) * 1.1 + 1e9
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < need_disk:
        return (f"{free / 1e9:.1f} GB free under {tempfile.gettempdir()}, {need_disk / 1e9:.1f} "
                f"GB needed; pass a smaller --size{' or --no-s3' if s3 else ''}")
    if s3:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if available < size_gb * 1e9 * 1.5:
            return (f"{available / 1e9:.1f} GB of memory free, and moto keeps the "
                    f"{size_gb:g} GB of objects in memory; pass --no-s3 or a smaller --size")
    return None


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


def verify_shard_rounds(folder: Path, runs: int, shards: int = 2) -> dict[str, float]:
    """Medians of one verify process against `shards` verify processes at once."""
    cli = str(BIN / "ckpt-inspector")
    base = [cli, "verify", "-m", "SHA256SUMS", "-q"]
    one, many = [], []
    for _ in range(runs):
        one.append(timed(base, folder))
        start = time.perf_counter()
        procs = [subprocess.Popen([*base, "--shard", f"{i}/{shards}"], cwd=folder,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for i in range(shards)]
        if any(p.wait() for p in procs):
            raise SystemExit("a verify shard failed")
        many.append(time.perf_counter() - start)
    return {"verify, 1 process": statistics.median(one),
            f"verify, {shards} shard processes": statistics.median(many)}


def shard_split(files: list[Path], folder: Path, shards: int = 2) -> list[int]:
    """How many of the files each shard owns (verify keys them by the planned path)."""
    from inspector.fleet.jobs import JobSlice

    keys = [os.path.join(os.path.abspath(folder), p.name) for p in files]
    return [sum(JobSlice(i, shards).owns(k) for k in keys) for i in range(shards)]


def exporter_rows(scrapes: int, repeats: int) -> list[dict]:
    """`bench_exporter.py`'s JSON lines (8 and 1 replayed GPUs, node_exporter where found)."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("bench_exporter.py")),
                           "--scrapes", str(scrapes), "--repeats", str(repeats)],
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


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
    ap.add_argument("--size", "--size-gb", dest="size", type=float, default=4.0,
                    help="GB of the sharded folder (default 4)")
    ap.add_argument("--files", type=int, default=200, help="small checkpoints for scan --shard")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scrapes", type=int, default=300, help="exporter scrapes per run")
    ap.add_argument("--no-s3", action="store_true", help="skip verify from a local S3 server")
    ap.add_argument("--no-exporter", action="store_true", help="skip the exporter's scrapes")
    ap.add_argument("--json", action="store_true", help="one JSON document, no tables")
    args = ap.parse_args()
    if problem := room_for(args.size, not args.no_s3):
        raise SystemExit(f"bench_fleet: {problem}")
    doc: dict = {"size_gb": args.size, "cores": CORES, "runs": args.runs,
                 "load_at_start": os.getloadavg()[0]}
    show = (lambda *a, **k: None) if args.json else print
    show(f"bench_fleet: {load_average()}")
    with scratch("bench-fleet-") as tmp:
        folder = tmp / "model"
        folder.mkdir()
        files = sharded_folder(folder, args.size)
        warm_page_cache(files)
        size = sum(p.stat().st_size for p in files)
        doc["bytes"] = size
        verify = verify_rounds(folder, files, args.runs)
        openssl = next(v for k, v in verify.items() if k.startswith("openssl"))
        doc["verify"] = _table(verify, size, openssl, "openssl_throughput_ratio", inverse=True)
        _show_table(show, f"verify of {size / 1e9:.2f} GB in {len(files)} shards, {CORES} "
                    f"cores (medians of {args.runs}", doc["verify"],
                    "openssl_throughput_ratio", "openssl's throughput")
        split = shard_split(files, folder)
        shards = verify_shard_rounds(folder, args.runs)
        doc["verify_shards"] = {**_table(shards, size, shards["verify, 1 process"],
                                         "time_ratio_to_one_process"), "split": split}
        _show_table(show, f"verify --shard over 2 processes (files {split[0]} + {split[1]}; "
                    f"medians of {args.runs}", doc["verify_shards"],
                    "time_ratio_to_one_process", "one process's time")
        if not args.no_s3:
            remote = s3_rounds(folder, files, args.runs)
            doc["s3"] = _table(remote, size, remote["verify, local disk"],
                               "time_ratio_to_local_disk")
            _show_table(show, f"verify from object storage, one process (medians of "
                        f"{args.runs}", doc["s3"], "time_ratio_to_local_disk",
                        "local disk's time", width=32)
        small = tmp / "small"
        small.mkdir()
        small_folder(small, args.files)
        work = tmp / "work"
        work.mkdir()
        scans = shard_rounds(small, work, args.runs)
        doc["scan_shards"] = _table(scans, None, scans["scan, 1 process"],
                                    "time_ratio_to_one_process")
        _show_table(show, f"scan of {args.files} checkpoints (medians of {args.runs}",
                    doc["scan_shards"], "time_ratio_to_one_process", "one process")
    if not args.no_exporter:
        rows = exporter_rows(args.scrapes, args.runs)
        doc["exporter"] = {"rows": rows, "load_after": os.getloadavg()[0]}
        show(f"telemetry --serve, 8 replayed GPUs ({args.scrapes} scrapes, medians of "
             f"{args.runs}; {_load(doc['exporter'])}):")
        for row in rows:
            show("  " + json.dumps(row))
    if args.json:
        print(json.dumps(doc, indent=1))


def _table(times: dict[str, float], size: int | None, base: float, ratio: str,
           inverse: bool = False) -> dict:
    """Rows of seconds, throughput and a ratio to `base` (throughput ratio when `inverse`),
    with the load average when they ended."""
    rows = {name: {"seconds": round(t, 3),
                   **({"gb_per_s": round(size / t / 1e9, 3)} if size else {}),
                   ratio: round(base / t if inverse else t / base, 3)}
            for name, t in times.items()}
    return {"rows": rows, "load_after": os.getloadavg()[0]}


def _show_table(show, title: str, section: dict, ratio: str, words: str,
                width: int = 28) -> None:
    """A `_table` section: its title with the load beside it, then one line per tool."""
    show(f"{title}; {_load(section)}):")
    for name, row in section["rows"].items():
        speed = f"  {row['gb_per_s']:5.2f} GB/s" if "gb_per_s" in row else ""
        show(f"  {name:<{width}} {row['seconds']:6.2f} s{speed}  {row[ratio]:4.2f}x {words}")


def _load(section: dict) -> str:
    return f"load average {section['load_after']:.2f} on {CORES} CPUs"


if __name__ == "__main__":
    main()
