#!/usr/bin/env bash
# Sets up .venv with the test tools, then runs ruff and the whole test suite headless.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
export QT_QPA_PLATFORM=offscreen
# The commands the tests start, and the test modules pytest rewrites, keep their bytecode.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check .
# Two workers, a test file each at a time (its module fixtures, e.g. the warm fork server, stay
# in one process): the suite is mostly one busy core, and CI has two. CKPT_TEST_WORKERS=0 runs
# it in this process. A worker that crashes is not replaced: its test fails, the other worker
# runs the rest, and the run ends (a replacement can sit idle and hold the run open at its end).
.venv/bin/python -m pytest -n "${CKPT_TEST_WORKERS:-2}" --dist loadfile --max-worker-restart=0 \
  --durations=15 "$@"
