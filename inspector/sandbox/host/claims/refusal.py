"""How a reply that fails a check is refused, and the check's own time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from inspector.core.json_record import JsonRecord, shape_problems
from inspector.core.termtext import escape
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.sandbox.host.jobs import REFUTED, SandboxError

_LISTED = 3


def refuted(what: str, problems: list[str], sandbox: dict | None) -> SandboxError:
    """The error of a reply a check refutes: the first problems, and how many more."""
    return SandboxError(REFUTED, f"the jailed loader's {what} does not match the file's own "
                        f"bytes, so none of its answer is trusted: {_listed(problems)}",
                        sandbox=sandbox)


def check_shape(what: str, contract: type[JsonRecord], reply: dict[str, Any]) -> None:
    """Refuse a reply that is not shaped as its contract's record (`json_record.shape_problems`)
    before any check or view reads it: a value of another type would otherwise be a traceback,
    or printed as it came."""
    problems = shape_problems(contract, reply)
    if problems:
        sandbox = reply.get("sandbox") if isinstance(reply, dict) else None
        raise SandboxError(REFUTED, f"the jailed loader's {what} is not shaped as its "
                           f"contract says, so none of its answer is trusted: "
                           f"{escape(_listed(problems))}",
                           sandbox=sandbox if isinstance(sandbox, dict) else None)


def _listed(problems: list[str]) -> str:
    return "; ".join(problems[:_LISTED]) + (
        f" (and {len(problems) - _LISTED} more)" if len(problems) > _LISTED else "")


def timed(result: dict[str, Any], started: float) -> None:
    """The check's own seconds, beside the job's (`timing.claims_s`)."""
    if isinstance(result.get("timing"), dict):
        result["timing"]["claims_s"] = round(time.perf_counter() - started, 3)


def algorithm_problems(reply: dict[str, Any], records: Sequence[dict] = ()) -> list[str]:
    """The digest algorithm a reply, and each of its `records`, names: this process hashes
    every tensor it checks itself, with SHA-256 (`DIGEST_ALGORITHM`), and the worker's code
    does too, so any other name is false (a manifest or signature written with it would fail
    every later honest verify). The reply then carries this process's own name."""
    named = [reply.get("digest_algorithm", DIGEST_ALGORITHM)]
    named += [r.get("digest_algorithm", DIGEST_ALGORITHM) for r in records]
    wrong = next((n for n in named if n != DIGEST_ALGORITHM), None)
    reply["digest_algorithm"] = DIGEST_ALGORITHM
    return [] if wrong is None else [f"the digests are {DIGEST_ALGORITHM}, named "
                                     f"{escape(str(wrong)[:40])}"]
