"""GPU-health figures on a machine with an NVIDIA GPU (run by benchmarks/gpu_check.sh).

On a generated checkpoint of --size-mb MB (float32 and bfloat16 matrices) and on cuda:0:
1. weights probe, clean: GB/s of weights, verdict;
2. weights probe with one bit flipped on the device mid-run: is the flip reported with the
   injected tensor, element and bit?
3. model run (tests/consistency_models.py, a wider MLP) with a flip mid-run: same question,
   plus the reload check;
4. the same probe with injection end to end through `ckpt-inspector consistency` (the jailed
   worker), whose outcome shows whether the jail lets CUDA run.
Prints one line per figure; exits 1 when any injected flip went undetected.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import REPO, TESTS, matrix_checkpoint, tests_on_path

tests_on_path()

import consistency_models  # noqa: E402

from inspector.sandbox.consistency.bitcheck import Fault, choose_device  # noqa: E402
from inspector.sandbox.consistency.model_run import model_run  # noqa: E402
from inspector.sandbox.consistency.weights_probe import weights_probe  # noqa: E402


def found(result: dict, fault: Fault) -> bool:
    """True when the resident check names exactly the injected tensor, element and bit."""
    for resident in result["resident_mismatches"]:
        for element in resident["elements"]:
            if (resident["key"], element["index"], element["bits"]) == (
                    fault.key, fault.index, [fault.bit]):
                return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    device, label = choose_device(args.device)
    print(f"device: {label}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = matrix_checkpoint(Path(tmp) / "gpu_check.pt", args.size_mb, 4096)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        start = time.perf_counter()
        clean = weights_probe(state, device, repeats=args.repeats)
        print(f"probe clean: consistent={clean['consistent']}, {clean['probed_bytes'] / 1e9:.2f}"
              f" GB of weights x {args.repeats} runs at {clean['weights_gb_per_s']:.1f} GB/s "
              f"(GEMM time), {time.perf_counter() - start:.1f} s in all")
        last = [key for key in state if key.endswith(".weight")][-1]
        fault = Fault(last, index=4096 * 1000 + 17, bit=13, iteration=args.repeats // 2)
        events: list[dict] = []
        flipped = weights_probe(state, device, repeats=args.repeats, inject=fault,
                                emit=events.append)
        detected = found(flipped, fault)
        ok &= detected and not flipped["consistent"]
        first_bad = next((e["iteration"] for e in events
                          if e.get("type") == "iteration" and e["mismatched"]), None)
        print(f"probe with bit {fault.bit} of {fault.key}[{fault.index}] flipped before run "
              f"{fault.iteration}: consistent={flipped['consistent']}, first mismatching run "
              f"{first_bad}, localised={'YES' if detected else 'NO'}")

        model_state = consistency_models.tiny_mlp(width=4096, depth=4).state_dict()
        model_path = Path(tmp) / "mlp.pt"
        torch.save(model_state, model_path)
        mfault = Fault("2.weight", index=4096 * 7 + 3, bit=20, iteration=3)
        result = model_run(lambda: torch.load(model_path, weights_only=True),
                           "consistency_models:tiny_mlp", {"width": 4096, "depth": 4},
                           [64, 16], "float32", device, repeats=6, inject=mfault,
                           python_path=[str(TESTS)])
        detected = found(result, mfault)
        ok &= detected and not result["consistent"]
        print(f"model run with bit {mfault.bit} of {mfault.key}[{mfault.index}] flipped before "
              f"run {mfault.iteration}: consistent={result['consistent']}, outputs differing in "
              f"{result['outputs'][0]['runs_mismatched']} run(s), localised="
              f"{'YES' if detected else 'NO'}, reload check "
              f"{'same' if result['reload']['consistent'] else 'DIFFERS'}")

        proc = subprocess.run(
            [sys.executable, "-m", "inspector", "consistency", str(path), "--device",
             args.device, "--repeats", "4", "--inject", f"{fault.key}:{fault.index}:{fault.bit}@3",
             "--json"], capture_output=True, text=True, cwd=REPO, timeout=600)
        if proc.stdout.strip():
            cli = json.loads(proc.stdout)
            print(f"jailed worker CLI on {args.device}: exit {proc.returncode}, "
                  f"consistent={cli['consistent']}, sandbox level "
                  f"{(cli.get('sandbox') or {}).get('level')}, localised="
                  f"{'YES' if found(cli, fault) else 'NO'}")
        else:
            print(f"jailed worker CLI on {args.device}: exit {proc.returncode}: "
                  f"{proc.stderr.strip()[-300:]}")
    print("DETECTION: " + ("every injected flip found and localised" if ok else "MISSED A FLIP"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
