#!/usr/bin/env bash
# Sets up .venv and opens the app: on FILE if given, else on the built-in sample.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
if [ "$#" -eq 0 ]; then set -- --sample; fi
exec "$root/.venv/bin/ckpt-inspector" "$@"
