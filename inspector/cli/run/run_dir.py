"""What the `run` actions over one run folder share: the RUN_DIR argument and the one line,
with its exit code, for a folder whose journal cannot be read."""

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
