#!/usr/bin/env bash
# The GPU-health checks that need an NVIDIA GPU, in one go (issue 6). Run from the repo root on
# a machine with a driver and a CUDA build of torch; about 5 minutes on one H200.
#   1. the gpu-marked tests;  2. real NVML sampled at 10 Hz for 30 s (samples/s, recording
#   replayed);  3. weights probe and model run on cuda:0 with fault injection (GB/s, detection);
#   4. the telemetry benchmark against the real driver and nvidia-smi.
# Logs go to $OUT (a temp folder unless set). PYTHON picks the interpreter (default python3).
set -u
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1 QT_QPA_PLATFORM=offscreen
status=0
step() { echo; echo "== $*"; }

step environment
nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,power.draw --format=csv
$PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())'

step "install the project (editable, offline, no dependencies)"
# The jailed worker runs as `python -I -m inspector.sandbox.worker`, which ignores PYTHONPATH.
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . \
  || { echo "editable install failed; using PYTHONPATH (the jailed CLI runs will fail)"; \
       export PYTHONPATH=$PWD; }

step "gpu-marked tests"
$PY -m pytest -q -m gpu -rs -p no:cacheprovider tests/test_consistency.py tests/test_telemetry.py \
  2>&1 | tee "$OUT/gpu_tests.log" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "real NVML: 30 s at 10 Hz, recorded to CSV"
$PY -m inspector telemetry --interval 0.1 --duration 30 --csv "$OUT/nvml_30s.csv" --overwrite \
  > "$OUT/telemetry.log" 2>&1
echo "telemetry exit code $? (0 no alerts, 1 alerts)"; tail -3 "$OUT/telemetry.log"
$PY - "$OUT/nvml_30s.csv" <<'EOF'
import sys
from inspector.gpu.smi_csv import read_log
from inspector.gpu.telemetry import FIELDS
log = read_log(sys.argv[1])
gpus = sorted({s.index for s in log.samples})
span = max(s.timestamp for s in log.samples) - min(s.timestamp for s in log.samples)
print(f"recorded {len(log.samples)} samples of {len(gpus)} GPU(s) over {span:.1f} s: "
      f"{len(log.samples) / span:.1f} samples/s, replayed with {log.bad_cells} bad cells")
last = log.samples[-1]
na = [f.smi for f in FIELDS if getattr(last, f.name) is None]
print(f"GPU{last.index} {last.name}: {last.temperature_gpu} C, {last.power_draw} W, "
      f"clock events {last.reasons() or 'none'}; n/a on this GPU: {', '.join(na) or 'none'}")
EOF

step "weights probe and model run on cuda:0 with fault injection"
$PY benchmarks/gpu_check.py --size-mb 1024 --repeats 10 || status=1

step "telemetry benchmark against the real driver"
$PY benchmarks/bench_telemetry.py --real-nvml --device cuda:0 --seconds 10 --probe-mb 1024 \
  --rounds 3 || status=1

echo; echo "gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL); logs in $OUT"
exit $status
