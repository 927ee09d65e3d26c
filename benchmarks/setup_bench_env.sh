#!/usr/bin/env bash
# Creates benchmarks/.bench-venv holding the peer scanners (picklescan, modelscan) that
# benchmarks/bench_scan.py compares against. They never go into the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv benchmarks/.bench-venv
benchmarks/.bench-venv/bin/python -m pip install -q -c constraints.txt \
    -r benchmarks/requirements-bench.txt
