"""Replies about one file's tensors: `inspect` and `verify`'s digests."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from inspector.checkpoint.health import assess
from inspector.checkpoint.results import ClaimCheck, DigestsResult, InspectResult
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.core.termtext import escape
from inspector.formats.safetensors_header import (
    recorded_aliases,
    recorded_specs,
    spec_bytes,
)
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.claims.objects import file_objects, object_problems
from inspector.sandbox.host.claims.records import DIGESTS, INSPECTED, record_problems
from inspector.sandbox.host.claims.refusal import algorithm_problems, check_shape, refuted, timed
from inspector.sandbox.host.jobs import SandboxError


def check_inspection(expected: Expected, report: dict[str, Any]) -> None:
    """Check an inspect reply (`report`, the inspect contract) against the file's bytes: its
    tensors' records and its `objects` (the plain values, `objects`); set its `claims`, its
    checked NaN / Inf counts and health; `error` when a claim fails. The digest algorithm is
    this process's whether or not the file is read here (`algorithm_problems`)."""
    started = time.perf_counter()
    try:
        check_shape("inspection", InspectResult, report)
    except SandboxError as exc:
        expected.stop()
        _refuse(report, exc)
        return
    named = algorithm_problems(report)
    if named:
        expected.stop()
        _refuse(report, refuted("inspection", named, report.get("sandbox")))
        return
    measured = expected.wait()
    if isinstance(measured, str):
        # judged here from the loader's records, which nothing here could check
        report["health"] = assess(map(TensorStats.from_json, report["tensors"])).to_json()
        report["claims"] = ClaimCheck(reason=measured).to_json()
        return
    problems = record_problems(measured, report["tensors"], {}, INSPECTED)
    problems += _objects_problems(expected, report)
    if problems:
        _refuse(report, refuted("inspection", problems, report.get("sandbox")))
        return
    report["health"] = assess(map(TensorStats.from_json, report["tensors"])).to_json()
    report["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()
    timed(report, started)


def _refuse(report: dict[str, Any], error: SandboxError) -> None:
    """A refused reply keeps none of the loader's answer: no view, results file or report may
    read a record the check here did not let stand (nor one not shaped as the contract, which
    a table would trip on)."""
    report.update(error=error.to_json(), tensors=[], objects=[], unique_storage=None,
                  health=None)


def _objects_problems(expected: Expected, report: dict[str, Any]) -> list[str]:
    """How the reply's `objects` (the plain values the training state, hyper-parameters and
    resume checklist are read from) disagree with the ones read here from the file's bytes
    (`objects`), in the same read that located every tensor."""
    if expected.file is None:
        return ["the file's non-tensor values could not be read here"]
    try:
        made = file_objects(report["path"], expected.file)
    except Exception as exc:  # a GGUF header that changed since, or one our reader fails on
        return [f"the file's non-tensor values could not be read here again "
                f"({type(exc).__name__}: {escape(str(exc))})"]
    return object_problems(made, report.get("objects"))


def check_digests(expected: Expected, result: dict[str, Any]) -> None:
    """Check a `digests` reply (what `verify` compares with a manifest) against the file's
    bytes: each tensor once with its digest, and a converted file's recorded aliases and
    rebuild specs (`KEY::spec`) with theirs, each named with this process's digest algorithm;
    SandboxError when a claim fails."""
    try:
        check_shape("tensor digests", DigestsResult, result)
    except SandboxError:
        expected.stop()
        raise
    named = algorithm_problems(result, result["tensors"])
    if named:
        expected.stop()
        raise refuted("tensor digests", named, result.get("sandbox"))
    measured = expected.wait()
    if isinstance(measured, str):
        result["claims"] = ClaimCheck(reason=measured).to_json()
        return
    metadata = expected.metadata
    by_key = {t.key: m.digest for t, m in measured}
    derived = {removed: by_key[kept] for removed, kept in recorded_aliases(metadata).items()
               if kept in by_key and removed not in by_key}
    derived |= {f"{key}::spec": hashlib.sha256(spec_bytes(spec)).hexdigest()
                for key, spec in recorded_specs(metadata).items()}
    problems = record_problems(measured, result["tensors"], derived, DIGESTS)
    if problems:
        raise refuted("tensor digests", problems, result.get("sandbox"))
    result["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()

