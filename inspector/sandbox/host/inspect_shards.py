"""A folder or `*.index.json` inspected as the sharded checkpoint it names, in one result.

`client.inspect_file` hands such an input here. Runs in the client process (no torch). Every
shard is scanned before any is loaded, so one dangerous shard refuses the whole checkpoint as a
dangerous file would be refused, and a missing shard loads nothing. Then each shard goes
through `operations.inspect_one`, `jobs` at a time (`sandbox.host.parallel.run_parallel`),
each in its own jailed worker (forked from one warm server), so a worker never holds more than
one shard; `shards.inspect.merge` joins the results in shard order, whatever order they
finished in. A folder with no index but one checkpoint file is that file.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from inspector.core.progress import CancelToken
from inspector.integrity.shard_index import ShardError, check_files
from inspector.sandbox.host.admission import check_loadable
from inspector.sandbox.host.jobs import EventFn, SandboxError
from inspector.sandbox.host.launch import fork_server
from inspector.sandbox.host.operations import InspectOptions, inspect_one
from inspector.sandbox.host.parallel import run_parallel
from inspector.scan.result import ScanResult
from inspector.shards.inspect import ShardResult, merge, new_report, scan_set, shard_summary
from inspector.shards.shard_set import ShardSet, resolve


def inspect_path(path: str | os.PathLike[str], options: InspectOptions,
                 jobs: int = 1, scan: ScanResult | None = None) -> dict:
    """The `inspect` contract of the checkpoint a folder or index names (see the module).

    With several `jobs`, the first shard that fails cancels `cancel` (as `run_parallel`
    does), which stops the others' workers. `scan`: the set's scan made before
    (`shards.inspect.scan_set`), so its shards are not scanned again."""
    try:
        shards = resolve(path, strict=False)
    except ShardError as exc:
        report = new_report(Path(os.path.abspath(path)), None, list(options.allow_globals))
        report["error"] = {"code": "bad_shards", "message": str(exc), "globals": []}
        return report
    if shards.index is None:
        return inspect_one(shards.files[0], options)
    return _inspect_set(shards, options, jobs, scan)


def _inspect_set(shards: ShardSet, options: InspectOptions, jobs: int,
                 scan: ScanResult | None) -> dict:
    index = shards.index
    report = new_report(shards.path, index, list(options.allow_globals))
    present = {name: file for name, file in zip(index.shards(), shards.files, strict=True)
               if file.is_file()}
    scans, summed = scan_set(shards, scan)
    report.update(scan=summed.to_json(), format=summed.format,
                  size=sum(s.size or 0 for s in scans.values()))
    problems = check_files(index)
    loaded: dict[int, ShardResult] = {}  # by shard number, the failed one included
    try:
        missing = [p.message for p in problems if p.code == "missing-shard"]
        if missing:
            raise SandboxError("missing_shard", "not loaded: a shard is missing: "
                               + "; ".join(missing))
        for name, scan in scans.items():
            _admit(name, scan, options)

        def load(shard: tuple[int, tuple[str, Path]], cancel: CancelToken) -> None:
            number, (name, file) = shard
            tagged = _tagged(options.on_event, name, number, len(present))
            one = inspect_one(file, replace(options, cancel=cancel, on_event=tagged),
                              scan=scans[name])
            loaded[number] = ShardResult(name, file, one)
            if one["error"]:
                error = one["error"]
                raise SandboxError(error["code"], f"{name}: {error['message']}",
                                   error.get("globals") or (), sandbox=one["sandbox"])

        with fork_server(enabled=len(present) > 1):
            run_parallel(load, enumerate(present.items()), jobs, cancel=options.cancel)
        problems += merge(report, _in_order(loaded), index)
    except SandboxError as exc:
        report.update(error=exc.to_json(), sandbox=exc.sandbox)
    report["shards"] = shard_summary(scans, _in_order(loaded))
    report["problems"] = [p.to_json() for p in problems]
    return report


def _in_order(loaded: dict[int, ShardResult]) -> list[ShardResult]:
    return [loaded[number] for number in sorted(loaded)]


def _admit(name: str, scan: ScanResult, options: InspectOptions) -> None:
    """Refuse the whole set, naming the shard, when one shard must not be loaded."""
    try:
        check_loadable(scan, list(options.allow_globals), options.override_dangerous)
    except SandboxError as exc:
        raise SandboxError(exc.code, f"{name}: {exc.message}", exc.globals) from None


def _tagged(on_event: EventFn | None, name: str, number: int, count: int) -> EventFn | None:
    """The shard's worker events with the shard named on each tensor and object, after a
    `shards` progress event for the set."""
    if on_event is None:
        return None
    on_event({"type": "progress", "stage": "shards", "done": number, "total": count})

    def tag(event: dict) -> None:
        on_event({**event, "shard": name} if event.get("type") in ("tensor", "object")
                 else event)

    return tag

