"""`convert DIR` / `convert X.index.json`: a model folder to the safetensors files transformers
writes, as `shards.convert` plans and converts it, with the CLI's progress, lines and exits.

Shards are independent, so `--jobs` of them convert at once (each in its own jailed worker;
N at once hold up to N times one worker's memory).
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from inspector.checkpoint.results import FolderConversion, jail_line
from inspector.cli.common import progress_events, stderr_progress, warm_workers
from inspector.cli.convert.lines import skipped_lines
from inspector.core.termtext import escape
from inspector.integrity.shard_index import Problem
from inspector.sandbox.host.parallel import run_parallel
from inspector.shards.convert import FolderError, convert_folder, plan_folder

EXIT_COVERAGE = 7


def human_lines(report: FolderConversion) -> list[str]:
    """One line per shard written (and its aliases, skips, sidecar), the index, the checks."""
    lines = []
    for shard in report.shards:
        lines.append(f"wrote     {shard.output} ({shard.tensors_written} tensors, "
                     f"{shard.bytes_written:,} bytes) from {shard.input}")
        lines += [f"alias     {alias} -> {kept} (shared storage, stored once)"
                  for alias, kept in shard.aliases.items()]
        lines += skipped_lines(shard)
        if shard.sidecar:
            lines.append(f"sidecar   {shard.sidecar}")
    if report.output_index:
        lines.append(f"index     {report.output_index} ({report.tensors_written} keys, "
                     f"total_size {report.bytes_written:,})")
    index = ", and the index matches the shards" if report.output_index else ""
    why = report.unchecked_reason
    lines.append("verified  every tensor of every shard, read back here, matches its source's "
                 f"stored bytes bit for bit{index}" if why is None else
                 f"matches   every shard, as reported by the jailed loader{index}; not checked "
                 f"here: {escape(why)}")
    lines += [f"warning   {p['message']}" for p in report.problems]
    lines.append(jail_line(report.shards[0].sandbox))
    return lines


def run_folder(args: argparse.Namespace, convert_one, exit_for) -> int:
    """`convert` of a folder or index; exit codes as for one file, 7 for coverage problems.

    `convert_one(source, output, overwrite, on_event)` converts one shard.
    """
    try:
        job = plan_folder(Path(args.file), args.output)
        with stderr_progress("converting", args.quiet) as show:
            # one worker's percentage only when shards go one at a time: the line is shared
            on_event = progress_events(show) if args.jobs == 1 else None

            def on_shard(number: int, count: int, src: Path) -> None:
                if show is not None:
                    print(f"\rconverting {number}/{count}: {src}", file=sys.stderr, flush=True)

            with warm_workers(len(job.pairs)):
                report = convert_folder(job, partial(convert_one, on_event=on_event),
                                        args.force, on_shard, args.jobs, run=run_parallel)
    except FolderError as exc:
        return _fail(args, exc.code, exc.message, exc.problems, _FOLDER_EXITS.get(exc.code, 3))
    except _sandbox_errors() as exc:
        return _fail(args, exc.code, exc.message, [], exit_for(exc))
    except OSError as exc:
        return _fail(args, "os_error", f"{exc.strerror or exc}: {exc.filename or args.file}",
                     [], 3)
    print(json.dumps(report.to_json()) if args.json else "\n".join(human_lines(report)))
    return 0


_FOLDER_EXITS = {"coverage": EXIT_COVERAGE, "output_exists": 4, "output_unwritable": 4,
                 "verify_failed": 6}


def _sandbox_errors() -> type[Exception]:
    from inspector.sandbox.host.client import SandboxError

    return SandboxError


def _fail(args: argparse.Namespace, code: str, message: str, problems: list[Problem],
          status: int) -> int:
    if args.json:
        print(json.dumps({"input": args.file, "error": {"code": code, "message": message},
                          "problems": [p.to_json() for p in problems]}))
    print(f"ckpt-inspector convert: {escape(message)}", file=sys.stderr)
    for problem in problems:
        print(f"  {problem.code}: {problem.message}", file=sys.stderr)
    return status
