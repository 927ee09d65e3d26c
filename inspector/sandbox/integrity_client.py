"""Client side of the integrity ops: tensor digests and checkpoint diffs from the jailed worker.

Plain Python like `client.py` (no torch, no unpickling here). Every file gets the static scan
first: a pickle the scan calls dangerous never reaches the worker unless the caller overrides,
exactly as for `inspect`; a safetensors file holds no pickle, and the worker reads its header
and byte ranges without deserialising anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from inspector.core.manifest import TensorEntry
from inspector.core.progress import CancelToken
from inspector.sandbox.client import EventFn, _limits, check_loadable, run_job, static_scan


def _admit(path: Path, allow: list[str], override_dangerous: bool) -> str:
    """Scan one input and refuse it as `inspect` would; return its format."""
    scan = static_scan(path)
    if scan.get("format") != "safetensors":
        check_loadable(scan, allow, override_dangerous)
    return str(scan.get("format"))


def tensor_digests(
    path: str | os.PathLike[str],
    *,
    cancel: CancelToken | None = None,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    timeout: float | None = None,
) -> list[TensorEntry]:
    """Every tensor of a checkpoint with its content digest, computed in the jail."""
    target = Path(path).resolve()
    allow = list(allow_globals)
    _admit(target, allow, override_dangerous)
    request = {
        "op": "digests",
        "path": str(target),
        "allow_globals": allow,
        "limits": _limits(target.stat().st_size, None),
    }
    result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout)
    return [
        TensorEntry(
            key=r["key"],
            dtype=r["dtype"],
            shape=tuple(r["shape"]),
            digest=r["digest"],
            digest_algorithm=r["digest_algorithm"],
        )
        for r in result["tensors"]
    ]


def diff_files(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    cancel: CancelToken | None = None,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    timeout: float | None = None,
) -> dict:
    """Compare two checkpoints of any formats tensor by tensor; the `diff` contract."""
    paths = [Path(a).resolve(), Path(b).resolve()]
    allow = list(allow_globals)
    for path in paths:
        _admit(path, allow, override_dangerous)
    request = {
        "op": "diff",
        "paths": [str(p) for p in paths],
        "allow_globals": allow,
        "limits": _limits(sum(p.stat().st_size for p in paths), None),
    }
    return run_job(request, on_event=on_event, cancel=cancel, timeout=timeout)
