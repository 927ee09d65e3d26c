"""The one shape of a `guard.alarm` journal record, shared by the numerics guard and the
data-order ledger (and read by the ledger's `report RUN_DIR`)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from inspector.run import journal
from inspector.run.status import GUARD_ALARM as ALARM_KIND


def append_alarm(run_dir: str | os.PathLike[str], *, step: int, rule: str, value: Any,
                 threshold: Any, action: str, rank: int, params: list[str] | None = None,
                 attribution: str | None = None, scene: Path | None = None,
                 **extra: Any) -> None:
    """Append one alarm, with the fields every reader may rely on, then any `extra` ones."""
    fields = {"step": step, "rule": rule, "value": value, "threshold": threshold,
              "action": action, "params": params or [], "attribution": attribution,
              "scene": str(scene) if scene is not None else None, "time": time.time(),
              "host": socket.gethostname(), "rank": rank, **extra}
    journal.append(journal.journal_path(run_dir), ALARM_KIND, fields)
