"""`ckpt-inspector watch DIR --manifest M --interval S`: re-verify a folder until stopped.

Every pass verifies the folder against the manifest and reports the files whose size or hash
changed since the previous pass — the periodic check a long training run needs, since silent
corruption on disk changes neither a file's name nor, usually, its modification time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inspector.cli.common import EXIT_MANIFEST, print_verify_result
from inspector.core.termtext import escape
from inspector.integrity.manifest import ManifestError, read_manifest
from inspector.integrity.verify import VerifyResult, verify

EXIT_OK = 0
EXIT_FAILED = 1

Snapshot = dict[str, tuple[str, int | None, str | None]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `watch`."""
    parser.add_argument("folder", type=Path, metavar="DIR", help="checkpoint folder to watch")
    parser.add_argument("--manifest", "-m", required=True, type=Path, help="manifest on record")
    parser.add_argument(
        "--interval", type=float, default=300.0, metavar="SECONDS", help="time between passes"
    )
    parser.add_argument(
        "--passes", type=int, default=0, metavar="N", help="stop after N passes (default: never)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per pass")
    parser.add_argument(
        "--strict", action="store_true", help="files the manifest does not list fail the pass"
    )


def run(args: argparse.Namespace) -> int:
    """Verify in passes until interrupted or --passes is reached."""
    try:
        manifest = read_manifest(args.manifest)
    except ManifestError as exc:
        print(f"ckpt-inspector watch: {exc}", file=sys.stderr)
        return EXIT_MANIFEST
    previous: Snapshot | None = None
    result = VerifyResult()
    number = 0
    try:
        while True:
            number += 1
            started = time.monotonic()
            try:
                result = verify(manifest, [args.folder], strict=args.strict)
            except ManifestError as exc:
                print(escape(f"ckpt-inspector watch: {exc}"), file=sys.stderr)
                return EXIT_MANIFEST
            current = snapshot(result)
            changes = changed_since(previous, current)
            _report(args, number, result, changes)
            previous = current
            if args.passes and number >= args.passes:
                break
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        print(f"stopped after {number} passes", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_FAILED


def snapshot(result: VerifyResult) -> Snapshot:
    """Per file: status, size and hash seen in one pass."""
    return {f.path: (f.status, f.actual_size, f.actual) for f in result.files}


def changed_since(previous: Snapshot | None, current: Snapshot) -> list[dict[str, Any]]:
    """Files whose size or hash (or presence) differs from the previous pass."""
    if previous is None:
        return []
    changes = []
    for path in sorted(previous.keys() | current.keys()):
        before, after = previous.get(path), current.get(path)
        if before is not None and after is not None and before[1:] == after[1:]:
            continue
        changes.append({"path": path, "before": _state(before), "after": _state(after)})
    return changes


def _state(seen: tuple[str, int | None, str | None] | None) -> dict[str, Any] | None:
    if seen is None or seen[1] is None:
        return None
    return {"status": seen[0], "size": seen[1], "sha256": seen[2]}


def _report(args: argparse.Namespace, number: int, result: VerifyResult, changes: list) -> None:
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    if args.json:
        doc = {"pass": number, "time": stamp, "changed": changes, **result.to_json()}
        print(json.dumps(doc), flush=True)
        return
    verdict = "all ok" if result.ok else "NOT ok"
    print(f"[{stamp}] pass {number}: {verdict}")
    for change in changes:
        print(
            f"  CHANGED {change['path']}: {_describe(change['before'])} -> "
            f"{_describe(change['after'])}"
        )
    if number == 1 or changes:
        print_verify_result(result)
    sys.stdout.flush()


def _describe(state: dict[str, Any] | None) -> str:
    if state is None:
        return "absent"
    digest = f", sha256 {state['sha256'][:16]}…" if state["sha256"] else ""
    return f"{state['size']} bytes{digest}"
