"""`run verify RUN_DIR`: every ledgered checkpoint against its record (action of `run_cmd`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.cli.common import add_jobs_argument, add_loader_arguments, worker_digests
from inspector.cli.run.run_dir import add_run_dir, unreadable
from inspector.core.badges import shout, status_look
from inspector.core.termtext import counted, escape
from inspector.core.vocabulary import CheckpointState, SignatureState
from inspector.run.checkpoints import (
    CheckpointCheck,
    LedgerError,
    RunLedger,
    check_saves,
    read_ledger,
    summarize,
)

if TYPE_CHECKING:
    from inspector.signing.check import SignatureVerdict

EXIT_OK = 0
EXIT_FAILED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `run verify`."""
    add_run_dir(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--public-key", type=Path, metavar="KEY.pub",
                        help="check each checkpoint's NAME.sig (written when the run set "
                        "CKPT_INSPECTOR_SIGNING_KEY) with this key; an unsigned one fails")
    parser.add_argument("--certificate", type=Path, action="append", metavar="CHAIN.pem",
                        help="as --public-key, for certificate signatures (repeatable)")
    add_jobs_argument(parser)
    add_loader_arguments(parser)
    parser.epilog = ("exit status: 0 every checkpoint on record intact and the ledger whole, "
                     "1 a checkpoint changed or is missing, a signature does not hold (with "
                     "--public-key or --certificate), or ledger lines were cut, edited or "
                     "deleted, 2 no readable journal")


def run(args: argparse.Namespace) -> int:
    """Check sizes, then hashes in parallel; name the tensors of a changed file."""
    try:
        ledger = read_ledger(args.run_dir)
    except LedgerError as exc:
        return unreadable("verify", exc)
    checks = check_saves(ledger, jobs=args.jobs, tensor_digests=worker_digests(args))
    summary = summarize(ledger, checks)
    signatures = [_signature(args, ledger, c) for c in checks]
    keyed = bool(args.public_key or args.certificate)
    unsigned = keyed and any(v is not None and v.state != SignatureState.INTACT
                             for v in signatures)
    failed = (summary.changed or summary.missing or not summary.chain_intact
              or ledger.bad_records or unsigned)
    if args.json:
        print(json.dumps({**summary.to_json(), "checkpoints": [
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
    for problem in summary.problems:
        print(f"ledger: {escape(problem)}")
    latest = summary.latest_valid
    counts = ", ".join(f"{n} {status_look(s).word.lower()}" for s, n in (
        (CheckpointState.INTACT, summary.intact), (CheckpointState.CHANGED, summary.changed),
        (CheckpointState.MISSING, summary.missing), (CheckpointState.REMOVED, summary.removed),
        (CheckpointState.REPLACED, summary.replaced),
    ) if n)
    chain = "chain intact" if summary.chain_intact else f"chain broken ({len(summary.problems)})"
    print(f"{counted(summary.saves, 'checkpoint')}: {counts or 'none'}; {chain}; latest valid: "
          f"{escape(latest.path) + ' (' + latest.label + ')' if latest else 'none'}")
    return EXIT_FAILED if failed else EXIT_OK


def _signature(args: argparse.Namespace, ledger: RunLedger, check: CheckpointCheck
               ) -> SignatureVerdict | None:
    """A checkpoint's signature against its record: checked when a key or chain is given or a
    signature lies beside it; None when neither (or the checkpoint is gone by rotation)."""
    from inspector.signing.check import check_against
    from inspector.signing.statement import beside, signed_name

    if check.state in (CheckpointState.REMOVED, CheckpointState.REPLACED):
        return None
    target = ledger.resolve(check.record)
    if not (args.public_key or args.certificate or beside(target).exists()):
        return None
    expected = {signed_name(target, ledger.run_dir / Path(*f.path.split("/"))): f.sha256 or ""
                for f in check.record.files}
    return check_against(beside(target), expected, args.public_key, args.certificate or ())
