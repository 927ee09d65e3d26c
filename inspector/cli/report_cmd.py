"""`ckpt-inspector report FILE… -o OUT.{json,html,pdf} [--manifest M] [--consistency]`.

Runs the whole pipeline headless through the same engine calls as the GUI: static scan, file
SHA-256 and jailed weights_only load with statistics (`inspect`), verification against a
manifest, a repeat-inference consistency run, NVML telemetry sampled while it all runs (where
a driver is present), and the environment; then writes one report in the format the output's
extension names. This process never imports torch.

Exit codes (the report is written for 0–3):
  0  every file is safe and every check that ran passed
  1  a file is suspicious, or a check failed (manifest, load, NaN/Inf, consistency, GPU health)
  2  a file is dangerous
  3  a file could not be scanned, or no file was found
  4  the report was not written (output exists without --force, unwritable, unknown extension)
  5  the manifest cannot be read (nothing was written)

With --public-key or --certificate (or a folder holding model.sig), each folder is also checked
against its OpenSSF Model Signing signature; one that is not intact is a failed check (1).
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from inspector.cli.common import (
    Batch,
    add_allow_arguments,
    add_batch_arguments,
    add_jobs_argument,
    add_quiet_argument,
    add_require_jail_argument,
    add_signature_arguments,
    add_timeout_arguments,
    progress_events,
    signature_verdicts,
    stderr_progress,
    warm_workers,
)
from inspector.core.atomic import OutputExistsError
from inspector.core.termtext import counted
from inspector.core.verdict import exit_code
from inspector.core.vocabulary import ReportStatus, Verdict
from inspector.report import (
    WRITERS,
    FileEvidence,
    Report,
    SessionEvidence,
    build_report,
    output_problem,
    write_report,
)
from inspector.report.advice import headline_word

REPORT_KIND = "report.file"
EXIT_FAILED_CHECK = 1
EXIT_NOT_WRITTEN = 4
EXIT_MANIFEST = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `report`."""
    parser.add_argument("paths", nargs="+", metavar="FILE",
                        help="checkpoints, or folders of them (recursive), or s3://… objects and "
                             "prefixes; a sharded model "
                             "folder or its *.index.json is one checkpoint")
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="OUT",
                        help=f"report file; the format comes from its extension "
                             f"({', '.join(sorted(WRITERS))}); - prints the JSON report "
                             "to stdout")
    parser.add_argument("--manifest", type=Path, metavar="M",
                        help="verify every file (and its tensors, when recorded) against M")
    add_signature_arguments(parser, "the summary leads with the signature's state")
    parser.add_argument("--consistency", action="store_true",
                        help="run the repeat-inference weights probe on each loadable file")
    parser.add_argument("--device", default="auto",
                        help="consistency device: cuda:N, cpu, or auto (default)")
    parser.add_argument("--repeats", type=int, default=10, metavar="N",
                        help="consistency runs compared with the first (default 10)")
    add_allow_arguments(parser)
    add_quiet_argument(parser)
    add_timeout_arguments(parser)
    parser.add_argument("--force", action="store_true", help="overwrite an existing report")
    parser.add_argument("--cold-workers", action="store_true",
                        help="start a fresh worker process per file instead of forking each "
                             "from one warm fork server (used when there are several files)")
    add_jobs_argument(parser)
    add_require_jail_argument(parser)
    add_batch_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run the pipeline, write the report, and exit by what it found."""
    from inspector.cli.remote import has_url, run_localized

    if has_url(args.paths):
        return run_localized(args, "paths", run, "report")
    to_stdout = str(args.output) == "-"
    if not to_stdout and (problem := output_problem(args.output, args.force)):
        return _fail(problem, EXIT_NOT_WRITTEN)
    manifest = None
    if args.manifest is not None:
        from inspector.integrity.manifest import ManifestError, read_manifest

        try:
            manifest = read_manifest(args.manifest)
        except (ManifestError, OSError) as exc:
            return _fail(f"{args.manifest}: {exc}", EXIT_MANIFEST)
    from inspector.cli.common import open_batch

    batch = open_batch(args, REPORT_KIND, _command_line(args), manifest)
    files = [t for t in _targets(args.paths) if batch.owns(_key(args, t[0]))]
    if not files and args.shard is not None:
        print(f"report: shard {args.shard.label} holds none of the files; an empty report",
              file=sys.stderr)
    elif not files:
        return _fail("no files found under the given paths", exit_code(Verdict.ERROR))
    from concurrent.futures import ThreadPoolExecutor

    from inspector.core.envinfo import collect

    # the environment's torch probe is a subprocess (one `import torch`): it runs while the
    # fork server starts and the files load, not after them
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="environment") as side:
        probe = side.submit(collect)
        with _telemetry() as (store, source), warm_workers(len(files), args.cold_workers):
            evidence = _gather(files, args, manifest, batch)
        environment = probe.result()
    batch.begin(environment.to_json())
    batch.end()  # every file of this shard is done: the completion line
    session = SessionEvidence(evidence, telemetry=store, telemetry_source=source,
                              environment=environment,
                              command=_command_line(args), runs=_runs(args),
                              signatures=signature_verdicts(args))
    report = build_report(session)
    if to_stdout:
        print(report.dumps())
        _print_summary(report, "standard output", sys.stderr)
        return report_exit(report)
    try:
        write_report(report, args.output, overwrite=args.force)
    except (OutputExistsError, OSError) as exc:
        return _fail(f"report not written: {exc}", EXIT_NOT_WRITTEN)
    _print_summary(report, args.output, sys.stdout)
    return report_exit(report)


def report_exit(report: Report) -> int:
    """The scan verdict's exit code, raised to 1 when a safe set of files failed a check."""
    code = exit_code(report.verdict)
    return EXIT_FAILED_CHECK if code == 0 and report.status == ReportStatus.FAILED else code


def _command_line(args: argparse.Namespace) -> str:
    """The invocation, rebuilt from the parsed options, for the report's header."""
    paths = getattr(args, "original_paths", args.paths)
    words = ["ckpt-inspector", "report", *map(str, paths), "-o", str(args.output)]
    if args.manifest is not None:
        words += ["--manifest", str(args.manifest)]
    for option in ("signature", "public_key"):
        if getattr(args, option) is not None:
            words += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    for chain in args.certificate or ():
        words += ["--certificate", str(chain)]
    if args.consistency:
        words += ["--consistency", "--device", args.device, "--repeats", str(args.repeats)]
    for name in args.allow_global:
        words += ["--allow-global", name]
    return shlex.join(words)


def _targets(paths: list[str]) -> Iterator[tuple[Path, str | None]]:
    """(file, the folder it was found in or None); in folders only checkpoints are kept. A
    sharded model folder or a torch.distributed.checkpoint folder is one target, as `inspect`
    reads it (an index already is one), and so is a DCP folder found inside a folder."""
    from inspector.scan.dcp_folder import is_dcp_folder
    from inspector.scan.engine import iter_files, scan_file
    from inspector.shards.inspect import sharded_set

    for raw in paths:
        root = Path(raw)
        if not root.is_dir() or is_dcp_folder(root) or sharded_set(root) is not None:
            yield root, None
            continue
        whole: set[Path] = set()
        for path in iter_files([root]):
            if is_dcp_folder(path.parent):
                if path.parent not in whole:  # its files are one checkpoint: once, whole
                    whole.add(path.parent)
                    yield path.parent, str(root)
            # a model folder also holds configs, manifests and READMEs: not checkpoints
            elif scan_file(path).format != "unknown":
                yield path, str(root)


def _gather(files: list[tuple[Path, str | None]], args: argparse.Namespace,
            manifest, batch: Batch) -> list[FileEvidence]:
    """Inspect (and verify) `--jobs` files at once, then run consistency one file at a time:
    every run shares the one GPU and its memory. A file the results file already holds (and
    that did not change since) is taken from there; each new one is kept there as it ends."""
    from functools import partial

    from inspector.sandbox.host.parallel import run_parallel

    kept = {t: batch.finished(_key(args, t[0]), _where(args, t[0])) for t in files}
    todo = [t for t in files if kept[t] is None]
    jobs = max(1, min(args.jobs, len(todo)))
    with stderr_progress("inspecting files", args.quiet or jobs == 1) as show:
        fresh = run_parallel(partial(_evidence, args=args, manifest=manifest, jobs=jobs,
                                     batch=batch), todo, jobs, progress=show)
    if args.consistency:
        for target, ev in zip(todo, fresh, strict=True):
            if ev.inspect is not None and ev.inspect.get("index"):
                # the probe reads one file; left "not checked" rather than failed
                print(f"report: no consistency run on {Path(ev.path).name}: a sharded "
                      "checkpoint (run it on each shard file)", file=sys.stderr, flush=True)
            elif ev.inspect is not None and ev.inspect.get("error") is None:
                ev.consistency = _consistency(Path(ev.path), args)
            batch.record(_key(args, target[0]), _where(args, target[0]), _kept(args, ev))
    made = dict(zip(todo, fresh, strict=True))
    return [FileEvidence(**_kept(args, made[t])) if kept[t] is None else FileEvidence(**kept[t])
            for t in files]


def _key(args: argparse.Namespace, path: Path) -> str:
    """What names a file in a batch: its path, or the URL its private local copy came from."""
    relabel = getattr(args, "relabel", None)
    return relabel.text(str(path)) if relabel is not None else str(path)


def _where(args: argparse.Namespace, path: Path):
    """What says whether a kept result is still good: the file, or the object it was copied
    from (a fresh copy's modification time would make every result look stale)."""
    return getattr(args, "copies", {}).get(str(path), path)


def _kept(args: argparse.Namespace, ev: FileEvidence) -> dict:
    """The evidence as a report and a results file show it: URLs, not local copies' paths."""
    relabel = getattr(args, "relabel", None)
    return relabel.json(asdict(ev)) if relabel is not None else asdict(ev)


def _evidence(target: tuple[Path, str | None], cancel, args: argparse.Namespace, manifest,
              jobs: int, batch: Batch) -> FileEvidence:
    ev = _file_evidence(target, cancel, args, manifest, jobs)
    if not args.consistency:  # else kept once its consistency run is done too
        batch.record(_key(args, target[0]), _where(args, target[0]), _kept(args, ev))
    return ev


def _file_evidence(target: tuple[Path, str | None], cancel, args: argparse.Namespace, manifest,
                   jobs: int) -> FileEvidence:
    from inspector.run.checkpoints import LedgerError, unwritten
    from inspector.run.record_lookup import find_record
    from inspector.sandbox.host.client import inspect_file, static_scan

    path, folder = target
    if not args.quiet:
        print(f"report: inspecting {path}", file=sys.stderr, flush=True)
    try:
        # one file's percentage only when files run one at a time: the line is shared
        with stderr_progress(f"inspecting {path.name}", args.quiet or jobs > 1) as show:
            # its contract: the evidence is kept as JSON in the batch's results file
            inspect = inspect_file(path, allow_globals=args.allow_global, timeout=args.timeout,
                                   on_event=progress_events(show), cancel=cancel).contract
    except OSError:  # unreadable or vanished: the scan result carries the reason
        return FileEvidence(str(path), scan=static_scan(path), folder=folder)
    ev = FileEvidence(str(path), inspect=inspect, folder=folder)
    if manifest is not None:
        ev.verify, ev.manifest = _verify(path, manifest), str(args.manifest)
        return ev
    try:
        found = find_record(path)
    except LedgerError as exc:  # journals above it disagree: a failed check, not a pass
        from inspector.integrity.verify import VerifyResult

        ev.verify = {"manifest": None, "dialect": "ledger",
                     **VerifyResult(errors=[exc.message]).to_json()}
        ev.manifest = "the journals above it, which disagree"
        return ev
    if found is not None:
        # a checkpoint saved through the ledger is verified against its save record
        ledger, record = found
        # a folder save lists the whole folder: a file added since fails, as `run verify` says
        added = [ledger.run_dir / name for name in unwritten(ledger, record)]
        ev.verify = _verify(path, record.manifest(ledger.run_dir, source=ledger.path),
                            strict=record.strict, added=added)
        ev.manifest = f"{ledger.path}:{record.line} ({record.label}, saved {record.time})"
    return ev


def _runs(args: argparse.Namespace) -> list:
    """The ledger summary of each run folder given (one holding a journal.jsonl)."""
    from inspector.cli.common import worker_digests
    from inspector.run.checkpoints import check_saves, read_ledger, summarize
    from inspector.run.journal import journal_path

    runs = []
    for raw in args.paths:
        if Path(raw).is_dir() and journal_path(raw).is_file():
            ledger = read_ledger(raw)
            checks = check_saves(ledger, jobs=args.jobs, tensor_digests=worker_digests())
            runs.append(summarize(ledger, checks))
    return runs


def _verify(path: Path, manifest, strict: bool = False, added: list[Path] | None = None
            ) -> dict:
    """`path` against the manifest, with the files `added` to its checkpoint since (with
    `strict`, a file the manifest does not list fails)."""
    from inspector.cli.common import worker_digests
    from inspector.integrity.manifest import ManifestError
    from inspector.integrity.verify import VerifyResult, verify
    from inspector.scan.dcp_folder import folder_files, is_dcp_folder
    from inspector.shards.inspect import sharded_set

    print(f"report: verifying {path.name} against the manifest", file=sys.stderr, flush=True)
    # a sharded checkpoint is its shard files (present ones), not its folder's configs; a
    # DCP folder is every file in it, `.metadata` included
    shards = sharded_set(path)
    files = ([f for f in shards.files if f.is_file()] if shards is not None
             else folder_files(path) if is_dcp_folder(path) else [path])
    try:
        result = verify(manifest, [*files, *(added or ())], tensor_digests=worker_digests(),
                        strict=strict)
    except ManifestError as exc:
        result = VerifyResult(errors=[str(exc)])
    return {"manifest": str(manifest.source), "dialect": manifest.dialect, **result.to_json()}


def _consistency(path: Path, args: argparse.Namespace) -> dict:
    from inspector.sandbox.host.client import SandboxError
    from inspector.sandbox.host.consistency_job import ConsistencyRequest, run_consistency

    print(f"report: consistency run on {path.name} ({args.device})", file=sys.stderr, flush=True)
    spec = ConsistencyRequest(path=str(path), device=args.device, repeats=args.repeats,
                              allow_globals=args.allow_global)
    try:
        # its `iterations` are the runs once they agree with the checked answer, never the
        # events as they came (`claims.consistency_events`)
        return run_consistency(spec, timeout=args.timeout)
    except SandboxError as exc:
        return {"consistent": False, "device": args.device, "error": exc.message}


@contextlib.contextmanager
def _telemetry() -> Iterator[tuple[object | None, str]]:
    """NVML sampled once a second while the block runs; (None, reason) without a driver."""
    from inspector.gpu.nvml_source import NvmlSource, NvmlUnavailable

    try:
        source = NvmlSource.open()
    except NvmlUnavailable as exc:
        yield None, str(exc)
        return
    from inspector.gpu.sampler import Sampler
    from inspector.gpu.telemetry import TelemetryStore

    store = TelemetryStore(capacity=24 * 3600)
    sampler = Sampler(source, store, interval=1.0)
    sampler.start()
    try:
        yield store, "nvml"
    finally:
        sampler.stop()
        source.close()


def _print_summary(report: Report, output: Path | str, stream: TextIO) -> None:
    print(f"{headline_word(report).upper()}: {counted(len(report.files), 'file')}, "
          f"{counted(len(report.problems), 'problem')}; report written to {output}", file=stream)
    if report.unchecked:  # as the HTML summary says it: the verdict is not all checked here
        n = len(report.unchecked)
        print(f"  {counted(n, 'verdict')} {'rests' if n == 1 else 'rest'} on the jailed "
              "loader's word, not checked here; the report says which and why", file=stream)
    for problem in report.problems:
        print(f"  {problem}", file=stream)


def _fail(message: str, code: int) -> int:
    print(f"ckpt-inspector report: {message}", file=sys.stderr)
    return code
