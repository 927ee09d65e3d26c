"""A few hundred mutations of files of every format: the scan never raises, never runs
anything, gives one verdict with a one-line error, and its JSON always serialises. The 10,000-file
run with time and memory bounds is `benchmarks/bench_scan_fuzz.py`."""

from __future__ import annotations

import json
import random

import pytest
from factories import fuzz_seeds, mutate

from inspector.scan.engine import scan_file

MUTATIONS = 400


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    yield [p.read_bytes() for p in fuzz_seeds(folder)], folder
    assert not (folder / "CANARY_EXECUTED").exists()


def test_mutated_files_never_crash_the_scan(seeds):
    originals, folder = seeds
    rng = random.Random(12)
    target = folder / "mutant.bin"
    verdicts = set()
    for i in range(MUTATIONS):
        data = mutate(originals[i % len(originals)], rng)
        target.write_bytes(data)
        res = scan_file(target)
        verdicts.add(res.verdict)
        assert res.verdict in ("safe", "suspicious", "dangerous", "error"), res.verdict
        assert res.error is None or "\n" not in res.error
        json.dumps(res.to_json())
        if res.error and res.verdict != "dangerous":
            assert res.verdict == "error"
    assert not (folder / "CANARY_EXECUTED").exists()
    assert {"suspicious", "dangerous"} <= verdicts  # the mutations reach past the first bytes
