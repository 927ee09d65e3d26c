"""What the `run` actions over one run folder share: the RUN_DIR argument, the one line, with
its exit code, for a folder whose journal cannot be read, and the signer's key or chain (a
checkpoint's signature is checked by `signing.saves`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inspector.core.termtext import escape
from inspector.run.checkpoints import LedgerError

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


def unreadable_signer(action: str, args: argparse.Namespace) -> int | None:
    """Say on stderr why the key or a chain given cannot be used, before any checkpoint is
    judged by it; the exit code for it, or None when each can be read (or none is given)."""
    from inspector.signing.errors import SignatureError
    from inspector.signing.saves import signed_by

    if not (args.public_key or args.certificate):
        return None
    try:
        signed_by(args.public_key, args.certificate or ())
    except SignatureError as exc:
        print(escape(f"ckpt-inspector run {action}: {exc.message}"), file=sys.stderr)
        return EXIT_LEDGER
    return None
