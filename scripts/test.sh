#!/usr/bin/env bash
# Sets up .venv with the test tools, then runs ruff and the whole test suite headless.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
export QT_QPA_PLATFORM=offscreen
.venv/bin/ruff check .
.venv/bin/python -m pytest --durations=15 "$@"
