"""A pickle behind 48 MiB of padding, compressed: the scan's cost of reading it to its end
against the loader's own decompress and load, the same run (issue 34).

    .venv/bin/python benchmarks/bench_scan_padded.py [--repeats 5] [--padding-mib 48]

For gzip and zstd, the file is one pickle: a BINBYTES8 of `--padding-mib` MiB of zeros, popped,
then a small dict (benign, so the loader can run it here). Timed in this process, alternately,
median of `--repeats`: `scan_file` with the walk alone (`readings.set_reader(None)`: the
static reading that finds a payload), against the loader a user would run: `joblib.load` for
gzip and `pickle.load` over zstandard's reader for zstd. Reported: both medians, the ratio
scan / loader, the verdict, and how many bytes the scan passed over.
"""

from __future__ import annotations

import argparse
import gzip
import io
import pickle
import statistics
import struct
import time

from common import load_average, scratch


def padded(padding: int) -> bytes:
    """A protocol 4 pickle: `padding` zero bytes (popped), then {"step": 1}."""
    tail = pickle.dumps({"step": 1}, protocol=4)[2:]  # its own PROTO dropped
    return b"\x80\x04\x8e" + struct.pack("<Q", padding) + bytes(padding) + b"0" + tail


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def _load_gzip(path):
    import joblib

    return joblib.load(path)


def _load_zstd(path):
    import zstandard

    with io.BufferedReader(zstandard.open(path, "rb")) as fh:
        return pickle.load(fh)


KINDS = {"gzip": (gzip.compress, _load_gzip), "zstd": (_zstd, _load_zstd)}


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    """Time the scan and the loader on each compression, the same run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--padding-mib", type=int, default=48)
    args = ap.parse_args()
    from inspector.scan import readings
    from inspector.scan.engine import scan_file

    readings.set_reader(None)
    print(f"load average {load_average()}, padding {args.padding_mib} MiB, "
          f"{args.repeats} repeats")
    with scratch("bench-padded-") as folder:
        for kind, (compress, load) in KINDS.items():
            path = folder / f"padded.{kind}"
            path.write_bytes(compress(padded(args.padding_mib << 20)))
            scans, loads = [], []
            for _ in range(args.repeats):
                t, res = _timed(scan_file, path)
                scans.append(t)
                t, value = _timed(load, path)
                loads.append(t)
                assert value == {"step": 1}
            passed = next((f.message.split(" ", 1)[0] for f in res.findings
                           if f.code == "stream-passed-over"), "0")
            scan_s, load_s = statistics.median(scans), statistics.median(loads)
            print(f"{kind:5} {path.stat().st_size:>9} bytes: scan {scan_s * 1000:7.1f} ms, "
                  f"loader {load_s * 1000:7.1f} ms, ratio {scan_s / load_s:.2f}x; verdict "
                  f"{res.verdict}, passed over {passed} bytes, codes "
                  f"{sorted({f.code for f in res.findings})}")


if __name__ == "__main__":
    main()
