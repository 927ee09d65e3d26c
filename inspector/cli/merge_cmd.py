"""`ckpt-inspector merge RESULTS.jsonl… -o OUT.{json,html,pdf}`: one report from a batch's shards.

Each shard of a batch job (`scan`, `verify` or `report` with `--shard I/N --results FILE`)
leaves a results file; this reads them all and writes the one report a single process would
have written for the same files, in file-path order. Nothing is scanned or loaded again: the
report says what the shards saw.

Nothing a results file says is taken on trust. A last line cut short by a killed job is named
and left out; any other damaged, edited, forged or deleted line fails the merge (exit 2, the
file and line named, nothing written), since the line it hides may be the one that found a
file dangerous. Where one file has several results (a shard run twice), the worst one wins,
never the last. Every slice of every job must be there, and must have finished: a slice no
results file holds, a results file that names no job, or one whose last line is not the
completion line its shard writes when its share is done (a shard killed part-way; re-run, it
resumes) is a problem of the report, which then fails (exit 1), since files of it may never
have been checked. Results files of shards of the same N whose commands differ (other paths,
another manifest) are no partition of one job: the merge refuses them (exit 1, nothing
written). Without a seal key (`CKPT_INSPECTOR_SEAL_KEY_FILE`, the same for
every shard) the inputs are unauthenticated, and the merge says so.

Its exit codes are in `inspector/cli/reference.py` (`EXITS`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from inspector.core.atomic import OutputExistsError
from inspector.core.envinfo import EnvInfo, GpuInfo
from inspector.core.termtext import counted, escape
from inspector.core.verdict import exit_code, rank
from inspector.core.vocabulary import ReportStatus, Verdict
from inspector.fleet.jobs import BatchResults, command_clash, coverage_problems, read_results
from inspector.integrity.verify import VerifyResult
from inspector.report import (
    WRITERS,
    FileEvidence,
    SessionEvidence,
    build_report,
    output_problem,
    write_report,
)
from inspector.report.advice import headline_word
from inspector.run.journal import SealKeyError, unauthenticated
from inspector.scan.result import ScanResult

EXIT_FAILED_CHECK = 1
EXIT_BROKEN_RECORD = 2
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
    except SealKeyError as exc:
        return _fail(str(exc), EXIT_RESULTS)
    except OSError as exc:
        return _fail(f"cannot read {exc.filename}: {exc.strerror}", EXIT_RESULTS)
    for path, problem in batch.problems:
        print(escape(f"merge: {path}: line {problem.line} {problem.kind}: {problem.detail}"),
              file=sys.stderr)
    if broken := [(p, pr) for p, pr in batch.problems if pr.kind != "truncated"]:
        path, problem = broken[0]
        return _fail(escape(f"{path}: line {problem.line} is {problem.kind}: a results line "
                            f"that fails its own check may hide a worse verdict; nothing "
                            f"written"), EXIT_BROKEN_RECORD)
    if not batch.authenticated:
        print(f"merge: {unauthenticated('the results files are')} (every shard and the merge)",
              file=sys.stderr)
    if clash := command_clash(batch):
        return _fail(escape(f"{clash}; nothing written"), EXIT_FAILED_CHECK)
    try:
        files = evidence_of(batch)
    except _WrongShape as exc:
        return _fail(escape(f"a results record of the wrong shape ({exc}); nothing written"),
                     EXIT_BROKEN_RECORD)
    if not files:
        return _fail("the results files hold no finished file", exit_code(Verdict.ERROR))
    command = shlex.join(["ckpt-inspector", "merge", *map(str, args.results),
                          "-o", str(args.output)])
    session = SessionEvidence(files, environment=_environment(batch), command=command,
                              telemetry_source="not sampled (merged from a batch's shards)",
                              problems=coverage_problems(batch))
    report = build_report(session)
    try:
        write_report(report, args.output, overwrite=args.force)
    except (OutputExistsError, OSError) as exc:
        return _fail(f"report not written: {exc}", EXIT_NOT_WRITTEN)
    print(f"{headline_word(report).upper()}: {counted(len(report.files), 'file')} from "
          f"{counted(len(args.results), 'results file')}, "
          f"{counted(len(report.problems), 'problem')}; report written to "
          f"{args.output}")
    for problem in report.problems:
        print(f"  {escape(problem)}")
    code = exit_code(report.verdict)
    return EXIT_FAILED_CHECK if code == 0 and report.status == ReportStatus.FAILED else code


class _WrongShape(ValueError):
    """A results record that a shard of this version cannot have written."""


_PARTS = {f.name for f in fields(FileEvidence)} - {"path"}


def _checked(kind: str, key: str, record: object) -> dict[str, Any]:
    """The record, when it has the shape its kind has; else _WrongShape naming it."""
    if not isinstance(record, Mapping):
        raise _WrongShape(f"{kind} of {key!r} is not an object")
    path = record.get("path", key)
    if not isinstance(path, str):
        raise _WrongShape(f"{kind} of {key!r} names no path")
    if "\0" in path or "\0" in key:  # no file name holds one: no command wrote it
        raise _WrongShape(f"{kind} of {key!r} names a path holding a NUL byte")
    if kind == "report.file":
        extra = set(record) - _PARTS - {"path"}
        if extra or not all(isinstance(v, (Mapping, str, type(None))) for v in record.values()):
            raise _WrongShape(f"report.file of {key!r} holds {sorted(extra) or 'wrong types'}")
        for part, sub in (("scan", "scan.result"), ("verify", "verify.result")):
            if record.get(part) is not None:
                _checked(sub, key, record[part])
    elif kind == "scan.result":
        try:
            ScanResult.from_json(dict(record))
        except (TypeError, ValueError, AttributeError) as exc:
            raise _WrongShape(f"scan.result of {key!r}: {exc}") from None
        if not isinstance(record.get("verdict"), str):
            raise _WrongShape(f"scan.result of {key!r} has no verdict word")
    elif kind == "verify.result":
        try:
            VerifyResult.from_json(dict(record))
        except (TypeError, ValueError, AttributeError) as exc:
            raise _WrongShape(f"verify.result of {key!r}: {exc}") from None
    return dict(record)


def evidence_of(batch: BatchResults) -> list[FileEvidence]:
    """One FileEvidence per file, in path order: a report's whole record, or the scan and
    verification records of the same path joined; a record of the wrong shape raises."""
    checked = {kind: {key: [_checked(kind, key, r) for r in records]
                      for key, records in by_key.items()}
               for kind, by_key in batch.results.items()}
    batch = BatchResults(checked, batch.sessions, batch.problems, batch.authenticated)
    merged: dict[str, FileEvidence] = {}
    for key, records in batch.results.get("report.file", {}).items():
        worst = max(records, key=_report_badness)
        merged[key] = FileEvidence(**{"path": key, **worst})
    for kind, part in _EVIDENCE_OF.items():
        badness = _scan_badness if part == "scan" else _verify_badness
        for key, records in batch.results.get(kind, {}).items():
            ev = merged.setdefault(key, FileEvidence(key))
            worst = max(records, key=badness)
            if getattr(ev, part) is None or badness(worst) > badness(getattr(ev, part)):
                setattr(ev, part, dict(worst))
    return [merged[key] for key in sorted(merged)]


def _scan_badness(scan: Mapping[str, Any] | None) -> int:
    """How bad a scan result is (its verdict's rank; an unreadable record as an error)."""
    if not isinstance(scan, Mapping):
        return rank(Verdict.ERROR) if scan is not None else 0
    return rank(str(scan.get("verdict", Verdict.ERROR)))


def _verify_badness(verify: Mapping[str, Any] | None) -> int:
    """0 for a verification that passed (or none), 1 for one that failed or cannot be read."""
    if verify is None:
        return 0
    try:
        return 0 if VerifyResult.from_json(dict(verify)).ok else 1
    except (TypeError, ValueError, AttributeError):
        return 1


def _report_badness(record: Mapping[str, Any]) -> tuple[int, int, int]:
    """A whole file record's badness: its scan, its verification, then a failed load."""
    inspect = record.get("inspect")
    scan = record.get("scan") or (inspect.get("scan") if isinstance(inspect, Mapping) else None)
    failed_load = int(isinstance(inspect, Mapping) and inspect.get("error") is not None)
    return _scan_badness(scan), _verify_badness(record.get("verify")), failed_load


def _environment(batch: BatchResults) -> EnvInfo | None:
    """The first shard's environment that was recorded (a scan records none)."""
    for session in batch.sessions:
        env: Mapping[str, Any] | None = session.get("environment")
        if env:
            try:
                values = dict(env)
                values["gpus"] = [GpuInfo(**g) for g in values.get("gpus", [])]
                return EnvInfo(**values)
            except (TypeError, ValueError):
                continue  # a session record of another shape: no environment from it
    return None


def _fail(message: str, code: int) -> int:
    print(f"ckpt-inspector merge: {message}", file=sys.stderr)
    return code
