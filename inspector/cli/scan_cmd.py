"""`ckpt-inspector scan PATH… [--json] [--sarif FILE] [--fail-on LEVEL] [--shard I/N]
[--results FILE.jsonl]`: static scan, no code from the file runs."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from inspector.cli.common import (
    add_batch_arguments,
    add_signature_arguments,
    flagged_lines,
    open_batch,
    paint,
    signature_verdicts,
    use_colour,
)
from inspector.cli.remote import Source, scan_local, scan_sources
from inspector.core.atomic import OutputExistsError, write_text_atomic
from inspector.core.badges import LOOKS, Badge, shout
from inspector.core.termtext import escape
from inspector.core.verdict import ORDER, exit_code, fails, worst
from inspector.core.vocabulary import Verdict
from inspector.scan.readings import batch_full, file_size, read_batch
from inspector.scan.result import ScanResult

EXIT_OUTPUT = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `scan`."""
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="files or folders (recursive; every file, whatever its extension), or "
                             "s3://… objects and prefixes")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per file (JSON Lines) instead of text")
    parser.add_argument("--sarif", type=Path, metavar="FILE", help="also write SARIF 2.1.0")
    parser.add_argument("--force", action="store_true", help="overwrite an existing SARIF file")
    add_signature_arguments(parser, "the SARIF log carries its verdict")
    parser.add_argument("--walker-only", action="store_true",
                        help="verdict from the static walk alone: skip the loaders' own "
                             "readings in the jailed worker (faster, and blind to parser "
                             "differentials)")
    parser.add_argument("--fail-on", choices=[v.value for v in ORDER[1:]], metavar="LEVEL",
                        help="gate: exit with the worst file's status when any file is LEVEL or "
                             "worse (suspicious < dangerous < error), else 0; skipped files "
                             "(not checkpoints) never fail")
    add_batch_arguments(parser)


_SUMMARY = (Badge.SAFE, Badge.SUSPICIOUS, Badge.DAMAGED, Badge.DANGEROUS, Badge.UNREADABLE,
            Verdict.SKIPPED)
"""A folder's totals, best first; skipped files (not checkpoints) last."""


def _word(state: str) -> str:
    """A state's word in a sentence: the app's badge word (`core.badges`), or `skipped`."""
    return LOOKS[state].word.lower() if state in LOOKS else str(state)


def _human(res: ScanResult, colour: bool = False) -> list[str]:
    """Text lines for one file; everything that comes from the file is escaped (`termtext`), so
    a name holding terminal escapes cannot repaint the verdict."""
    from inspector.scan.advice import entry_line

    line = entry_line(res)
    path, detail = escape(line.path), escape(line.detail)
    if res.verdict == Verdict.SKIPPED:
        return [f"{'SKIPPED':<10} {path}: {detail}"]
    shown = paint(f"{shout(line.word):<10}", line.word, colour)
    lines = [f"{shown} {path}: {detail}" if res.error else f"{shown} {path}  ({detail})"]
    lines.extend(flagged_lines(res))
    return lines


def _scanned(paths: list[str], batch) -> Iterator[tuple[Source, ScanResult, dict | None]]:
    """(source, result, its results-file record or None) in order: local files not done yet
    are scanned in batches, the loaders' readings of each batch in one jailed job
    (`scan.readings.read_batch`); objects and finished files one by one."""
    pending: list[Source] = []
    size = 0

    def flush() -> Iterator[tuple[Source, ScanResult, None]]:
        nonlocal size
        results = read_batch([s.found for s in pending], scan_local)
        yield from ((s, r, None) for s, r in zip(list(pending), results, strict=True))
        pending.clear()
        size = 0

    for source in scan_sources(paths):
        if not batch.owns(source.key):
            continue
        done = batch.finished(source.key, source.where)
        if done is None and source.found is not None:
            pending.append(source)
            size += file_size(source.where)
            if batch_full(len(pending), size):
                yield from flush()
            continue
        yield from flush()
        yield source, ScanResult.from_json(dict(done)) if done is not None else source.scan(), done
    yield from flush()


def run(args: argparse.Namespace) -> int:
    """Scan every file; exit 0 safe, 1 suspicious, 2 dangerous, 3 error (worst file wins);
    with --fail-on, 0 unless some file is at that level or worse."""
    if args.sarif and args.sarif.exists() and not args.force:
        print(f"ckpt-inspector scan: {args.sarif} exists; pass --force to overwrite it",
              file=sys.stderr)
        return EXIT_OUTPUT
    if args.walker_only:
        from inspector.scan import readings

        readings.set_reader(None)
    results: list[ScanResult] = []
    colour = use_colour()
    batch = open_batch(args, "scan.result", shlex.join(["ckpt-inspector", "scan", *args.paths]),
                       options={"walker_only": bool(args.walker_only)})
    batch.begin()
    for source, res, done in _scanned(args.paths, batch):
        if done is None:
            batch.record(source.key, source.where, res.to_json())
        results.append(res)
        if args.json:
            print(json.dumps(res.to_json()), flush=True)
        else:
            print("\n".join(_human(res, colour)), flush=True)
    batch.end()  # every file of this shard is done: the results file's completion line
    if not results and args.shard is not None:
        print(f"ckpt-inspector scan: shard {args.shard.label} holds none of the files",
              file=sys.stderr)
        return 0
    if not results:
        print("ckpt-inspector scan: no files found under the given paths", file=sys.stderr)
        return exit_code(Verdict.ERROR)
    if args.sarif:
        from inspector.cli.sarif import sarif_log

        try:
            log = sarif_log(results, signature_verdicts(args))
            write_text_atomic(args.sarif, json.dumps(log, indent=2), overwrite=args.force)
        except (OutputExistsError, OSError) as exc:
            print(f"ckpt-inspector scan: cannot write {args.sarif}: {exc}", file=sys.stderr)
            return EXIT_OUTPUT
    verdict = worst(r.verdict for r in results)
    if not args.json and len(results) > 1:
        from inspector.scan.advice import code_safety_badge

        words = Counter(Verdict.SKIPPED if r.verdict == Verdict.SKIPPED else code_safety_badge(r)
                        for r in results)
        summary = ", ".join(f"{words[w]} {_word(w)}" for w in _SUMMARY if words[w])
        print(f"{len(results)} files: {summary}", file=sys.stderr)
    if args.fail_on and not any(fails(r.verdict, args.fail_on) for r in results):
        return 0
    return exit_code(verdict)
