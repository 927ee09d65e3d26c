"""A `consistency` reply: what it echoes of the request against the request this process made,
and a weights probe's rows against the file's bytes."""

from __future__ import annotations

import math
from typing import Any

from inspector.checkpoint.results import ClaimCheck, ConsistencyResult
from inspector.core.dtypes import BY_NAME
from inspector.core.termtext import escape
from inspector.core.vocabulary import CheckStatus
from inspector.rawtensors.readers import RawTensor
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.claims.records import PROBED, record_problems
from inspector.sandbox.host.claims.refusal import check_shape, refuted

_PROBED_KINDS = ("float", "packed")
"""Dtype kinds of the tensors torch calls floating point, the ones the worker may probe."""


def check_consistency(expected: Expected, result: dict[str, Any], request: dict[str, Any]
                      ) -> None:
    """Check a consistency reply against the worker `request` this process sent (never the
    reply's echo of it: mode, device, repeats, seed, injected fault) and, for a weights probe,
    against the file's bytes: the rows' tensors, their NaN / Inf counts, the probed count and
    bytes, and `consistent` against the rows; set `claims`, or SandboxError when a claim
    fails. A model run's outputs are only the worker's: its record says so."""
    check_shape("consistency run", ConsistencyResult, result)
    probe = not request.get("model")
    problems = _echo_problems(result, request, probe)
    if problems or not probe:
        expected.stop()
    if problems:
        raise refuted("consistency run", problems, result.get("sandbox"))
    if not probe:
        result["claims"] = ClaimCheck(reason="a model run's outputs exist only in the jailed "
                                      "worker").to_json()
        return
    measured = expected.wait()
    if isinstance(measured, str):
        result["claims"] = ClaimCheck(reason=measured).to_json()
        return
    rows = result.get("tensors") or []
    problems = record_problems(measured, rows, {}, PROBED)
    problems += _probed_problems({t.key: t for t, _ in measured}, rows, result,
                                 request["repeats"])
    failed = {str(r.get("key")) for r in rows if r.get("status") == CheckStatus.FAIL}
    if result.get("consistent") is not (not failed):
        problems.append(f"consistent is {escape(str(result.get('consistent')))} with "
                        f"{len(failed)} failed rows")
    problems += [f"{escape(str(r.get('key')))}'s device copy differs, yet its row passed"
                 for r in result.get("resident_mismatches") or ()
                 if str(r.get("key")) not in failed]
    if problems:
        raise refuted("weights probe", problems, result.get("sandbox"))
    result["nonfinite_weights"] = [r["key"] for r in rows if r.get("nonfinite")]
    result["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()


def _echo_problems(result: dict[str, Any], request: dict[str, Any], probe: bool) -> list[str]:
    """How the reply's account of the run differs from what was asked: its mode, the repeats,
    the seed and the fault (none unless asked: a fault nobody asked for turns a failed run
    into a passed self-test), and a device the request allows."""
    fault = request.get("inject")
    asked = {"mode": "probe" if probe else "model", "repeats": request["repeats"],
             "seed": request["seed"],
             "injected": None if not fault else {
                 "key": str(fault["key"]), "index": int(fault["index"]),
                 "bit": int(fault["bit"]), "iteration": int(fault.get("iteration", 2))}}
    wrong = [f"{name} is {escape(str(value))} as asked, reported as "
             f"{escape(str(result.get(name)))}"
             for name, value in asked.items() if result.get(name) != value]
    return wrong + _device_problems(str(request["device"]).strip().lower(),
                                    result.get("device"), result.get("device_label"))


def _device_problems(asked: str, device: object, label: object) -> list[str]:
    """The device the worker may have run on for the `asked` one: the CPU when asked (or
    when `auto` finds no CUDA device), labelled as the worker labels it; a CUDA device when
    asked (the jail shows the one GPU it lets in as `cuda:0`), labelled with its own name."""
    cuda = {"cuda:0", asked if ":" in asked else "cuda:0"} if asked.startswith("cuda") else set()
    allowed = {"cpu": {"cpu"}, "auto": {"cpu", "cuda:0"}}.get(asked, cuda)
    cpu_label = "CPU" if asked == "cpu" else "CPU (no CUDA device found)"
    if device not in allowed:
        return [f"the run was asked on {escape(asked)}, reported on {escape(str(device))}"]
    if (label != cpu_label) if device == "cpu" else not str(label).startswith(f"{device} ("):
        return [f"the {escape(str(device))} run is labelled {escape(str(label))}"]
    return []


def _probed_problems(located: dict[str, RawTensor], rows: list[dict],
                     result: dict[str, Any], repeats: int) -> list[str]:
    """The probed rows (a row with `repeats`, each a tensor of the file by then) must be
    floating tensors of 2+ dimensions repeated as often as asked, and the reply's count and
    bytes of probed weights the ones those tensors give here."""
    probed = [located[str(r.get("key"))] for r in rows
              if "repeats" in r and str(r.get("key")) in located]
    wrong = [f"{escape(t.key)} ({t.dtype} {list(t.shape)}) is no weight matrix, reported as "
             "probed" for t in probed if not _probeable(t)]
    wrong += [f"{escape(str(r.get('key')))} was repeated {escape(str(r.get('repeats')))} "
              f"times, asked {repeats}" for r in rows
              if "repeats" in r and r.get("repeats") != repeats]
    counted = {"probed_tensors": len(probed),
               "probed_bytes": sum(math.prod(t.shape) * BY_NAME[t.dtype].itemsize
                                   for t in probed if _probeable(t))}
    wrong += [f"{name} is {value}, reported as {escape(str(result.get(name)))}"
              for name, value in counted.items() if result.get(name) != value]
    return wrong


def _probeable(t: RawTensor) -> bool:
    """Whether the worker probes the tensor: floating point, 2+ dimensions, elements."""
    dtype = BY_NAME.get(t.dtype)
    return (dtype is not None and dtype.kind in _PROBED_KINDS and len(t.shape) >= 2
            and all(t.shape))
