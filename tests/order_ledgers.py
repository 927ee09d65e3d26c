"""Order-ledger files for tests: written by the real guard, and rewritten line by line as a
test's fault edits them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from inspector.guard.order import OrderLedger
from inspector.run.order_log import ledger_path


def write(run_dir: Path, batches: list[list[int]], **kw) -> Path:
    """A run's order ledger as the real guard writes it, one session."""
    ledger = OrderLedger(run_dir, rank=0, **kw)
    for ids in batches:
        ledger.record(ids)
    ledger.close()
    return ledger_path(run_dir, 0)


def rewrite(path: Path, edit: Callable[[list[dict]], None], steps_only: bool = False) -> None:
    """Apply `edit` to the file's JSON lines (its step lines alone with `steps_only`) and
    write every line back."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    edit([rec for rec in lines if "s" in rec] if steps_only else lines)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
