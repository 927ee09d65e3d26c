"""`ckpt-inspector consistency FILE`: repeat-inference consistency on a GPU (or the CPU).

Runs in the jailed worker; this process never imports torch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from inspector.checkpoint.results import ConsistencyResult
from inspector.cli.common import (
    EXIT_JAIL,
    JAIL_ERRORS,
    add_allow_arguments,
    add_require_jail_argument,
    add_timeout_arguments,
)
from inspector.core.termtext import agree, counted, escape
from inspector.core.vocabulary import CheckStatus

EXIT_CONSISTENT = 0
EXIT_INCONSISTENT = 1
EXIT_NOT_LOADED = 3
EXIT_NO_DEVICE = 4
EXIT_BAD_REQUEST = 5
EXIT_WORKER = 6
EXIT_BAD_WEIGHTS = 7

_CODE_EXITS = {
    "no_cuda": EXIT_NO_DEVICE,
    "bad_request": EXIT_BAD_REQUEST,
    "bad_factory": EXIT_BAD_REQUEST,
    "timeout": EXIT_WORKER,
    "idle_timeout": EXIT_WORKER,
    "worker_crashed": EXIT_WORKER,
    "worker_killed": EXIT_WORKER,
    "cpu_limit": EXIT_WORKER,
    "memory_limit": EXIT_WORKER,
    "seccomp_violation": EXIT_WORKER,
    "internal": EXIT_WORKER,
    "thread_limit": EXIT_WORKER,
    "claim_refuted": EXIT_WORKER,
    **dict.fromkeys(JAIL_ERRORS, EXIT_JAIL),
}


def _shape(text: str) -> list[int]:
    parts = [p for p in re.split(r"[,x×\s]+", text.strip()) if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape like 1,3,224,224")
    return [int(p) for p in parts]


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of keyword arguments")
    return value


def _fault(text: str) -> dict[str, Any]:
    match = re.fullmatch(r"(.+):(\d+):(\d+)(?:@(\d+))?", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY:ELEMENT:BIT[@ITERATION]")
    key, index, bit, iteration = match.groups()
    return {"key": key, "index": int(index), "bit": int(bit),
            "iteration": int(iteration) if iteration else 2}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the consistency subcommand."""
    parser.add_argument("file", metavar="FILE", help="checkpoint (.pt / .pth / .bin / .ckpt)")
    parser.add_argument("--device", default="auto",
                        help="cuda:N, cpu, or auto (cuda:0 when present, else CPU)")
    parser.add_argument("--repeats", type=int, default=10, metavar="N",
                        help="runs compared with the first (default 10, at least 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fixed inputs")
    parser.add_argument("--model", metavar="MODULE:CALLABLE",
                        help="your model factory; without it the weights probe runs")
    parser.add_argument("--model-kwargs", type=_json_object, default={}, metavar="JSON",
                        help="keyword arguments for the factory, as a JSON object")
    parser.add_argument("--model-path", action="append", default=[], metavar="DIR",
                        help="folder holding the factory's module (default: current folder)")
    parser.add_argument("--input-shape", type=_shape, metavar="SHAPE",
                        help="model input shape, e.g. 1,3,224,224")
    parser.add_argument("--input-dtype", default="float32",
                        help="model input dtype (integer dtypes give indices in [0, 100))")
    parser.add_argument("--no-reload", action="store_true",
                        help="skip the run after a fresh load of the checkpoint")
    parser.add_argument("--inject", type=_fault, metavar="KEY:ELEMENT:BIT[@ITER]",
                        help="flip one bit of one weight on the device before iteration ITER "
                             "(default 2) to prove the detector works")
    add_allow_arguments(parser)
    add_timeout_arguments(parser)
    add_require_jail_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _err(message: str) -> None:
    print(f"ckpt-inspector consistency: {message}", file=sys.stderr)


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def format_result(result: ConsistencyResult) -> list[str]:
    """The human summary of a consistency result."""
    from inspector.sandbox.host.consistency_job import describe_element

    bad = result.nonfinite_rows
    lines = [f"{result.word} on {result.device_label} ({result.repeats} runs, {result.mode})",
             f"  checked: {escape(result.checked_words)}"]
    for row in bad:
        values = counted(row["nonfinite"], "value")
        lines.append(f"  the weights hold NaN/Inf in {row['key']} ({values}, "
                     f"first at element {row['first_nonfinite']}): the device cannot be judged "
                     "on them; inspect the file, then diff it against a good copy")
    if result.injected:
        f = result.injected
        lines.append(f"  injected: bit {f['bit']} of {f['key']} element {f['index']} "
                     f"before run {f['iteration']}")
    if result.mode == "probe":
        rate = result.weights_gb_per_s
        lines.append(f"  probed {result.probed_tensors} weight matrices "
                     f"({(result.probed_bytes or 0) / 1e6:.1f} MB)"
                     + (f", {rate:.2f} GB/s of weights" if isinstance(rate, float) else ""))
    else:
        lines.append(f"  model {result.factory}: missing keys {result.missing_keys or 'none'}"
                     f", unexpected keys {result.unexpected_keys or 'none'}")
        if result.reload is not None:
            lines.append("  reload check: " + ("same output" if result.reload["consistent"]
                                               else "OUTPUT DIFFERS after a fresh load"))
    rows = result.rows
    for row in rows:
        if row["status"] != CheckStatus.FAIL:
            continue
        why = []
        if row.get("repeat_mismatches") or row.get("runs_mismatched"):
            n = row.get("repeat_mismatches") or row.get("runs_mismatched")
            why.append(f"{counted(n, 'run')} {agree(n, 'differs', 'differ')}, max |diff| "
                       f"{_fmt(row['max_abs_diff'])}")
        if row.get("reference_ok") is False:
            why.append(f"float64 reference off by {_fmt(row['reference_error_ratio'])}x "
                       "the tolerance")
        if row.get("roundtrip_ok") is False:
            why.append("host->device->host copy changed the bytes")
        lines.append(f"  FAIL {row['key']}: " + ("; ".join(why) or "see resident check"))
        first = row.get("first_mismatch")
        if first and "bits" in first:
            name = "output" if result.mode == "model" else f"{row['key']} @ x"
            lines.append(f"    first mismatch in run {first['iteration']}: "
                         + describe_element(name, first))
    for resident in result.resident_mismatches:
        lines.append(f"  device copy of {resident['key']} differs from the checkpoint in "
                     f"{counted(resident['changed_elements'], 'element')}:")
        lines += [f"    {describe_element(resident['key'], e)}" for e in resident["elements"]]
    return lines


def _on_event(event: dict[str, Any]) -> None:
    """Print an event as it arrives: only the device and the fault, which `run_consistency`
    has checked by now; a run's numbers are the worker's word until the end (`run_lines`)."""
    kind = event.get("type")
    if kind == "device":
        print(f"device: {escape(str(event['label']))}", flush=True)
    elif kind == "injected":
        print(f"  injected bit {event['bit']} into {escape(str(event['key']))}[{event['index']}]"
              f" before run {event['iteration']}", flush=True)


def run_lines(result: ConsistencyResult) -> list[str]:
    """One line per run of a checked result, under a line saying what of them was checked."""
    runs = result.iterations
    if not runs:
        return []
    zero = all(r["mismatched"] == 0 for r in runs)
    checked = result.claims is not None and result.claims.checked
    head = ("  every run identical to the first (as the rows checked here say)" if zero and checked
            else "  per run, as reported by the jailed worker (the count of runs that differ "
            "and the largest |diff| agree with its rows)")
    return [head] + [f"    {r['phase']} run {r['iteration']}: {r['mismatched']} mismatched, "
                     f"max |diff| {_fmt(float(r['max_abs_diff']))}, "
                     f"{r['seconds'] * 1000:.1f} ms" for r in runs]


def run(args: argparse.Namespace) -> int:
    """Run the check in the jailed worker; exit 0 consistent, 1 inconsistent."""
    from inspector.sandbox.host.client import SandboxError
    from inspector.sandbox.host.consistency_job import ConsistencyRequest, run_consistency

    if args.repeats < 2:
        _err("--repeats must be at least 2")
        return 2
    if args.model and not args.input_shape:
        _err("--model needs --input-shape")
        return 2
    spec = ConsistencyRequest(
        path=args.file, device=args.device, repeats=args.repeats, seed=args.seed,
        inject=args.inject, model=args.model, model_kwargs=args.model_kwargs,
        input_shape=args.input_shape or [], input_dtype=args.input_dtype,
        reload=not args.no_reload, python_path=args.model_path or ["."],
        allow_globals=args.allow_global,
    )
    try:
        result = run_consistency(spec, on_event=None if args.json else _on_event,
                                 timeout=args.timeout)
    except SandboxError as exc:
        _err(f"{args.file}: {exc.message}")
        return _CODE_EXITS.get(exc.code, EXIT_NOT_LOADED)
    typed = ConsistencyResult.from_json(result)
    if args.json:
        print(json.dumps(result, allow_nan=False))
    else:
        print("\n".join(run_lines(typed) + format_result(typed)))
    if not typed.consistent:
        return EXIT_INCONSISTENT
    return EXIT_BAD_WEIGHTS if typed.nonfinite_rows else EXIT_CONSISTENT
