#!/usr/bin/env bash
# Creates .venv with the pinned versions in constraints.txt and installs the project into it.
# Usage: scripts/setup.sh [extra]   (extra "dev" adds the test tools)
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip -c constraints.txt
spec="."
[ -n "$extra" ] && spec=".[$extra]"
.venv/bin/python -m pip install -q -c constraints.txt -e "$spec"
# The project's bytecode, written now: an environment with PYTHONDONTWRITEBYTECODE set (or a
# read-only checkout) would otherwise compile every module from source at each start, about
# 0.4 s per command (and per test that runs one). Python rechecks each file's mtime.
.venv/bin/python -m compileall -q inspector >/dev/null
