"""What the `run` actions over one run folder share: the RUN_DIR argument, the one line, with
its exit code, for a folder whose journal cannot be read, and the signer's key or chain with
the check of a checkpoint's signature against its record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.core.termtext import escape
from inspector.core.vocabulary import CheckpointState
from inspector.run.checkpoints import CheckpointCheck, LedgerError, RunLedger

if TYPE_CHECKING:
    from inspector.signing.check import SignatureVerdict

EXIT_LEDGER = 2


def add_run_dir(parser: argparse.ArgumentParser) -> None:
    """The RUN_DIR positional argument."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="the run folder (or its journal.jsonl)")


def unreadable(action: str, exc: LedgerError) -> int:
    """Say on stderr why the run folder cannot be read; the exit code for it."""
    print(escape(f"ckpt-inspector run {action}: {exc.message}"), file=sys.stderr)
    return EXIT_LEDGER


def add_signer(parser: argparse.ArgumentParser, what: str) -> None:
    """The --public-key and --certificate arguments; `what` says what a signature decides."""
    parser.add_argument("--public-key", type=Path, metavar="KEY.pub",
                        help="check each checkpoint's NAME.sig (written when the run set "
                        f"CKPT_INSPECTOR_SIGNING_KEY) with this key; {what}")
    parser.add_argument("--certificate", type=Path, action="append", metavar="CHAIN.pem",
                        help="as --public-key, for certificate signatures (repeatable)")


def signature_of(args: argparse.Namespace, ledger: RunLedger, check: CheckpointCheck
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


def unreadable_signer(action: str, args: argparse.Namespace) -> int | None:
    """Say on stderr why the key or a chain given cannot be used, before any checkpoint is
    judged by it; the exit code for it, or None when each can be read."""
    from inspector.signing.errors import SignatureError
    from inspector.signing.keys import read_certificates, read_public_key

    try:
        if args.public_key:
            read_public_key(args.public_key)
        for chain in args.certificate or ():
            read_certificates(chain)
    except SignatureError as exc:
        print(escape(f"ckpt-inspector run {action}: {exc.message}"), file=sys.stderr)
        return EXIT_LEDGER
    return None
