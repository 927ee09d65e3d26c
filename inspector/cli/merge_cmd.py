"""`ckpt-inspector merge RESULTS.jsonl… -o OUT.{json,html,pdf}`: one report from a batch's shards.

Each shard of a batch job (`scan`, `verify` or `report` with `--shard I/N --results FILE`)
leaves a results file; this reads them all and writes the one report a single process would
have written for the same files, in file-path order. Nothing is scanned or loaded again: the
report says what the shards saw.

Nothing a results file says is taken on trust. A last line cut short by a killed job is named
and left out; any other damaged, edited, forged or deleted line fails the merge (exit 2, the
file and line named, nothing written), since the line it hides may be the one that found a
file dangerous. Where one file has several results (a shard run twice), the worst one wins,
never the last. Every part of a record must have the shape its writer gives it (each nested
record's fields; a scan verdict a word of the vocabulary), else it is a bad record (exit 2,
nothing written). Every slice of every job must be there, and every run must have finished: a
slice no results file holds, a results file that names no job, or a run whose session line
is not followed by its own completion line before the next run's (a shard killed part-way;
re-run, it resumes) is a problem of the report, which then fails (exit 1, headed PROBLEM,
as any failed check is, never SAFE), since files of it may never have been checked. Results
files of shards of the same N whose commands differ (other paths, another manifest), whose
jobs differ (the manifest's content, the options: a results file reused after its manifest
changed holds two), or that ran one command with relative paths in different working
folders, are no partition of one job: the merge refuses them (exit 1, nothing written).
Without a seal key (`CKPT_INSPECTOR_SEAL_KEY_FILE`, the same for every shard) the inputs are
unauthenticated, and the merge says so.

Its exit codes are in `inspector/cli/reference.py` (`EXITS`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from inspector.checkpoint.optimizer_map import OptimizerParams
from inspector.checkpoint.results import (
    ConsistencyResult,
    ConversionResult,
    DiffResult,
    FolderConversion,
    InspectResult,
)
from inspector.core.atomic import OutputExistsError
from inspector.core.envinfo import EnvInfo, GpuInfo
from inspector.core.strict_json import NON_FINITE
from inspector.core.termtext import counted, escape
from inspector.core.verdict import exit_code, rank
from inspector.core.vocabulary import ReportStatus, Verdict
from inspector.fleet.jobs import (
    BatchResults,
    command_clash,
    coverage_problems,
    read_results,
    unbound_runs,
)
from inspector.integrity.verify import VerifyResult
from inspector.integrity.verify_batch import VERIFY_KIND, compared_nothing
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
    for path in unbound_runs(batch):
        print(escape(f"merge: {path}: runs of an earlier version, which recorded no manifest "
                     "digest or options: its shards are compared by command text alone, and "
                     "a result kept after its manifest changed cannot be told apart (run it "
                     "again with a new results file to check that)"), file=sys.stderr)
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
                              problems=coverage_problems(batch) + checked_nothing(batch))
    try:
        report = build_report(session)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # the shape checks reach each record's typed fields, not inside the free-form
        # objects some fields are (an inspect's code list): what they miss still fails here
        return _fail(escape(f"a results record of the wrong shape ({type(exc).__name__}: "
                            f"{exc}); nothing written"), EXIT_BROKEN_RECORD)
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
_TEXT_PARTS = ("manifest", "folder")
"""A report.file's parts that are words (the manifest's name, the folder given), or None."""


def _checked(kind: str, key: str, record: object) -> dict[str, Any]:
    """The record, when it has the shape its kind's writer gives it, every part of it down
    to each nested record's fields (`_shape_problem`), and its scan verdicts are words of
    the vocabulary; else _WrongShape naming what is not."""
    if not isinstance(record, Mapping):
        raise _WrongShape(f"{kind} of {key!r} is not an object")
    path = record.get("path", key)
    if not isinstance(path, str):
        raise _WrongShape(f"{kind} of {key!r} names no path")
    if "\0" in path or "\0" in key:  # no file name holds one: no command wrote it
        raise _WrongShape(f"{kind} of {key!r} names a path holding a NUL byte")
    if kind == "report.file":
        extra = set(record) - _PARTS - {"path"}
        if extra:
            raise _WrongShape(f"report.file of {key!r} holds {sorted(extra)}")
        for part in _TEXT_PARTS:
            if not isinstance(record.get(part), (str, type(None))):
                raise _WrongShape(f"report.file of {key!r}: its {part} is not a name")
        for part, value in record.items():
            if part in _TEXT_PARTS or part == "path" or value is None:
                continue
            cls = _conversion_type(value) if part == "conversion" else _PART_TYPES[part]
            if problem := _shape_problem(value, cls, part):
                raise _WrongShape(f"report.file of {key!r}: {problem}")
        return dict(record)
    cls = {"scan.result": ScanResult, "verify.result": VerifyResult}.get(kind)
    if cls is not None and (problem := _shape_problem(record, cls, kind.partition(".")[0])):
        raise _WrongShape(f"{kind} of {key!r}: {problem}")
    return dict(record)


def _conversion_type(value: object) -> type:
    """A conversion's record type, as the report reads it (`sections.conversion_record`)."""
    return FolderConversion if isinstance(value, Mapping) and "shards" in value \
        else ConversionResult


_PART_TYPES: dict[str, type] = {
    "scan": ScanResult, "inspect": InspectResult, "verify": VerifyResult,
    "consistency": ConsistencyResult, "diff": DiffResult}
"""The record type of each part of a report.file (a conversion's: `_conversion_type`)."""
_OWN_SHAPE = (OptimizerParams,)
"""Record classes whose JSON is not one key per field (`from_json` builds them)."""
_EXTRA_WORDS = {VerifyResult: {"manifest": (str, type(None)), "ok": (bool,)},
                ConversionResult: {"error": (str, type(None))}}
"""Keys outside a record's fields that its writer adds and the report reads."""


def _shape_problem(value: object, hint: Any, where: str) -> str | None:
    """What in `value` is not of the type `hint` (a record class or a typing annotation), as
    'WHERE: why'; None when it all is. A record's fields are checked by their annotations
    (unknown keys are a newer writer's and left as they are); a scan verdict must be a word
    of `Verdict`."""
    if hint is Any or hint is object:
        return None
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        tried = [_shape_problem(value, a, where) for a in args]
        return None if None in tried else next(p for p in tried if p)
    if hint is type(None):
        return None if value is None else f"{where}: not null"
    if origin is list or hint is list:
        if not isinstance(value, list):
            return f"{where}: not a list"
        return next((p for i, v in enumerate(value)
                     if (p := _shape_problem(v, args[0] if args else Any, f"{where}[{i}]"))),
                    None)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return f"{where}: not an object"
        return next((p for k, v in value.items()
                     if (p := _shape_problem(v, args[1] if args else Any, f"{where}.{k}"))),
                    None)
    if not isinstance(hint, type):
        return None  # no other annotation form is used by the results' records
    if is_dataclass(hint):
        return _record_problem(value, hint, where)
    if issubclass(hint, StrEnum):
        return None if isinstance(value, str) else f"{where}: not a word"
    if hint is bool:
        return None if isinstance(value, bool) else f"{where}: not true or false"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"{where}: not an integer"
    if hint is float:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
            isinstance(value, str) and value in NON_FINITE)
        return None if ok else f"{where}: not a number"
    return None if isinstance(value, hint) else f"{where}: not a {hint.__name__}"


def _record_problem(value: object, cls: type, where: str) -> str | None:
    """`value` as the JSON object of the record class `cls`: an object, every field it needs
    there, each field of its type; then the few extra keys its writer adds."""
    if not isinstance(value, dict):
        return f"{where}: not an object"
    hints = _hints(cls)
    if cls in _OWN_SHAPE:  # its JSON is not its fields: read it, then check what it read
        try:
            read = cls.from_json(value)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            return f"{where}: {type(exc).__name__}: {exc}"
        value = {f.name: getattr(read, f.name) for f in fields(cls)}
    for f in fields(cls):
        if f.name in ("extra", "absent") or f.metadata.get("transient") or f.name not in hints:
            continue
        if f.name not in value:
            if f.default is MISSING and f.default_factory is MISSING:
                return f"{where}: no {f.name}"
            continue
        if problem := _shape_problem(value[f.name], hints[f.name], f"{where}.{f.name}"):
            return problem
    for name, types in _EXTRA_WORDS.get(cls, {}).items():
        if name in value and not isinstance(value[name], types):
            return f"{where}.{name}: not of its type"
    if cls is ScanResult and value.get("verdict") not in set(Verdict):
        return f"{where}.verdict: {value.get('verdict')!r} is no verdict word"
    return None


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


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


def checked_nothing(batch: BatchResults) -> list[str]:
    """The verify shards that compared no file with the manifest, as their completion lines
    say (`errors`) or as their results, read again here, show (each a file the manifest does
    not list, or none): a problem of the merge when no shard of the same job compared a file
    (a partition may give one shard none of the files; a shard given other paths is another
    command, which `command_clash` refuses)."""
    jobs: dict[Path, set[str]] = {}
    for path, session in zip(batch.session_files, batch.sessions, strict=True):
        if session.get("for") == VERIFY_KIND:
            jobs.setdefault(path, set()).add(str(session.get("job")))
    said = dict(batch.failed_runs)
    empty, compared = {}, set()
    for path, ran in jobs.items():
        share = VerifyResult()
        for record in batch.shares.get(path, {}).get(VERIFY_KIND, []):
            part = VerifyResult.from_json(dict(record))
            share.files += part.files
            share.tensors += part.tensors
        if path in said or compared_nothing(share):
            empty[path] = ran
        else:
            compared |= ran
    return [f"{path}: {said[path]}" if path in said else
            f"{path}: its verify results compare no file with the manifest (each is a file it "
            "does not list): nothing was checked by that shard; give it the folder that holds "
            "the manifest's files" for path, ran in empty.items() if not ran & compared]


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
