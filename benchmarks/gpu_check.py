"""Every figure of the GPU half in one prepared run (benchmarks/gpu_check.sh runs it).

1. Environment: Python, torch, CUDA, cuDNN, the driver and the GPUs.
2. Real NVML: every field the tool reads, with its value or the reason it is n/a; a
   `ckpt-inspector telemetry` recording at 10 Hz for --nvml-seconds (in the background, while
   the steps below load the GPU), its sample rate and its CPU cost.
3. Consistency on --device, at --size-mb MB of weights: the weights probe (GB/s, bit-identical
   repeats under the deterministic settings) and a model run.
4. Fault injection: --faults single-bit flips across dtypes, tensors, elements and bit
   positions, each injected on the device mid-run; the detection rate (localised to tensor,
   element and bit), by dtype and bit kind, and the time to detect.
5. CUDA inside the jail: `ckpt-inspector consistency --device D` through the jailed worker,
   clean and with a flip, and the jail level it reached.
6. The training guard's step-time overhead (benchmarks/bench_guard.py, --guard-rounds).

--rehearse runs the same steps on the CPU against the stand-in pynvml of the tests, with the
sizes given (small ones by default), so the script is proven before device time is spent.
Writes figures.json, consistency.json and nvml.csv to --out; exits 1 when a flip went undetected
or a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import REPO, TESTS, matrix_checkpoint, tests_on_path

tests_on_path()

import consistency_models  # noqa: E402

from inspector.checkpoint.bitflip import layout_for  # noqa: E402
from inspector.sandbox.worker.consistency.bitcheck import Fault, choose_device  # noqa: E402
from inspector.sandbox.worker.consistency.model_run import model_run  # noqa: E402
from inspector.sandbox.worker.consistency.weights_probe import weights_probe  # noqa: E402

# The stand-in NVML of a rehearsal: two GPUs, one of which cannot report fan or memory
# temperature, so the n/a path of the field table is exercised too.
_STAND_IN = (
    "import sys; sys.path.insert(0, {tests!r}); import fake_pynvml as f; "
    "sys.modules['pynvml'] = f.FakeNvml([f.FakeGpu(0), f.FakeGpu(1, name='NVIDIA H200', "
    "unsupported={{'fan', 'memory_temperature'}})])"
)
_CAMPAIGN_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def log(line: str) -> None:
    """One line of the run's log, flushed (the shell tees it to gpu_check.log)."""
    print(line, flush=True)


def install_stand_in() -> None:
    """Make `import pynvml` answer with the tests' stand-in (rehearsal only)."""
    exec(_STAND_IN.format(tests=str(TESTS)))


def environment(device: torch.device, label: str) -> dict[str, Any]:
    """What this run ran on."""
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "device": label, "cuda_devices": torch.cuda.device_count(),
           "host": platform.node(), "kernel": platform.release()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   multiprocessors=props.multi_processor_count)
    return env


def field_table() -> dict[str, Any]:
    """Every NVML field the tool reads: its value on each GPU, or n/a with NVML's reason."""
    from inspector.gpu.nvml_source import NvmlSource, NvmlUnavailable
    from inspector.gpu.telemetry import FIELDS

    try:
        source = NvmlSource.open()
    except NvmlUnavailable as exc:
        return {"available": False, "reason": str(exc)}
    try:
        samples = source.sample()
        rows = []
        for f in FIELDS:
            values = [getattr(s, f.name) for s in samples]
            rows.append({"field": f.name, "smi": f.smi, "unit": f.unit,
                         "values": [v if v is not None else "n/a" for v in values]})
        return {"available": True, "driver": source.driver_version, "gpus": source.names,
                "fields": rows, "unavailable_getters": dict(source.unavailable),
                "xid_unsupported": list(source.xid_unsupported)}
    finally:
        source.close()


def start_recording(out: Path, seconds: float, rehearse: bool) -> subprocess.Popen:
    """`ckpt-inspector telemetry` at 10 Hz to a CSV, in a child whose CPU time is measured."""
    cli = ["telemetry", "--interval", "0.1", "--duration", str(seconds), "--csv",
           str(out / "nvml.csv"), "--overwrite"]
    prelude = _STAND_IN.format(tests=str(TESTS)) + "; " if rehearse else ""
    source = f"{prelude}import sys; from inspector.cli import main; sys.exit(main({cli!r}))"
    return subprocess.Popen([sys.executable, "-c", source], cwd=REPO,
                            stdout=open(out / "telemetry.log", "wb"), stderr=subprocess.STDOUT)


def finish_recording(proc: subprocess.Popen, out: Path, started: float) -> dict[str, Any]:
    """Wait for the recording; its sample rate, CPU cost and what the CSV replays as."""
    from inspector.gpu.smi_csv import read_log

    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    figures: dict[str, Any] = {"exit_code": proc.returncode, "wall_s": round(wall, 1),
                               "cpu_s": round(cpu, 2)}
    csv = out / "nvml.csv"
    if not csv.exists():
        figures["error"] = (out / "telemetry.log").read_text(errors="replace")[-500:]
        return figures
    replay = read_log(csv)
    stamps = sorted({s.timestamp for s in replay.samples})
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    figures.update(rows=len(replay.samples), gpus=len({s.index for s in replay.samples}),
                   span_s=round(span, 1), bad_cells=replay.bad_cells,
                   ticks_per_s=round((len(stamps) - 1) / span, 2) if span else None,
                   # over the recording's own span; it includes the interpreter's start-up
                   cpu_percent_of_one_core=round(100 * cpu / span, 2) if span else None)
    return figures


def probe_figures(state: dict, device: torch.device, repeats: int) -> dict[str, Any]:
    """The clean weights probe: throughput and whether every repeat was bit-identical."""
    start = time.perf_counter()
    result = weights_probe(state, device, repeats=repeats)
    tensors = result["tensors"]
    return {"consistent": result["consistent"],
            "bit_identical_repeats": all(t.get("repeat_mismatches", 0) == 0 for t in tensors),
            "reference_ok": all(t.get("reference_ok", True) for t in tensors),
            "probed_gb": round(result["probed_bytes"] / 1e9, 3), "repeats": repeats,
            "weights_gb_per_s": round(result["weights_gb_per_s"] or 0.0, 1),
            "wall_s": round(time.perf_counter() - start, 1)}


def localised(result: dict, fault: Fault) -> bool:
    """True when the resident check names exactly the injected tensor, element and bit."""
    return any((r["key"], e["index"], e["bits"]) == (fault.key, fault.index, [fault.bit])
               for r in result["resident_mismatches"] for e in r["elements"])


def campaign_state(side: int, per_dtype: int) -> dict[str, torch.Tensor]:
    """Weight matrices of every dtype the campaign covers, `per_dtype` of each."""
    gen = torch.Generator().manual_seed(1)
    return {f"{str(dtype).removeprefix('torch.')}.{i}.weight":
            torch.randn(side, 2 * side, generator=gen).to(dtype)
            for dtype in _CAMPAIGN_DTYPES for i in range(per_dtype)}


def fault_campaign(device: torch.device, count: int, side: int, repeats: int) -> dict[str, Any]:
    """`count` single-bit flips injected on the device mid-run, one per probe run."""
    state = campaign_state(side, per_dtype=2)
    rng = random.Random(7)
    keys = sorted(state)
    outcomes: list[dict[str, Any]] = []
    for _ in range(count):
        key = rng.choice(keys)
        tensor = state[key]
        fault = Fault(key, rng.randrange(tensor.numel()), rng.randrange(tensor.element_size() * 8),
                      iteration=rng.randrange(2, repeats + 1))
        marks: dict[str, float] = {}

        def emit(event: dict, marks: dict = marks, fault: Fault = fault) -> None:
            if event.get("type") == "injected":
                marks["injected"] = time.perf_counter()
            elif (event.get("type") == "iteration" and event["mismatched"]
                  and "output" not in marks):
                marks["output"] = event["iteration"] - fault.iteration

        result = weights_probe(state, device, repeats=repeats, inject=fault, emit=emit)
        done = time.perf_counter()
        outcomes.append({"dtype": str(tensor.dtype).removeprefix("torch."),
                         "kind": layout_for(tensor.dtype).describe(fault.bit)[0],
                         "found": localised(result, fault) and not result["consistent"],
                         "output_runs_late": marks.get("output"),
                         "detect_ms": (done - marks["injected"]) * 1e3})
    return summarise_campaign(outcomes, repeats)


def summarise_campaign(outcomes: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """Detection rate overall, by dtype and by bit kind; time from injection to the verdict."""
    def rate(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"faults": len(rows), "found": sum(r["found"] for r in rows),
                "rate": round(sum(r["found"] for r in rows) / len(rows), 4)}

    def grouped(field: str) -> dict[str, Any]:
        return {v: rate([r for r in outcomes if r[field] == v])
                for v in sorted({r[field] for r in outcomes})}

    in_output = [r for r in outcomes if r["output_runs_late"] is not None]
    return {**rate(outcomes), "repeats_per_run": repeats, "by_dtype": grouped("dtype"),
            "by_bit_kind": grouped("kind"),
            "seen_in_outputs": len(in_output),
            "seen_in_outputs_same_run": sum(r["output_runs_late"] == 0 for r in in_output),
            "detect_ms_median": round(statistics.median(r["detect_ms"] for r in outcomes), 2),
            "detect_ms_max": round(max(r["detect_ms"] for r in outcomes), 2)}


def model_faults(device: torch.device, tmp: Path, count: int, width: int) -> dict[str, Any]:
    """A clean model run (bit-identical outputs?) and `count` flips injected mid-run."""
    module = consistency_models.tiny_mlp(width=width, depth=4)
    path = tmp / "mlp.pt"
    torch.save(module.state_dict(), path)
    keys = [k for k, v in module.state_dict().items() if v.dim() == 2]

    def run(fault: Fault | None) -> dict:
        return model_run(lambda: torch.load(path, weights_only=True),
                         "consistency_models:tiny_mlp", {"width": width, "depth": 4},
                         [64, 16], "float32", device, repeats=6, inject=fault,
                         python_path=[str(TESTS)])

    clean = run(None)
    rng = random.Random(11)
    found = 0
    for _ in range(count):
        key = rng.choice(keys)
        numel = module.state_dict()[key].numel()
        fault = Fault(key, rng.randrange(numel), rng.randrange(32), iteration=rng.randrange(2, 7))
        result = run(fault)
        found += localised(result, fault) and not result["consistent"]
    return {"clean_consistent": clean["consistent"],
            "clean_bit_identical_outputs": all(o["runs_mismatched"] == 0
                                               for o in clean["outputs"]),
            "faults": count, "found": found}


def jailed(path: Path, device: str, fault: Fault | None) -> dict[str, Any]:
    """`ckpt-inspector consistency` through the jailed worker: outcome and jail level."""
    cmd = [sys.executable, "-m", "inspector", "consistency", str(path), "--device", device,
           "--repeats", "4", "--json"]
    if fault:
        cmd += ["--inject", f"{fault.key}:{fault.index}:{fault.bit}@{fault.iteration}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=400)
    figures: dict[str, Any] = {"exit_code": proc.returncode,
                               "wall_s": round(time.perf_counter() - start, 1)}
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        figures["error"] = (proc.stderr or proc.stdout).strip()[-400:]
        return figures
    sandbox = result.get("sandbox") or {}
    figures.update(consistent=result.get("consistent"), level=sandbox.get("level"),
                   missing=sandbox.get("missing"), device=result.get("device"))
    if fault:
        figures["localised"] = localised(result, fault)
    return figures


def guard_overhead(device: str, rounds: int) -> dict[str, Any]:
    """The training guard's step-time overhead on `device`, through its own benchmark."""
    bench = REPO / "benchmarks" / "bench_guard.py"
    proc = subprocess.run([sys.executable, str(bench), "--device", device, "--rounds",
                           str(rounds), "--no-ledger", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=240)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"exit_code": proc.returncode, "error": proc.stderr.strip()[-400:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--rehearse", action="store_true",
                        help="the CPU and the stand-in pynvml; small sizes unless given")
    parser.add_argument("--size-mb", type=int)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--faults", type=int)
    parser.add_argument("--model-faults", type=int, default=20)
    parser.add_argument("--nvml-seconds", type=float, default=60.0)
    parser.add_argument("--guard-rounds", type=int)
    args = parser.parse_args()
    if args.rehearse:
        install_stand_in()
    size_mb = args.size_mb or (64 if args.rehearse else 1024)
    faults = args.faults or (1000 if not args.rehearse else 200)
    args.out.mkdir(parents=True, exist_ok=True)
    device, label = choose_device(args.device)
    figures: dict[str, Any] = {"rehearsal": args.rehearse,
                               "environment": environment(device, label)}
    log(f"environment: {json.dumps(figures['environment'])}")
    recording_started = time.perf_counter()
    recording = start_recording(args.out, args.nvml_seconds, args.rehearse)
    figures["nvml_fields"] = field_table()
    for row in figures["nvml_fields"].get("fields", []):
        log(f"nvml {row['smi']:<40} {row['unit']:<6} {row['values']}")
    log(f"nvml n/a reasons: {figures['nvml_fields'].get('unavailable_getters')}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = matrix_checkpoint(tmp / "gpu_check.pt", size_mb, 4096)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        figures["probe"] = probe_figures(state, device, args.repeats)
        log(f"weights probe: {figures['probe']}")
        ok &= figures["probe"]["consistent"]
        start = time.perf_counter()
        figures["faults"] = fault_campaign(device, faults, side=256, repeats=4)
        figures["faults"]["wall_s"] = round(time.perf_counter() - start, 1)
        log(f"fault campaign: {json.dumps(figures['faults'])}")
        ok &= figures["faults"]["rate"] == 1.0
        figures["model_run"] = model_faults(device, tmp, args.model_faults,
                                            width=1024 if args.rehearse else 4096)
        log(f"model run: {figures['model_run']}")
        ok &= figures["model_run"]["found"] == figures["model_run"]["faults"]
        last = [k for k in state if k.endswith(".weight")][-1]
        fault = Fault(last, index=4096 * 1000 + 17, bit=13, iteration=3)
        figures["jail"] = {"clean": jailed(path, args.device, None),
                           "injected": jailed(path, args.device, fault)}
        log(f"jailed worker: {figures['jail']}")
        ok &= bool(figures["jail"]["injected"].get("localised"))
        consistency = {"probe": figures["probe"], "model_run": figures["model_run"],
                       "jail": figures["jail"]}
        (args.out / "consistency.json").write_text(json.dumps(consistency, indent=2))
    figures["guard"] = guard_overhead(args.device, args.guard_rounds or (3 if args.rehearse
                                                                         else 20))
    log(f"guard overhead: {figures['guard']}")
    figures["nvml_recording"] = finish_recording(recording, args.out, recording_started)
    log(f"nvml recording: {figures['nvml_recording']}")
    figures["ok"] = ok
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2, default=str))
    log("GPU CHECK: " + ("PASS" if ok else "FAIL") + f"; figures in {args.out / 'figures.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
