"""Speed a user notices: a 5,000-tensor checkpoint scans in under 100 ms, in process."""

from __future__ import annotations

import time

from factories import save_large_checkpoint

from inspector.core.scan import scan_file


def test_5000_tensor_checkpoint_under_100ms(tmp_path):
    path = save_large_checkpoint(tmp_path / "big.pt", 5000)
    first = scan_file(path)
    assert (first.verdict, first.weights_only_ok) == ("safe", True)
    assert first.pickles[0]["opcodes"] > 150_000
    # CPU time of this thread (torch's idle worker threads would inflate process time), best
    # of up to 30 runs: on a shared 2-core CI box other jobs slow single runs down by half
    best = float("inf")
    for _ in range(30):
        best = min(best, _cpu(lambda: scan_file(path)))
        if best < 0.100:
            break
    print(f"\n5,000-tensor scan: {best * 1000:.1f} ms CPU")
    assert best < 0.100


def _cpu(fn) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0
