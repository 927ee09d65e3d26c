"""`run verify RUN_DIR`: every ledgered checkpoint against its record (action of `run_cmd`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.cli.common import add_jobs_argument, add_loader_arguments, worker_digests
from inspector.core.termtext import escape
from inspector.core.vocabulary import CheckpointState
from inspector.run.checkpoints import LedgerError, check_saves, read_ledger, summarize

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_LEDGER = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `run verify`."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="the run folder (or its journal.jsonl)")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_jobs_argument(parser)
    add_loader_arguments(parser)
    parser.epilog = ("exit status: 0 every checkpoint on record intact and the ledger whole, "
                     "1 a checkpoint changed or is missing, or ledger lines were cut, edited or "
                     "deleted, 2 no readable journal")


def run(args: argparse.Namespace) -> int:
    """Check sizes, then hashes in parallel; name the tensors of a changed file."""
    try:
        ledger = read_ledger(args.run_dir)
    except LedgerError as exc:
        print(f"ckpt-inspector run verify: {exc.message}", file=sys.stderr)
        return EXIT_LEDGER
    checks = check_saves(ledger, jobs=args.jobs, tensor_digests=worker_digests(args))
    summary = summarize(ledger, checks)
    failed = summary.changed or summary.missing or not summary.chain_intact or ledger.bad_records
    if args.json:
        print(json.dumps({**summary.to_json(), "checkpoints": [c.to_json() for c in checks]},
                         indent=1))
        return EXIT_FAILED if failed else EXIT_OK
    for c in checks:
        r = c.record
        note = f"  ({escape(c.detail)})" if c.detail else ""
        saved = "" if r.verified else f"  [at save: {r.outcome}]"
        print(f"{c.state.value:8} {r.label:>14}  {escape(r.path)}{note}{saved}")
    for problem in summary.problems:
        print(f"ledger: {escape(problem)}")
    latest = summary.latest_valid
    counts = ", ".join(f"{n} {s.value}" for s, n in (
        (CheckpointState.INTACT, summary.intact), (CheckpointState.CHANGED, summary.changed),
        (CheckpointState.MISSING, summary.missing), (CheckpointState.REMOVED, summary.removed),
        (CheckpointState.REPLACED, summary.replaced),
    ) if n)
    chain = "chain intact" if summary.chain_intact else f"chain broken ({len(summary.problems)})"
    print(f"{summary.saves} checkpoint(s): {counts or 'none'}; {chain}; latest valid: "
          f"{escape(latest.path) + ' (' + latest.label + ')' if latest else 'none'}")
    return EXIT_FAILED if failed else EXIT_OK
