"""`ckpt-inspector run ACTION RUN_DIR`: a training run's folder, read from its journal.

Each action is one row of `ACTIONS` (name -> the module with its `add_arguments(parser)` and
`run(args) -> int`, and its one-line help); the module is imported when the parser is built
for `run`, never for other commands.

Its exit codes are in `inspector/cli/reference.py` (`EXITS`).
"""

from __future__ import annotations

import argparse
import importlib
from typing import NamedTuple


class Action(NamedTuple):
    """A `run` action: the module that implements it and its one-line help."""

    module: str
    help: str


ACTIONS: dict[str, Action] = {
    "latest": Action("inspector.cli.run.latest",
                     "print the newest checkpoint whose bytes still match its ledger record"),
    "verify": Action("inspector.cli.run.verify",
                     "re-check every ledgered checkpoint: intact, changed (which tensor) or "
                     "missing, and the ledger's own chain"),
    "order-diff": Action("inspector.cli.run.order_diff",
                         "compare two runs' data order: first divergent step, duplicated, "
                         "skipped and reordered samples"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `run`: one sub-parser per action."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, action in ACTIONS.items():
        sp = sub.add_parser(name, help=action.help, description=action.help)
        importlib.import_module(action.module).add_arguments(sp)


def run(args: argparse.Namespace) -> int:
    """Run the chosen action."""
    return int(importlib.import_module(ACTIONS[args.action].module).run(args))
