"""`run order-diff A B`: compare the sample order of two runs, or of one run before and after a
resume, from their data-order ledgers (`RUN_DIR/order/rank-*.jsonl`).

A and B are each a run folder, a folder of ledger files or one ledger file. It names the first
divergent step and counts duplicated, skipped and reordered samples, with rank and worker.

Every ledger is read by `order_log.read_ledger`, which recomputes each session's rolling hash: a
session whose chain breaks is left out and named, and two runs are never called the same while
one of their ledgers breaks (exit 2, whatever the sound sessions show).

Exit codes:
  0   the same samples in the same order
  1   the order differs
  2   a ledger could not be found or read, or fails its own rolling hash
"""

from __future__ import annotations

import argparse
import json
import sys

from inspector.core import strict_json
from inspector.core.termtext import escape
from inspector.run.order_diff import OrderDiff, Place, diff_orders
from inspector.run.order_log import LedgerRead, find_ledgers, read_ledger

EXIT_SAME, EXIT_DIFFERENT, EXIT_UNREADABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `order-diff`."""
    parser.add_argument("a", metavar="A", help="reference run folder or ledger file")
    parser.add_argument("b", metavar="B", help="run folder or ledger file to compare with A")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    """Compare the two ledgers; see the exit codes in the module docstring."""
    sides = []
    for path in (args.a, args.b):
        files = find_ledgers(path)
        if not files:
            print(f"ckpt-inspector: no data-order ledger under {escape(str(path))}; pass a run "
                  "folder whose guard recorded one (RUN_DIR/order/rank-*.jsonl)", file=sys.stderr)
            return EXIT_UNREADABLE
        try:
            sides.append([read_ledger(f) for f in files])
        except OSError as exc:
            print(f"ckpt-inspector: cannot read {escape(str(path))}: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
    a, b = ([s for r in side for s in r.steps] for side in sides)
    problems = [p for side in sides for r in side for p in r.problems]
    breaks = sum(len(r.breaks) for side in sides for r in side)
    result = diff_orders(a, b)
    if args.json:
        print(json.dumps(_json(result, problems, sides, breaks), indent=2))
    else:
        _print(result, problems, breaks)
    if breaks:
        print(f"ckpt-inspector: {breaks} step line(s) break their session's rolling hash: "
              "those sessions are left out, and the orders are not called the same",
              file=sys.stderr)
        return EXIT_UNREADABLE
    return EXIT_SAME if result.same else EXIT_DIFFERENT


def _where(p: Place) -> str:
    sample = "" if p.sample is None else f"sample {escape(str(p.sample))} at "
    return f"{sample}epoch {p.epoch} step {p.step} rank {p.rank} worker {p.worker}"


def _print(result: OrderDiff, problems: list[str], breaks: int) -> None:
    for problem in problems:
        print(f"warning: {escape(problem)}")
    if result.same and not breaks:
        print(f"same order: {result.steps_compared} steps compared")
        return
    if result.same:
        print(f"the sound sessions agree ({result.steps_compared} steps compared), but a "
              "ledger breaks its rolling hash")
        return
    assert result.first_divergent is not None
    print(f"first divergent step: {_where(result.first_divergent)}")
    print(f"duplicated {result.duplicated}, skipped {result.skipped}, "
          f"reordered {result.reordered} ({result.steps_compared} steps compared)")
    for label, places in (("duplicated", result.duplicated_at), ("skipped", result.skipped_at)):
        for p in places:
            print(f"  {label}: {_where(p)}")
    for worker, counts in sorted(result.by_worker.items()):
        print(f"  {worker}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def _json(result: OrderDiff, problems: list[str], sides: list[list[LedgerRead]],
          breaks: int) -> dict:
    def place(p: Place | None) -> dict | None:
        return None if p is None else p.__dict__

    return strict_json.strict({
        "a": [str(r.path) for r in sides[0]], "b": [str(r.path) for r in sides[1]],
        "same": result.same and not breaks, "broken_lines": breaks,
        "first_divergent": place(result.first_divergent),
        "steps_compared": result.steps_compared, "duplicated": result.duplicated,
        "skipped": result.skipped, "reordered": result.reordered,
        "duplicated_at": [place(p) for p in result.duplicated_at],
        "skipped_at": [place(p) for p in result.skipped_at],
        "by_worker": result.by_worker, "problems": problems})
