"""How a reply that fails a check is refused, and the check's own time."""

from __future__ import annotations

import time
from typing import Any

from inspector.sandbox.host.jobs import REFUTED, SandboxError

_LISTED = 3


def refuted(what: str, problems: list[str], sandbox: dict | None) -> SandboxError:
    listed = "; ".join(problems[:_LISTED]) + (
        f" (and {len(problems) - _LISTED} more)" if len(problems) > _LISTED else "")
    return SandboxError(REFUTED, f"the jailed loader's {what} does not match the file's own "
                        f"bytes, so none of its answer is trusted: {listed}", sandbox=sandbox)


def timed(result: dict[str, Any], started: float) -> None:
    """The check's own seconds, beside the job's (`timing.claims_s`)."""
    if isinstance(result.get("timing"), dict):
        result["timing"]["claims_s"] = round(time.perf_counter() - started, 3)
