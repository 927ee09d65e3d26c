"""`ckpt-inspector diff A B [--json]`: tensor-by-tensor comparison with bit-flip forensics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.cli.common import (
    EXIT_JAIL,
    JAIL_ERRORS,
    add_allow_arguments,
    add_quiet_argument,
    add_require_jail_argument,
    progress_events,
    stderr_progress,
)
from inspector.core.termtext import escape

EXIT_IDENTICAL = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2

_SHOWN_FLIPS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `diff`."""
    parser.add_argument("a", type=Path, metavar="A", help="first checkpoint (any format)")
    parser.add_argument("b", type=Path, metavar="B", help="second checkpoint (any format)")
    parser.add_argument("--json", action="store_true", help="print the JSON diff contract")
    add_allow_arguments(parser)
    add_quiet_argument(parser)
    add_require_jail_argument(parser)
    parser.epilog = ("exit status: 0 identical tensors, 1 different, 2 a file could not be "
                     "read, 9 the jail is weaker than --require-jail or the worker broke the "
                     "protocol")


def run(args: argparse.Namespace) -> int:
    """Diff in the jailed worker and print the result."""
    from inspector.sandbox.client import SandboxError, diff_files

    for path in (args.a, args.b):
        if not path.is_file():
            print(f"ckpt-inspector diff: {path}: no such file", file=sys.stderr)
            return EXIT_ERROR
    try:
        with stderr_progress("comparing", args.quiet) as progress:
            result = diff_files(
                args.a,
                args.b,
                allow_globals=args.allow_global,
                on_event=progress_events(progress, "diff"),
            )
    except SandboxError as exc:
        print(f"ckpt-inspector diff: {exc.message}", file=sys.stderr)
        return EXIT_JAIL if exc.code in JAIL_ERRORS else EXIT_ERROR
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_verify_result(result)
    return EXIT_IDENTICAL if result["identical"] else EXIT_DIFFERENT



def print_verify_result(result: dict) -> None:
    """Totals, one sentence per key that differs, and the first flips of each tensor."""
    a, b = result["a"], result["b"]
    print(escape(f"A: {a['path']} ({a['format']})"))
    print(escape(f"B: {b['path']} ({b['format']})"))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result["counts"].items()))
    verdict = "identical tensors" if result["identical"] else "DIFFERENT"
    print(f"{verdict}: {len(result['tensors'])} tensors ({counts})")
    for record in result["tensors"]:
        if record["status"] == "identical":
            continue
        print(escape(f"  {record['summary']}"))
        if record["status"] == "changed":
            print(
                f"    {_elements(record['changed_elements'])}; max abs diff "
                f"{_num(record['max_abs_diff'])}, max rel diff {_num(record['max_rel_diff'])}"
                + (
                    f", {record['nonfinite_changes']} to/from NaN or Inf"
                    if record["nonfinite_changes"]
                    else ""
                )
            )
        for flip in record["bitflips"][:_SHOWN_FLIPS]:
            where = ", ".join(str(i) for i in flip["position"])
            part = f" ({flip['part']})" if flip.get("part") else ""
            print(
                f"    [{where}] (element {flip['index']}): bit {flip['bit']}, {flip['kind']}{part}"
            )
        if len(record["bitflips"]) > _SHOWN_FLIPS:
            print(f"    … {record['single_bit_flips'] - _SHOWN_FLIPS} more single-bit flips")
    for obj in result.get("objects", []):
        print(escape(f"  object `{obj['key']}` {obj['status']}: {obj['a']} -> {obj['b']}"))


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _elements(n: int) -> str:
    return "1 element differs" if n == 1 else f"{n} elements differ"
