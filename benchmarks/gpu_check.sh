#!/usr/bin/env bash
# The GPU half's checks in one prepared run, within 8 minutes on one H200 and with no network.
#   benchmarks/gpu_check.sh              on a machine with an NVIDIA GPU (device cuda:0)
#   benchmarks/gpu_check.sh --rehearse   here: the CPU and the tests' stand-in pynvml
# Installs the project from the working tree with no dependencies (the jailed worker runs as
# `python -I`, which ignores PYTHONPATH), then runs benchmarks/gpu_check.py and the gpu-marked
# tests. Everything goes to $OUT (a temp folder unless set): gpu_check.log, figures.json,
# consistency.json, nvml.csv (10 Hz), gpu_tests.log. PYTHON picks the interpreter.
set -u
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 QT_QPA_PLATFORM=offscreen
cd "$(dirname "$0")/.."
exec > >(tee "$OUT/gpu_check.log") 2>&1
status=0
step() { echo; echo "== $(date -u +%T) $*"; }

args=()
if [ "${1:-}" = "--rehearse" ]; then
  args=(--rehearse --device cpu --nvml-seconds "${NVML_SECONDS:-20}")
else
  args=(--device cuda:0 --nvml-seconds "${NVML_SECONDS:-60}")
  step environment
  nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,power.draw,ecc.mode.current --format=csv \
    || echo "nvidia-smi: not available"
  step "install the project (editable, offline, no dependencies)"
  $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . \
    || { echo "editable install failed; using PYTHONPATH (the jailed runs will fail)"; \
         export PYTHONPATH=$PWD; }
fi

step "figures: NVML fields and recording, consistency, fault injection, CUDA in the jail"
timeout 420 $PY benchmarks/gpu_check.py --out "$OUT" "${args[@]}" || status=1

if [ "${1:-}" != "--rehearse" ]; then
  step "gpu-marked tests"
  timeout 90 $PY -m pytest -q -m gpu -rs -p no:cacheprovider tests/test_consistency.py \
    tests/test_telemetry.py > "$OUT/gpu_tests.log" 2>&1 || status=1
  tail -5 "$OUT/gpu_tests.log"
fi

echo; echo "gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL); everything in $OUT"
exit $status
