"""What typing a result costs: `checkpoint.results.InspectResult.from_json` and `to_json` on large
inspect contracts (the desktop app types its result on the load job's thread, the report at
its entry; neither runs on the UI thread).

Records are synthetic copies of one full tensor record of the inspect contract (statistics, a
64-bin histogram, a digest; no torch), N per result.

    .venv/bin/python benchmarks/bench_results.py [--tensors 16000]
"""

from __future__ import annotations

import argparse

from common import best_of, load_average

from inspector.checkpoint.results import InspectResult

RECORD = {"key": "", "dtype": "float32", "shape": [8, 4], "numel": 32, "nbytes": 128,
          "layout": "strided", "device": "cpu", "flags": [], "stride": [4, 1],
          "storage_offset": 0, "contiguous": True, "digest": "0" * 64, "stats_on": "values",
          "nan": 0, "inf": 0, "zeros": 0, "min": -0.48, "max": 0.45, "mean": -0.02,
          "std": 0.28, "std_sample": 0.28, "absmax": 0.48,
          "histogram": {"bins": 64, "lo": -0.48, "hi": 0.45, "counts": [1] * 64}}


def contract(tensors: int) -> dict:
    """An inspect contract of `tensors` records (one non-finite minimum among them)."""
    records = [{**RECORD, "key": f"model.layers.{i // 9}.w{i % 9}"} for i in range(tensors)]
    records[0]["min"] = "-inf"
    return {"path": "/m.pt", "size": 1, "sha256": None, "format": "pytorch-zip", "scan": {},
            "sandbox": {"level": "full", "active": []}, "digest_algorithm": "sha256",
            "tensors": records, "objects": [], "error": None, "allowed_globals": []}


def main() -> None:
    """Print the best of five from_json and to_json times per size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=16000)
    args = parser.parse_args()
    print(load_average())
    for n in (1000, args.tensors):
        data = contract(n)
        read, typed = best_of(lambda data=data: InspectResult.from_json(data))
        write, back = best_of(typed.to_json)
        assert back == data
        print(f"{n:>6} tensors: from_json {read * 1000:7.1f} ms ({read / n * 1e6:.1f} us each), "
              f"to_json {write * 1000:7.1f} ms ({write / n * 1e6:.1f} us each)")


if __name__ == "__main__":
    main()
