"""`run latest RUN_DIR`: the checkpoint a resume should load (action of `run_cmd`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from inspector.cli.common import say_unauthenticated
from inspector.cli.run.run_dir import add_run_dir, add_signer, unreadable, unreadable_signer
from inspector.core.termtext import escape, write_exact_path
from inspector.run.checkpoints import (
    CheckpointCheck,
    LedgerError,
    RunLedger,
    SaveRecord,
    read_ledger,
    resume_choice,
)

EXIT_OK = 0
EXIT_NONE = 1
EXIT_INEXACT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `run latest`."""
    add_run_dir(parser)
    parser.add_argument("--rank", type=int, help="only checkpoints this rank saved")
    parser.add_argument("--json", action="store_true", help="print the save record as JSON")
    add_signer(parser, "one whose signature does not hold, or that has none, is passed over")
    parser.epilog = ("exit status: 0 found (its path on stdout, as the exact bytes of its "
                     "name), 1 no checkpoint on record is still valid, 2 no readable journal, "
                     "a key or chain that cannot be read, or a path that cannot be printed "
                     "exactly (a control or format character, or one a terminal cannot show "
                     "as it is: --json gives it)")


def run(args: argparse.Namespace) -> int:
    """Print the newest valid checkpoint's path (or record); every newer one passed over, and
    every journal line not trusted, is named on stderr."""
    refused = unreadable_signer("latest", args)
    if refused is not None:
        return refused
    try:
        ledger = read_ledger(args.run_dir)
        choice = resume_choice(args.run_dir, rank=args.rank, refuse=_unsigned(args))
    except LedgerError as exc:
        return unreadable("latest", exc)
    say_unauthenticated("run latest", ledger, bool(args.public_key or args.certificate))
    for problem in choice.untrusted:
        print(escape(f"run latest: ignored {problem}"), file=sys.stderr)
    for problem in ledger.journal.problems:
        if problem.kind in ("deleted", "moved"):  # the lines are trusted; the journal was changed
            print(escape(f"run latest: the journal was changed: line {problem.line}: "
                         f"{problem.kind}: {problem.detail} (a newer save's record may be gone)"),
                  file=sys.stderr)
    for skipped, why in choice.skipped:
        print(escape(f"run latest: skipped {skipped.label} ({skipped.path}): {why}"),
              file=sys.stderr)
    if args.public_key or args.certificate:
        from inspector.signing.saves import unrecorded

        for lost in unrecorded(ledger, args.public_key, args.certificate or ()):
            print(escape(f"run latest: the journal was changed: {lost} (a newer save's record "
                         "may be gone)"), file=sys.stderr)
    record = choice.record
    if record is None:
        keyed = " and signed by the key given" if args.public_key or args.certificate else ""
        print(f"ckpt-inspector run latest: none of the {len(ledger.saves)} ledgered checkpoints "
              f"is still intact{keyed}; run `ckpt-inspector run verify` with the same options "
              "to see why", file=sys.stderr)
        return EXIT_NONE
    if args.public_key or args.certificate:
        _say_less_checked(args, ledger, record)
    where = ledger.resolve(record)
    if args.json:
        print(json.dumps({**record.to_fields(), "line": record.line, "location": str(where)},
                         indent=1))
    elif not write_exact_path(str(where), sys.stdout):
        # an escaped spelling names another file, which `$(run latest)` would load unchecked
        print(escape(f"ckpt-inspector run latest: {record.label}'s path ({where}) cannot be "
                     "printed exactly here; its \"location\" under --json is exact"),
              file=sys.stderr)
        return EXIT_INEXACT
    else:
        print(f"{record.label}, saved {record.time} on {escape(record.host)} (rank "
              f"{record.rank}); intact since then", file=sys.stderr)
    return EXIT_OK


def _say_less_checked(args: argparse.Namespace, ledger: RunLedger, record: SaveRecord) -> None:
    """One line on stderr when the chosen save's signature holds but binds less than a
    signature made now (an earlier version's: no save, run or outcome named), so the choice
    is not taken as fully checked."""
    from inspector.core.vocabulary import CheckpointState
    from inspector.signing.saves import save_signature

    verdict = save_signature(ledger, CheckpointCheck(record, CheckpointState.INTACT),
                             args.public_key, args.certificate or ())
    if verdict is not None and verdict.reason:
        print(escape(f"run latest: {record.label} ({record.path}): signature {verdict.state}, "
                     f"but {verdict.reason}"), file=sys.stderr)


def _unsigned(args: argparse.Namespace) -> Callable[[RunLedger, CheckpointCheck], str | None
                                                     ] | None:
    """With a key or chain given: why an intact checkpoint's signature does not hold."""
    if not (args.public_key or args.certificate):
        return None
    from inspector.signing.saves import signed_by

    return signed_by(args.public_key, args.certificate or ())
