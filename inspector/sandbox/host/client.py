"""Client of the jailed worker: the sandbox's public face for the CLI, the GUI and the report.

Plain Python that never imports torch and never unpickles. What it offers is defined in the
host modules and gathered here (`__all__`):

- one job in a fresh jailed worker, its failures and the required jail level (`jobs`);
- cold or warm workers: the fork server's lifecycle and the worker's environment (`launch`);
- the static scan and the refusals that gate every load (`admission`);
- the operations on a checkpoint: inspect, convert, tensor digests, diff (`operations`), and
  `inspect_file`, which reads a folder or `*.index.json` as the sharded checkpoint it names
  (`inspect_shards`) and returns the typed `InspectResult`;
- the test suite's switches (`sandbox.protocol`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from inspector.checkpoint.results import InspectResult, add_model_facts
from inspector.core.progress import CancelToken
from inspector.core.vocabulary import DEFAULT_REQUIRED_JAIL
from inspector.sandbox.host.admission import check_loadable, dry_run_reader, static_scan
from inspector.sandbox.host.forkclient import ForkServerError
from inspector.sandbox.host.inspect_shards import inspect_path
from inspector.sandbox.host.jobs import (
    REFUTED,
    EventFn,
    SandboxError,
    jail_accepted,
    required_jail,
    run_job,
    set_required_jail,
)
from inspector.sandbox.host.launch import (
    WORKER_MODULE,
    fork_server,
    start_fork_server,
    stop_fork_server,
    worker_env,
)
from inspector.sandbox.host.operations import (
    InspectOptions,
    convert_file,
    diff_files,
    diff_result,
    inspect_one,
    sidecar_path,
    tensor_digests,
)
from inspector.sandbox.protocol import DISABLE_ENV, SELFTEST_ENV
from inspector.scan.result import ScanResult
from inspector.shards.inspect import is_sharded_input

__all__ = [
    "DEFAULT_REQUIRED_JAIL",
    "DISABLE_ENV",
    "REFUTED",
    "SELFTEST_ENV",
    "WORKER_MODULE",
    "EventFn",
    "ForkServerError",
    "SandboxError",
    "check_loadable",
    "convert_file",
    "diff_files",
    "diff_result",
    "dry_run_reader",
    "fork_server",
    "inspect_file",
    "jail_accepted",
    "required_jail",
    "run_job",
    "set_required_jail",
    "sidecar_path",
    "start_fork_server",
    "static_scan",
    "stop_fork_server",
    "tensor_digests",
    "worker_env",
]


def inspect_file(
    path: str | os.PathLike[str],
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    cancel: CancelToken | None = None,
    timeout: float | None = None,
    limits: dict | None = None,
    scan: ScanResult | None = None,
    jobs: int = 1,
) -> InspectResult:
    """Scan, hash and load in the jail; the `inspect` contract typed, which it keeps as
    `contract` (error set instead of raising).

    A folder (other than a DCP one) or a `*.index.json` is the sharded checkpoint it names
    (`inspect_shards`, which passes each shard's scan, made before any load), its shards
    loaded `jobs` at a time; anything else is one file (`operations.inspect_one`). A load
    that passed its checks gets the model's facts (`add_model_facts`). `scan`: the input's
    scan made before (the app's), so it is not scanned a second time.
    """
    options = InspectOptions(tuple(allow_globals), override_dangerous, on_event, cancel,
                             timeout, limits)
    sharded = is_sharded_input(Path(path))
    result = InspectResult.of_contract(inspect_path(path, options, jobs, scan) if sharded
                                       else inspect_one(path, options, scan))
    add_model_facts(result)  # typed once, here, on the caller's thread
    return result
