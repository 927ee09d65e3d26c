"""`ckpt-inspector merge RESULTS.jsonl… -o OUT.{json,html,pdf}`: one report from a batch's shards.

Each shard of a batch job (`scan`, `verify` or `report` with `--shard I/N --results FILE`)
leaves a results file; this reads them all (a line cut short by a killed job is named and
left out) and writes the one report a single process would have written for the same files,
in file-path order. Nothing is scanned or loaded again: the report says what the shards saw.

Its exit codes are in `inspector/cli/reference.py` (`EXITS`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inspector.core.atomic import OutputExistsError
from inspector.core.envinfo import EnvInfo, GpuInfo
from inspector.core.termtext import escape
from inspector.core.verdict import exit_code
from inspector.core.vocabulary import ReportStatus, Verdict
from inspector.fleet.jobs import BatchResults, read_results
from inspector.report import (
    WRITERS,
    FileEvidence,
    SessionEvidence,
    build_report,
    output_problem,
    write_report,
)

EXIT_FAILED_CHECK = 1
EXIT_NOT_WRITTEN = 4
EXIT_RESULTS = 5
# what each kind of results record contributes to a file's evidence
_EVIDENCE_OF = {"scan.result": "scan", "verify.result": "verify"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `merge`."""
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.jsonl",
                        help="results files of a batch's shards (--results of scan, verify, "
                             "report)")
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="OUT",
                        help=f"report file; the format comes from its extension "
                             f"({', '.join(sorted(WRITERS))})")
    parser.add_argument("--force", action="store_true", help="overwrite an existing report")


def run(args: argparse.Namespace) -> int:
    """Read every results file, write one report, and exit by what it found."""
    if problem := output_problem(args.output, args.force):
        return _fail(problem, EXIT_NOT_WRITTEN)
    try:
        batch = read_results(args.results)
    except OSError as exc:
        return _fail(f"cannot read {exc.filename}: {exc.strerror}", EXIT_RESULTS)
    for path, problem in batch.problems:
        print(escape(f"merge: {path}: line {problem.line} {problem.kind}: {problem.detail}"),
              file=sys.stderr)
    files = evidence_of(batch)
    if not files:
        return _fail("the results files hold no finished file", exit_code(Verdict.ERROR))
    command = shlex.join(["ckpt-inspector", "merge", *map(str, args.results),
                          "-o", str(args.output)])
    session = SessionEvidence(files, environment=_environment(batch), command=command,
                              telemetry_source="not sampled (merged from a batch's shards)")
    report = build_report(session)
    try:
        write_report(report, args.output, overwrite=args.force)
    except (OutputExistsError, OSError) as exc:
        return _fail(f"report not written: {exc}", EXIT_NOT_WRITTEN)
    print(f"{report.verdict.upper()}: {len(report.files)} file(s) from {len(args.results)} "
          f"results file(s), {len(report.problems)} problem(s); report written to "
          f"{args.output}")
    for problem in report.problems:
        print(f"  {escape(problem)}")
    code = exit_code(report.verdict)
    return EXIT_FAILED_CHECK if code == 0 and report.status == ReportStatus.FAILED else code


def evidence_of(batch: BatchResults) -> list[FileEvidence]:
    """One FileEvidence per file, in path order: a report's whole record, or the scan and
    verification records of the same path joined."""
    merged: dict[str, FileEvidence] = {}
    for key, record in batch.results.get("report.file", {}).items():
        merged[key] = FileEvidence(**record)
    for kind, part in _EVIDENCE_OF.items():
        for key, record in batch.results.get(kind, {}).items():
            ev = merged.setdefault(key, FileEvidence(key))
            if getattr(ev, part) is None:
                setattr(ev, part, dict(record))
    return [merged[key] for key in sorted(merged)]


def _environment(batch: BatchResults) -> EnvInfo | None:
    """The first shard's environment that was recorded (a scan records none)."""
    for session in batch.sessions:
        env: Mapping[str, Any] | None = session.get("environment")
        if env:
            fields = dict(env)
            fields["gpus"] = [GpuInfo(**g) for g in fields.get("gpus", [])]
            return EnvInfo(**fields)
    return None


def _fail(message: str, code: int) -> int:
    print(f"ckpt-inspector merge: {message}", file=sys.stderr)
    return code
