"""`ckpt-inspector diff A B [--json]`: tensor-by-tensor comparison with bit-flip forensics.

A and B are files, model folders or `*.index.json` files: shards are matched key by key
wherever each side put them, and every record names the shard it came from on each side. A
torch.distributed.checkpoint folder is one checkpoint, its chunks reassembled; a flipped bit in
a tensor kept whole in one data file is placed there (`file_a`/`file_b`, `file_offset_a`/`_b`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.checkpoint.results import DiffResult, TensorDiffRow
from inspector.cli.common import (
    EXIT_JAIL,
    JAIL_ERRORS,
    add_allow_arguments,
    add_quiet_argument,
    add_require_jail_argument,
    progress_events,
    stderr_progress,
)
from inspector.core.badges import shout, status_look
from inspector.core.dtypes import lookup
from inspector.core.termtext import escape
from inspector.core.vocabulary import TensorStatus

EXIT_IDENTICAL = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2

_SHOWN_FLIPS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `diff`."""
    parser.add_argument("a", type=Path, metavar="A",
                        help="first checkpoint: a file (any format), a folder (sharded or DCP) "
                             "or an index")
    parser.add_argument("b", type=Path, metavar="B",
                        help="second checkpoint: a file (any format), a folder (sharded or DCP) "
                             "or an index")
    parser.add_argument("--json", action="store_true", help="print the JSON diff contract")
    add_allow_arguments(parser)
    add_quiet_argument(parser)
    add_require_jail_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Diff in the jailed worker and print the result."""
    from inspector.sandbox.host.client import SandboxError, diff_result

    for path in (args.a, args.b):
        if not path.exists():
            _fail(args, {"code": "not_found", "message": f"{path}: no such file or folder",
                         "globals": []})
            return EXIT_ERROR
    try:
        with stderr_progress("comparing", args.quiet) as progress:
            result = diff_result(args.a, args.b, allow_globals=args.allow_global,
                                 on_event=progress_events(progress))
    except SandboxError as exc:
        _fail(args, exc.to_json(), exc.sandbox)
        return EXIT_JAIL if exc.code in JAIL_ERRORS else EXIT_ERROR
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print_diff(result)
    return EXIT_IDENTICAL if result.identical else EXIT_DIFFERENT


def _fail(args: argparse.Namespace, error: dict, sandbox: dict | None = None) -> None:
    """A side that cannot be read: one line on stderr, and with --json the error object (so
    a script reading stdout sees why, not an empty output)."""
    if args.json:
        print(json.dumps({"a": str(args.a), "b": str(args.b), "error": error,
                          "sandbox": sandbox}))
    print(f"ckpt-inspector diff: {escape(error['message'])}", file=sys.stderr)


def print_diff(result: DiffResult) -> None:
    """Totals, one sentence per key that differs, and the first flips of each tensor."""
    sides = [(letter, side) for letter, side in (("A", result.a), ("B", result.b)) if side]
    sharded = any(len(side.shards) > 1 for _letter, side in sides)
    unchecked = _unchecked(result)
    for letter, side in sides:
        count = f", {len(side.shards)} shards" if len(side.shards) > 1 else ""
        print(escape(f"{letter}: {side.path} ({side.format}{count})"))
        for problem in side.problems:
            print(escape(f"  warning: {problem['message']}{unchecked}"))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
    verdict = shout(status_look(TensorStatus.IDENTICAL if result.identical
                                else TensorStatus.CHANGED).word)  # the Compare pane's words
    print(f"{verdict}: {len(result.tensors)} tensors ({counts})")
    print(f"checked:  {escape(result.checked_words)}")
    for row in result.differing:
        print(escape(f"  {row.summary}{_shards(row) if sharded else ''}"))
        unit = "byte" if _bytewise(row) else "element"
        if row.status == TensorStatus.CHANGED:
            print(
                f"    {_differ(row.changed_elements, unit)}; max abs diff "
                f"{_num(row.max_abs_diff)}, max rel diff {_num(row.max_rel_diff)}"
                + (f", {row.nonfinite_changes} to/from NaN or Inf"
                   if row.nonfinite_changes else "")
            )
        for flip in row.bitflips[:_SHOWN_FLIPS]:
            where = ", ".join(str(i) for i in flip.position)
            part = f" ({flip.part})" if flip.part else ""
            print(f"    [{where}] ({unit} {flip.index}): bit {flip.bit}, {flip.kind}{part}")
        if len(row.bitflips) > _SHOWN_FLIPS:
            print(f"    … {row.single_bit_flips - _SHOWN_FLIPS} more single-bit flips")
    for alias in result.aliases:
        print(escape(_alias_line(alias)))
    for obj in result.objects:
        print(escape(f"  object `{obj['key']}` {obj['status']}: {obj['a']} -> {obj['b']}"
                     f"{unchecked}"))


def _unchecked(result: DiffResult) -> str:
    """What follows a line that is the jailed loader's word: where the comparison was not
    checked here (the `checked:` line says why), which file holds each key and which plain
    values differ are its word too."""
    claims = result.claims
    return "" if claims is not None and claims.checked else (
        " (as reported by the jailed loader, not checked here)")


def _shards(row: TensorDiffRow) -> str:
    """Where a key is stored on each side."""
    where = [f"{letter}: {shard}" for letter, shard in (("A", row.shard_a), ("B", row.shard_b))
             if shard]
    return f" [{', '.join(where)}]" if where else ""


def _alias_line(alias: dict) -> str:
    """What was compared for a key one side keeps only under another name."""
    side = alias["side"].upper()
    other = "B" if side == "A" else "A"
    if alias["how"] == "tied":
        return (f"  tied: `{alias['key']}` is not stored in {side}; compared with "
                f"{side}'s `{alias['stored_as']}`, which {other} keeps in the same storage "
                "(tied weights)")
    return (f"  alias: `{alias['key']}` in {side} is recorded as an alias of "
            f"`{alias['stored_as']}`; compared with those bytes")


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _differ(n: int, unit: str) -> str:
    return f"1 {unit} differs" if n == 1 else f"{n} {unit}s differ"


def _bytewise(row: TensorDiffRow) -> bool:
    """Whether a row's dtype has no bit layout (GGUF's bits8 blocks, F4 / F6), so its numbers
    count bytes (`claims.diff._bytewise_row`), as `bitflip` gives a layout only to torch's."""
    dtype = lookup(row.dtype_a)
    return dtype is None or not dtype.in_torch
