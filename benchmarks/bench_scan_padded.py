"""A pickle behind 48 MiB of padding, compressed: the scan's cost of reading it to its end
against the loader's own decompress and load, the same run (issue 34).

    .venv/bin/python benchmarks/bench_scan_padded.py [--repeats 5] [--padding-mib 48]

For gzip and zstd, the file is one pickle: a BINBYTES8 of `--padding-mib` MiB of zeros, popped,
then a small dict (benign, so the loader can run it here); for `zip-deflate`, a torch zip whose
deflated `data.pkl` is that pickle. Timed in this process, alternately, median of `--repeats`:
`scan_file` with the walk alone (`readings.set_reader(None)`: the static reading that finds a
payload), against the loader a user would run: `joblib.load` for gzip, `pickle.load` over
zstandard's reader for zstd, `torch.load(weights_only=False)` for the zip. Reported: both
medians, the ratio scan / loader, the verdict, and how many bytes the scan passed over.
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


def _torch_zip(data: bytes) -> bytes:
    """A torch.save zip of {} whose data.pkl is `data`, deflated."""
    import zipfile

    import torch

    src = io.BytesIO()
    torch.save({}, src)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src.getvalue())) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            pkl = info.filename.endswith("/data.pkl")
            zout.writestr(zipfile.ZipInfo(info.filename), data if pkl else zin.read(info),
                          compress_type=zipfile.ZIP_DEFLATED if pkl else zipfile.ZIP_STORED)
    return out.getvalue()


def _load_torch(path):
    import torch

    return torch.load(path, weights_only=False)


KINDS = {"gzip": (gzip.compress, _load_gzip), "zstd": (_zstd, _load_zstd),
         "zip-deflate": (_torch_zip, _load_torch)}


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
            print(f"{kind:11} {path.stat().st_size:>9} bytes: scan {scan_s * 1000:7.1f} ms, "
                  f"loader {load_s * 1000:7.1f} ms, ratio {scan_s / load_s:.2f}x; verdict "
                  f"{res.verdict}, passed over {passed} bytes, codes "
                  f"{sorted({f.code for f in res.findings})}")


if __name__ == "__main__":
    main()
