"""A `consistency` reply: what it echoes of the request against the request this process made,
and a weights probe's rows against the file's bytes."""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any

from inspector.checkpoint.results import ClaimCheck, ConsistencyResult
from inspector.core.dtypes import BY_NAME
from inspector.core.termtext import escape
from inspector.core.vocabulary import CheckStatus
from inspector.rawtensors.readers import RawTensor

if TYPE_CHECKING:
    from inspector.rawtensors.values import Measured
from inspector.sandbox.host.claims.consistency_elements import (
    compute_dtype,
    probeable,
    reply_element_problems,
)
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.claims.records import PROBED, record_problems
from inspector.sandbox.host.claims.refusal import check_shape, refuted

DRIVER_GPUS = "/proc/driver/nvidia/gpus"
"""The NVIDIA driver's folder of per-GPU `information` files (what the jail reads before it
is entered, `fresh_root.host_gpu`)."""


def check_consistency(expected: Expected, result: dict[str, Any], request: dict[str, Any]
                      ) -> None:
    """Check a consistency reply against the worker `request` this process sent (never the
    reply's echo of it: mode, repeats, seed, injected fault, a model's factory and input), the
    device against this host's GPUs, and, for a weights probe, against the file's bytes: the
    rows' tensors, their NaN / Inf counts and first NaN / Inf, the probed count and bytes,
    each row's status against its own checks and `consistent` against the rows, every
    element a record names (`consistency_elements`), and the fault asked for among the
    device copy's differences; set `claims`, or SandboxError when a claim fails. A model
    run's outputs are only the worker's: its record says so."""
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
        # the fault asked for needs none of the file: only the reply's own records
        problems = _fault_problems(request.get("inject"), result.get("resident_mismatches") or [])
        if problems:
            raise refuted("weights probe", problems, result.get("sandbox"))
        result["claims"] = ClaimCheck(reason=measured).to_json()
        return
    rows = result.get("tensors") or []
    resident = result.get("resident_mismatches") or []
    located = {t.key: t for t, _ in measured}
    problems = record_problems(measured, rows, {}, PROBED)
    problems += _probed_problems(located, rows, result, request["repeats"])
    problems += _first_nonfinite_problems(measured, rows)
    problems += _verdict_problems(rows, resident, result, request["repeats"])
    problems += reply_element_problems(located, rows, resident, request["repeats"])
    problems += _fault_problems(request.get("inject"), resident)
    if problems:
        raise refuted("weights probe", problems, result.get("sandbox"))
    result["nonfinite_weights"] = [r["key"] for r in rows if r.get("nonfinite")]
    result["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()


def _echo_problems(result: dict[str, Any], request: dict[str, Any], probe: bool) -> list[str]:
    """How the reply's account of the run differs from what was asked: its mode, the repeats,
    the seed and the fault (none unless asked: a fault nobody asked for turns a failed run
    into a passed self-test), a model run's factory and input, and a device the request
    allows on this host."""
    asked = {"mode": "probe" if probe else "model", "repeats": request["repeats"],
             "seed": request["seed"], "injected": asked_fault(request)}
    if not probe:  # the model the user named, and the input asked of it
        asked.update(factory=request["model"], input={"shape": list(request["input_shape"]),
                                                      "dtype": request["input_dtype"]})
    wrong = [f"{name} is {escape(str(value))} as asked, reported as "
             f"{escape(str(result.get(name)))}"
             for name, value in asked.items() if result.get(name) != value]
    return wrong + device_problems(request, result.get("device"), result.get("device_label"))


def asked_fault(request: dict[str, Any]) -> dict[str, Any] | None:
    """The fault the worker `request` asks for, as the worker reports one, or None."""
    fault = request.get("inject")
    if not fault:
        return None
    return {"key": str(fault["key"]), "index": int(fault["index"]), "bit": int(fault["bit"]),
            "iteration": int(fault.get("iteration", 2))}


def device_problems(request: dict[str, Any], device: object, label: object) -> list[str]:
    """How a reported device and label differ from what the worker `request` allows on this
    host (`_device_problems`): the reply's, and each live event's."""
    return _device_problems(str(request["device"]).strip().lower(), device, label)


def _device_problems(asked: str, device: object, label: object) -> list[str]:
    """The device the worker may have run on for the `asked` one: the CPU when asked (or
    when `auto` finds no GPU here: `resolved_device` asks for `cuda:0` where this host has
    one), labelled as the worker labels it; a CUDA device only where this host's driver
    lists the GPU of that device minor (the one the jail lets in, `cuda:0` inside it),
    labelled with the name the driver gives it."""
    minor = 0 if asked in ("auto", "cuda") else _minor(asked)
    allowed = ({"cpu"} if asked in ("cpu", "auto") else
               {"cuda:0", asked if ":" in asked else "cuda:0"})
    if device not in allowed:
        return [f"the run was asked on {escape(asked)}, reported on {escape(str(device))}"]
    if device == "cpu":
        cpu_label = "CPU" if asked == "cpu" else "CPU (no CUDA device found)"
        return [] if label == cpu_label else [
            f"the cpu run is labelled {escape(str(label))}"]
    model = None if minor is None else host_gpu_model(minor)
    if model is None:
        return [f"the run is reported on {escape(str(device))}, but this host has no NVIDIA GPU "
                f"of device minor {minor} (/dev/nvidiactl, {DRIVER_GPUS})"]
    if label != f"{device} ({model})":
        return [f"the {escape(str(device))} run is labelled {escape(str(label))}, but this "
                f"host's GPU is {escape(model)}"]
    return []


def _minor(device: str) -> int | None:
    """The device minor of `cuda:N` (the GPU the jail lets in, `fresh_root.gpu_minor`)."""
    match = re.fullmatch(r"cuda:(\d{1,4})", device)
    return int(match.group(1)) if match else None


def host_gpu_model(minor: int) -> str | None:
    """The model name of this host's NVIDIA GPU of device minor `minor`, as its driver lists
    it (`Model:` in /proc/driver/nvidia/gpus/*/information, where torch's device name comes
    from too), or None where the host has no such GPU: no /dev/nvidiactl, no /dev/nvidiaN, no
    driver entry of that minor."""
    if not (os.path.exists("/dev/nvidiactl") and os.path.exists(f"/dev/nvidia{minor}")
            and os.path.isdir(DRIVER_GPUS)):
        return None
    for address in sorted(os.listdir(DRIVER_GPUS)):
        try:
            with open(f"{DRIVER_GPUS}/{address}/information", encoding="utf-8",
                      errors="replace") as fh:
                text = fh.read(1 << 16)
        except OSError:
            continue
        if _driver_field(text, "Device Minor") == str(minor):
            return _driver_field(text, "Model")
    return None


def _driver_field(text: str, name: str) -> str | None:
    """One `Name: value` line of the driver's information file, its whole value."""
    match = re.search(rf"^{re.escape(name)}:[ \t]*(\S[^\n]*?)[ \t]*$", text, re.MULTILINE)
    return match.group(1) if match else None


def resolved_device(device: str) -> str:
    """The device a request names for the user's `device`: `auto` as `cuda:0` where this host
    has that GPU and the installed torch is built for CUDA (so the reply's device can be
    checked: a CPU answer is then refuted, and a torch that still cannot use the GPU says so),
    else as asked, trimmed and in lower case."""
    device = device.strip().lower()
    if device == "auto" and host_gpu_model(0) is not None and _torch_built_for_cuda():
        return "cuda:0"
    return device


def _torch_built_for_cuda() -> bool:
    """Whether the installed torch is a CUDA build, read from its installed version (a CPU
    wheel's carries `+cpu`), with no torch import: `auto` on a GPU host with the CPU wheel, as
    this project pins it, runs on the CPU as before."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "+cpu" not in version("torch")
    except PackageNotFoundError:
        return False


def _probed_problems(located: dict[str, RawTensor], rows: list[dict],
                     result: dict[str, Any], repeats: int) -> list[str]:
    """The probed rows (a row with `repeats`, each a tensor of the file by then) must be
    floating tensors of 2+ dimensions repeated as often as asked, in the dtype the probe
    multiplies theirs in (where their elements' bits are read), and the reply's count and
    bytes of probed weights the ones those tensors give here."""
    probed = [located[str(r.get("key"))] for r in rows
              if "repeats" in r and str(r.get("key")) in located]
    wrong = [f"{escape(t.key)} ({t.dtype} {list(t.shape)}) is no weight matrix, reported as "
             "probed" for t in probed if not probeable(t)]
    wrong += [f"{escape(str(r.get('key')))} was repeated {escape(str(r.get('repeats')))} "
              f"times, asked {repeats}" for r in rows
              if "repeats" in r and r.get("repeats") != repeats]
    wrong += [f"{escape(t.key)} ({t.dtype}) is multiplied in {compute_dtype(t.dtype)}, "
              f"reported in {escape(str(r.get('compute_dtype')))}" for r in rows
              if (t := located.get(str(r.get("key")))) is not None and probeable(t)
              and "repeats" in r and r.get("compute_dtype") != compute_dtype(t.dtype)]
    counted = {"probed_tensors": len(probed),
               "probed_bytes": sum(math.prod(t.shape) * BY_NAME[t.dtype].itemsize
                                   for t in probed if probeable(t))}
    wrong += [f"{name} is {value}, reported as {escape(str(result.get(name)))}"
              for name, value in counted.items() if result.get(name) != value]
    return wrong


def _first_nonfinite_problems(measured: list[tuple[RawTensor, Measured]],
                              rows: list[dict]) -> list[str]:
    """A row's first NaN / Inf element (printed with the weights the device cannot be judged
    on) must be the one read here, in the pass that recounted them (`Span`)."""
    first = {t.key: m.span.first_nonfinite for t, m in measured if m.span is not None}
    return [f"{escape(key)}'s first NaN/Inf is element {first[key]}, reported as "
            f"{escape(str(r.get('first_nonfinite')))}"
            for r in rows if r.get("nonfinite") and (key := str(r.get("key"))) in first
            and r.get("first_nonfinite") != first[key]]


def _verdict_problems(rows: list[dict], resident: list[object], result: dict[str, Any],
                      repeats: int) -> list[str]:
    """Each row's status what its own checks give (failed exactly when its repeats differed,
    its reference or round trip failed, or its device copy differs), and `consistent` true
    exactly when no row failed."""
    differs = {str(r.get("key")) for r in resident if isinstance(r, dict)}
    problems = [p for r in rows for p in _row_verdict(r, str(r.get("key")) in differs,
                                                      repeats)]
    failed = {str(r.get("key")) for r in rows if r.get("status") == CheckStatus.FAIL}
    if result.get("consistent") is not (not failed):
        problems.append(f"consistent is {escape(str(result.get('consistent')))} with "
                        f"{len(failed)} failed rows")
    return problems


def _row_verdict(row: dict, differs: bool, repeats: int) -> list[str]:
    """One row: its repeats that differed (0 to `repeats` - 1, a first mismatch exactly when
    any), a reference check exactly when it was probed on finite weights (passed when within
    tolerance), a round-trip record exactly when the round trip failed, and its status."""
    key, probed = escape(str(row.get("key"))), "repeats" in row
    runs = row.get("repeat_mismatches", 0) if probed else 0
    ratio = row.get("reference_error_ratio")
    ratio = {"inf": math.inf, "nan": math.nan}.get(ratio, ratio) if isinstance(ratio, str) \
        else ratio
    facts = {
        "repeat_mismatches": isinstance(runs, int) and not isinstance(runs, bool)
        and 0 <= runs < repeats and (runs > 0) == ("first_mismatch" in row),
        "reference_ok": ("reference_ok" in row) == (probed and not row.get("nonfinite"))
        and ("reference_ok" not in row or (isinstance(ratio, (int, float))
                                           and row["reference_ok"] is (ratio <= 1.0))),
        "roundtrip_ok": isinstance(row.get("roundtrip_ok"), bool)
        and row["roundtrip_ok"] is ("roundtrip_mismatch" not in row),
    }
    wrong = [f"{key}'s {name} does not agree with its own record" for name, ok in facts.items()
             if not ok]
    failed = bool(runs) or row.get("reference_ok") is False or row.get("roundtrip_ok") is False
    status = CheckStatus.FAIL if failed or differs else CheckStatus.PASS
    if row.get("status") != status:
        wrong.append(f"{key} {'failed' if failed or differs else 'passed'} its checks, "
                     f"reported as {escape(str(row.get('status')))}")
    return wrong


def _fault_problems(fault: dict[str, Any] | None, resident: list[object]) -> list[str]:
    """The fault asked for (always inside the runs: `ConsistencyRequest.refusal`) stays in the
    device copy to the end, so its differences must hold that element with that one bit
    flipped (its values checked against the file's with the rest); only a device that
    corrupted more than the listed elements before it may leave it unlisted."""
    if not fault:
        return []
    key, index, bit = str(fault["key"]), int(fault["index"]), int(fault["bit"])
    record = next((r for r in resident if isinstance(r, dict) and r.get("key") == key), {})
    elements = [e for e in record.get("elements") or () if isinstance(e, dict)]
    if any(e.get("index") == index and e.get("bits") == [bit] for e in elements):
        return []
    listed = [e.get("index") for e in elements]
    if (isinstance(record.get("changed_elements"), int) and record["changed_elements"] > len(
            elements) and all(isinstance(i, int) and i < index for i in listed)):
        return []
    return [f"bit {bit} of {escape(key)} element {index} was asked to be flipped, but the "
            "device copy's differences do not hold it: the fault was not made"]
