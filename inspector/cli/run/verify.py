"""`run verify RUN_DIR`: every ledgered checkpoint against its record (action of `run_cmd`)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from inspector.cli.common import (
    add_jobs_argument,
    add_loader_arguments,
    say_unauthenticated,
    worker_digests,
)
from inspector.cli.run.run_dir import add_run_dir, add_signer, unreadable, unreadable_signer
from inspector.core.badges import shout, status_look
from inspector.core.termtext import counted, escape
from inspector.core.vocabulary import CheckpointState, SignatureState
from inspector.run.checkpoints import LedgerError, check_saves, read_ledger, summarize

EXIT_OK = 0
EXIT_FAILED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `run verify`."""
    add_run_dir(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_signer(parser, "an unsigned one fails")
    add_jobs_argument(parser)
    add_loader_arguments(parser)
    parser.epilog = ("exit status: 0 every checkpoint on record intact and the ledger whole, "
                     "1 a checkpoint changed or is missing, a signature does not hold (with "
                     "--public-key or --certificate), or ledger lines were cut, edited or "
                     "deleted (a signature for a save no line records, too), 2 no readable "
                     "journal, or a key or chain that cannot be read")


def run(args: argparse.Namespace) -> int:
    """Check sizes, then hashes in parallel; name the tensors of a changed file."""
    refused = unreadable_signer("verify", args)
    if refused is not None:
        return refused
    try:
        ledger = read_ledger(args.run_dir)
    except LedgerError as exc:
        return unreadable("verify", exc)
    keyed = bool(args.public_key or args.certificate)
    say_unauthenticated("run verify", ledger, keyed)
    # with a key, a save a line calls gone is looked at: present and signed, it is named
    checks = check_saves(ledger, jobs=args.jobs, tensor_digests=worker_digests(args),
                         signed=keyed)
    summary = summarize(ledger, checks)
    from inspector.signing.saves import save_signature, unrecorded

    signatures = [save_signature(ledger, c, args.public_key, args.certificate or ())
                  for c in checks]
    unsigned = keyed and any(v is not None and v.state != SignatureState.INTACT
                             for v in signatures)
    if keyed:  # with a key, the latest valid save is also one whose signature holds
        held = [c for c, v in zip(checks, signatures, strict=True)
                if v is not None and v.state == SignatureState.INTACT]
        summary = dataclasses.replace(summary, latest_valid=summarize(ledger, held).latest_valid)
    # a journal cut at its end leaves no gap; a signature made for a lost line still says so
    lost = unrecorded(ledger, args.public_key, args.certificate or ()) if keyed else []
    failed = (summary.changed or summary.missing or not summary.chain_intact
              or ledger.bad_records or unsigned or lost)
    if args.json:
        print(json.dumps({**summary.to_json(), "unrecorded_signed_saves": lost, "checkpoints": [
            {**c.to_json(), **({"signature": v.to_json()} if v else {})}
            for c, v in zip(checks, signatures, strict=True)]}, indent=1))
        return EXIT_FAILED if failed else EXIT_OK
    for c, v in zip(checks, signatures, strict=True):
        r = c.record
        note = f"  ({escape(c.detail)})" if c.detail else ""
        saved = "" if r.verified else f"  [at save: {r.outcome}]"
        print(f"{shout(status_look(c.state).word):8} {r.label:>14}  {escape(r.path)}{note}"
              f"{saved}")
        if v is not None:
            who = f" by {v.signer}" if v.signer else ""
            why = f": {v.reason}" if v.reason else ""
            print(escape(f"{'':8} {'signature':>14}  {v.state}{who}{why}"))
    for problem in [*summary.problems, *lost]:
        print(f"ledger: {escape(problem)}")
    latest = summary.latest_valid
    counts = ", ".join(f"{n} {status_look(s).word.lower()}" for s, n in (
        (CheckpointState.INTACT, summary.intact), (CheckpointState.CHANGED, summary.changed),
        (CheckpointState.MISSING, summary.missing), (CheckpointState.REMOVED, summary.removed),
        (CheckpointState.REPLACED, summary.replaced),
    ) if n)
    sealed = "sealed with the key" if summary.sealed else "no seal key"
    chain = (f"chain intact ({sealed})" if summary.chain_intact
             else f"chain broken ({len(summary.problems)})")
    print(f"{counted(summary.saves, 'checkpoint')}: {counts or 'none'}; {chain}; latest valid: "
          f"{escape(latest.path) + ' (' + latest.label + ')' if latest else 'none'}")
    return EXIT_FAILED if failed else EXIT_OK
