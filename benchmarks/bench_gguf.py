"""Benchmark reading a GGUF file's header, against llama.cpp's own Python reader, in one run:

(a) `formats.gguf_header.read` (what `scan` reads, with every bound checked);
(b) `scan_file` (the header, the chat template through Jinja2's parser, and the scan's other
    readings of the bytes);
(c) `gguf.GGUFReader(path)`, what `gguf-dump` and a user's script read a GGUF file with.

The file is shaped like a llama-3 header: a 128,256-token vocabulary (token strings, scores,
types), 280,000 merges, a chat template, and 291 tensor infos of small Q4_0 tensors (the data
section is not what is measured). Each reader runs in this process after one warm-up; medians
of --repeats.

Measured (8.9 MiB header, 2 CPUs shared with other work, one timed run after a warm-up):
`gguf_header.read` 494 ms, `scan_file` 476 ms, `gguf.GGUFReader` 47.2 s (0.01x its time: it
builds a NumPy array per string of the vocabulary).

    .venv/bin/python benchmarks/bench_gguf.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import scratch


def _build(path, vocab: int, merges: int, layers: int) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(vocab)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(vocab)])
    w.add_array("tokenizer.ggml.token_type", [1] * vocab)
    w.add_array("tokenizer.ggml.merges", [f"a{i} b{i}" for i in range(merges)])
    w.add_chat_template("{%- set ns = namespace(x=1) %}{% for m in messages %}"
                        "{{ m['role'] + ': ' + m['content'] | trim }}{% endfor %}")
    blocks = np.zeros((1, 18), dtype=np.uint8)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", blocks, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _median(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import gguf

    from inspector.formats import gguf_header
    from inspector.scan.engine import scan_file

    with scratch("gguf") as folder:
        path = folder / "llama-shaped.gguf"
        _build(path, 128_256, 280_000, 291)
        data = path.read_bytes()
        ours = _median(lambda: gguf_header.read(data), args.repeats)
        scan = _median(lambda: scan_file(path), args.repeats)
        ref = _median(lambda: gguf.GGUFReader(str(path)), args.repeats)
        print(f"file {len(data) / 2**20:.1f} MiB, medians of {args.repeats}")
        print(f"gguf_header.read   {ours * 1000:8.1f} ms  ({ours / ref:.2f}x GGUFReader)")
        print(f"scan_file          {scan * 1000:8.1f} ms  ({scan / ref:.2f}x GGUFReader)")
        print(f"gguf.GGUFReader    {ref * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
