"""`ckpt-inspector scan PATH… [--json] [--sarif FILE] [--fail-on LEVEL]`: static scan, no code
from the file runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.core.atomic import OutputExistsError, write_text_atomic
from inspector.core.scan import ScanResult, scan_paths
from inspector.core.termtext import escape
from inspector.core.verdict import ORDER, exit_code, fails, worst
from inspector.core.vocabulary import Severity, Verdict

EXIT_OUTPUT = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `scan`."""
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="files or folders (recursive; every file, whatever its extension)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per file (JSON Lines) instead of text")
    parser.add_argument("--sarif", type=Path, metavar="FILE", help="also write SARIF 2.1.0")
    parser.add_argument("--force", action="store_true", help="overwrite an existing SARIF file")
    parser.add_argument("--walker-only", action="store_true",
                        help="verdict from the static walk alone: skip the loaders' own "
                             "readings in the jailed worker (faster, and blind to parser "
                             "differentials)")
    parser.add_argument("--fail-on", choices=[v.value for v in ORDER[1:]], metavar="LEVEL",
                        help="gate: exit with the worst file's status when any file is LEVEL or "
                             "worse (suspicious < dangerous < error), else 0; skipped files "
                             "(not checkpoints) never fail")


def _human(res: ScanResult) -> list[str]:
    """Text lines for one file; everything that comes from the file is escaped (`termtext`), so
    a name holding terminal escapes cannot repaint the verdict."""
    wo = "weights_only: loads" if res.weights_only_ok else "weights_only: refused"
    path = escape(res.path)
    if res.verdict == Verdict.SKIPPED:
        return [f"{'SKIPPED':<10} {path}: not a checkpoint ({escape(res.error or '')})"]
    lines = [f"{res.verdict.upper():<10} {path}  ({res.format}; {wo})"]
    if res.error:
        lines = [f"{res.verdict.upper():<10} {path}: {escape(res.error)}"]
    for g in res.globals:
        if g.severity != Severity.SAFE:
            key = f"{g.module}.{g.name}"
            name = g.import_name if g.import_name == key else f"{g.import_name} (as {key})"
            lines.append(f"    {g.severity:<10} {escape(name)} x{g.count}: {escape(g.reason)}")
            lines.extend(f"{'':<15}{escape(c)}" for c in g.calls)
    for f in res.findings:
        if f.severity != Severity.INFO:
            where = f" [{escape(f.member)}]" if f.member else ""
            lines.append(f"    {f.severity:<10} {f.code}: {escape(f.message)}{where}")
            if f.call:
                lines.append(f"{'':<15}{escape(f.call)}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Scan every file; exit 0 safe, 1 suspicious, 2 dangerous, 3 error (worst file wins);
    with --fail-on, 0 unless some file is at that level or worse."""
    if args.sarif and args.sarif.exists() and not args.force:
        print(f"ckpt-inspector scan: {args.sarif} exists; pass --force to overwrite it",
              file=sys.stderr)
        return EXIT_OUTPUT
    if args.walker_only:
        from inspector.core import readings

        readings.set_reader(None)
    results: list[ScanResult] = []
    for res in scan_paths(args.paths):
        results.append(res)
        if args.json:
            print(json.dumps(res.to_json()), flush=True)
        else:
            print("\n".join(_human(res)), flush=True)
    if not results:
        print("ckpt-inspector scan: no files found under the given paths", file=sys.stderr)
        return exit_code(Verdict.ERROR)
    if args.sarif:
        from inspector.cli.sarif import sarif_log

        try:
            write_text_atomic(args.sarif, json.dumps(sarif_log(results), indent=2),
                              overwrite=args.force)
        except (OutputExistsError, OSError) as exc:
            print(f"ckpt-inspector scan: cannot write {args.sarif}: {exc}", file=sys.stderr)
            return EXIT_OUTPUT
    verdict = worst(r.verdict for r in results)
    if not args.json and len(results) > 1:
        counts = {v: sum(r.verdict == v for r in results) for v in Verdict}
        summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        print(f"{len(results)} files: {summary}", file=sys.stderr)
    if args.fail_on and not any(fails(r.verdict, args.fail_on) for r in results):
        return 0
    return exit_code(verdict)
