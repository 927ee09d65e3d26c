"""A worker's reply is a claim until it passes these checks, made here from the files' bytes.

The worker runs whatever code the input smuggles past the loader, so what it says about the
input (each tensor's digest, NaN / Inf counts, the health judged from them) and about the
output it wrote (`verified`) may be a lie. This module is the one place the user's process
tests those claims, with readers that run nothing of the input (`rawtensors`). What the
input's bytes say (`Expected`) is measured on a thread of its own while the worker runs:

- `check_inspection`: every tensor the file holds reported once, with its dtype, shape and
  digest; NaN / Inf recounted here; the largest magnitude of the file's top binary order, and
  the orders (`exponents`, where a flipped exponent bit shows) counted here wherever an outlier
  may be; health judged here. Mean, std and the histogram stay the worker's, as it says.
- `check_digests`: the tensor digests `verify` compares with a manifest, checked the same way.
- `check_diff`: each row's status and the overall `identical`, from both sides' bytes
  compared here (`SideBySide`); the rows' counts and bit flips are the worker's.
- `check_consistency`: the probe's rows, each tensor once with its SHA-256 (the device got the
  file's weights), every 2-D+ float one probed, NaN / Inf recounted, `consistent` only when no
  row failed; the repeats' outputs exist only in the worker.
- `check_conversion`: each tensor of the output safetensors file compared with the input's
  own storage bytes; every input tensor written, an alias of a written one with the same
  bytes, or skipped for a dtype safetensors cannot hold, and nothing else written. The
  digests reported are the ones computed here.

A file these readers cannot locate every tensor of (a pickle holding more than tensors, a DCP
folder) is not checked: the record says why, and output says the answer is the jailed loader's.
A claim that fails is `claim_refuted`: the whole reply is then untrusted.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspector.checkpoint.extract import strip_prefixes
from inspector.checkpoint.health import (
    MIN_JUDGED,
    assess,
    magnitude_outliers,
    outlier_gap,
    outlier_tail,
)
from inspector.checkpoint.results import ClaimCheck
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.core.dtypes import BY_NAME
from inspector.core.errors import CodedError
from inspector.core.termtext import escape
from inspector.core.vocabulary import CheckStatus, TensorStatus
from inspector.formats.safetensors_header import (
    ALIASES_KEY,
    ENCODED_KEY,
    read_buffer,
    recorded_aliases,
    recorded_specs,
    spec_bytes,
)
from inspector.rawtensors.readers import NotReadable, RawFile, RawTensor, open_raw
from inspector.sandbox.host.jobs import SandboxError

if TYPE_CHECKING:
    import numpy as np

    from inspector.rawtensors.orders import Tops
    from inspector.rawtensors.values import Measured

REFUTED = "claim_refuted"
OWN_METADATA = frozenset({"format", ENCODED_KEY, ALIASES_KEY})
"""`__metadata__` entries a conversion writes that are not aliases."""
_LISTED = 3


def _refuted(what: str, problems: list[str], sandbox: dict | None) -> SandboxError:
    listed = "; ".join(problems[:_LISTED]) + (
        f" (and {len(problems) - _LISTED} more)" if len(problems) > _LISTED else "")
    return SandboxError(REFUTED, f"the jailed loader's {what} does not match the file's own "
                        f"bytes, so none of its answer is trusted: {listed}", sandbox=sandbox)


class Expected:
    """What the input's own bytes say, measured here on a thread of its own while the worker
    starts and runs (its start-up leaves a core free): each tensor's digest and, for `inspect`
    (`counts`), its NaN / Inf; or why the file's tensors cannot all be located here."""

    def __init__(self, path: Path, counts: bool, start: bool = True) -> None:
        self._path, self._counts = path, counts
        self._stop = threading.Event()
        self.file: RawFile | None = None
        self.reason: str | None = None
        self.measured: list[Measured] = []
        self._thread = threading.Thread(target=self._run, name="claims-expected", daemon=True)
        if start:
            self._thread.start()

    def start(self) -> None:
        """Begin measuring (for one made with `start=False`)."""
        self._thread.start()

    def _run(self) -> None:
        try:
            # NumPy (0.09 s) is imported here, beside the worker's start, not before it
            from inspector.rawtensors.values import exact_orders, measure

            self.file = open_raw(self._path)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="claims-hash") as pool:
                for t in self.file.tensors:
                    if self._stop.is_set():
                        return
                    gap = outlier_gap(t.dtype) if self._counts else None
                    measured = measure(t, self._counts, pool, gap)
                    if measured.tops is not None and not _clear(measured.tops):
                        # counted while the worker still runs, not after its reply
                        measured = replace(measured, orders=exact_orders(t))
                    self.measured.append(measured)
        except NotReadable as exc:
            self.reason = str(exc)
        except Exception as exc:  # a crafted file our reader fails on: then nothing is checked
            self.reason = f"the file could not be read here ({type(exc).__name__}: {exc})"
        if self.reason is not None:
            self.file = None

    @property
    def metadata(self) -> dict[str, str]:
        """The file's safetensors `__metadata__` (empty for other formats)."""
        return self.file.metadata if self.file is not None else {}

    def wait(self) -> list[tuple[RawTensor, Measured]] | str:
        """Each tensor with what it measured, or why the file could not be measured."""
        self._thread.join()
        if self.file is None:
            return self.reason or "the file was not read"
        return list(zip(self.file.tensors, self.measured, strict=True))

    def stop(self) -> None:
        """The job ended without a reply to check: stop measuring."""
        self._stop.set()


def check_inspection(expected: Expected, report: dict[str, Any]) -> None:
    """Check an inspect reply (`report`, the inspect contract) against the file's bytes: set
    its `claims`, its checked NaN / Inf counts and health; `error` when a claim fails."""
    started = time.perf_counter()
    measured = expected.wait()
    if isinstance(measured, str):
        # judged here from the loader's records, which nothing here could check
        report["health"] = assess(map(TensorStats.from_json, report["tensors"])).to_json()
        report["claims"] = ClaimCheck(reason=measured).to_json()
        return
    problems = _record_problems(measured, report["tensors"], {}, INSPECTED)
    if problems:
        report["error"] = _refuted("inspection", problems, report.get("sandbox")).to_json()
        report["health"] = None
        return
    report["health"] = assess(map(TensorStats.from_json, report["tensors"])).to_json()
    report["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()
    _timed(report, started)


def check_digests(expected: Expected, result: dict[str, Any]) -> None:
    """Check a `digests` reply (what `verify` compares with a manifest) against the file's
    bytes: each tensor once with its digest, and a converted file's recorded aliases and
    rebuild specs (`KEY::spec`) with theirs; SandboxError when a claim fails."""
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
    problems = _record_problems(measured, result["tensors"], derived, INSPECTED)
    if problems:
        raise _refuted("tensor digests", problems, result.get("sandbox"))
    result["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()


class SideBySide:
    """Both sides of a diff located here (each side its files: one, or a shard set's) and the
    tensors they share compared byte for byte, on a thread of its own while the worker runs;
    or why a side's tensors cannot all be located here."""

    def __init__(self, sides: list[list[Path]]) -> None:
        self._stop, self._done = threading.Event(), threading.Event()
        self.reason: str | None = None
        self.sides: list[dict[str, RawTensor]] = [{}, {}]
        self.same: dict[str, bool] = {}
        threading.Thread(target=self._run, args=(sides,), name="claims-diff",
                         daemon=True).start()

    def _run(self, sides: list[list[Path]]) -> None:
        try:
            self.sides = [_located(files) for files in sides]
            a, b = self.sides
            for key in sorted(a.keys() & b.keys()):
                if self._stop.is_set():
                    return
                self.same[key] = same_bytes(a[key], b[key])
        except NotReadable as exc:
            self.reason = str(exc)
        except Exception as exc:  # a crafted file our reader fails on: then nothing is checked
            self.reason = f"a file could not be read here ({type(exc).__name__}: {exc})"
        finally:
            self._done.set()

    def wait(self) -> None:
        """Until both sides are located and their shared tensors compared."""
        self._done.wait()

    def stop(self) -> None:
        """The job ended without a reply to check: stop comparing."""
        self._stop.set()

    def status(self, key: str, tied: dict[int, str]) -> str:
        """The status a diff row must have for `key`; `tied`: the side (0, 1) on which the
        loader says the key, not stored there, is the stored tensor named."""
        a, b = (side.get(key) or side.get(tied.get(n, "")) for n, side in enumerate(self.sides))
        if a is None or b is None:
            return TensorStatus.ONLY_IN_A if b is None else TensorStatus.ONLY_IN_B
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            return TensorStatus.DTYPE_OR_SHAPE_CHANGED
        same = self.same.get(key) if not tied else None
        if same is None:
            same = same_bytes(a, b)
        return TensorStatus.IDENTICAL if same else TensorStatus.CHANGED


def _located(files: list[Path]) -> dict[str, RawTensor]:
    """Every tensor of one side's files by key, a converted file's recorded aliases too."""
    out: dict[str, RawTensor] = {}
    for path in files:
        raw = open_raw(path)
        mine = {t.key: t for t in raw.tensors}
        mine |= {removed: mine[kept] for removed, kept in recorded_aliases(raw.metadata).items()
                 if kept in mine and removed not in mine}
        out |= mine
    return out


def same_bytes(a: RawTensor, b: RawTensor) -> bool:
    """Whether two tensors hold the same bytes, in element order, read in step (memcmp)."""
    import numpy as np

    left, rest = memoryview(b""), b.read()
    for chunk in a.read():
        view = memoryview(chunk).cast("B")
        while len(view):
            while not len(left):
                following = next(rest, None)
                if following is None:
                    return False
                left = memoryview(following).cast("B")
            n = min(len(view), len(left))
            if not _equal(np.frombuffer(view[:n], np.uint8), np.frombuffer(left[:n], np.uint8)):
                return False
            view, left = view[n:], left[n:]
    return not len(left) and not any(len(memoryview(c).cast("B")) for c in rest)


def check_diff(compared: SideBySide, result: dict[str, Any]) -> None:
    """Check a diff reply against both sides' bytes: every tensor of each side reported once,
    each row's status the one its dtype, shape and bytes give (`not_compared` may stand for
    any but identical: it claims less), and `identical` only when every row is; set `claims`,
    or SandboxError when a claim fails. A key a side does not store, which the loader says it
    ties to one it does (`stored_as_*`), is judged by that tensor's bytes: the tie itself is
    the loader's word, as are the rows' element counts and bit flips."""
    compared.wait()
    if compared.reason is not None:
        result["claims"] = ClaimCheck(reason=compared.reason).to_json()
        return
    problems: list[str] = []
    rows: dict[str, tuple[str, dict[int, str]]] = {}
    for rec in result["tensors"]:
        key = str(rec.get("key"))
        if key in rows:
            problems.append(f"{escape(key)} reported twice")
        tied = {n: str(rec.get(f"stored_as_{letter}")) for n, letter in enumerate("ab")
                if key not in compared.sides[n] and rec.get(f"stored_as_{letter}") is not None}
        rows[key] = (str(rec.get("status")), tied)
    keys = set().union(*(side.keys() for side in compared.sides)) | {
        k for k, (_s, tied) in rows.items() if tied}
    try:
        truths = {key: compared.status(key, rows.get(key, ("", {}))[1]) for key in sorted(keys)}
    except Exception as exc:  # a tied tensor our reader cannot compare: nothing is checked
        result["claims"] = ClaimCheck(reason=f"a tensor could not be compared here "
                                             f"({type(exc).__name__}: {exc})").to_json()
        return
    for key, truth in truths.items():
        said = rows.pop(key, (None, {}))[0]
        if said is None:
            problems.append(f"{escape(key)} is not reported")
        elif said != truth and not (said == TensorStatus.NOT_COMPARED
                                    and truth != TensorStatus.IDENTICAL):
            problems.append(f"{escape(key)} is {truth}, reported as {escape(said)}")
    problems += [f"{escape(key)} is no tensor of either side" for key in rows]
    if result.get("identical") and any(t != TensorStatus.IDENTICAL for t in truths.values()):
        problems.append("the checkpoints were reported identical")
    if problems:
        raise _refuted("comparison", problems, result.get("sandbox"))
    result["claims"] = ClaimCheck(checked=True, tensors=len(truths)).to_json()


def _record_problems(measured: list[tuple[RawTensor, Measured]], records: list[dict],
                     derived: dict[str, str], shape: RecordShape) -> list[str]:
    """How the worker's tensor records disagree with the file's tensors measured here: each
    once, with its dtype, shape and digest (its counts replaced by the ones measured here);
    `derived`: keys the file names without storing them, with their digests."""
    by_key: dict[str, list[dict]] = {}
    for rec in records:
        by_key.setdefault(str(rec.get("key")), []).append(rec)
    problems = []
    for t, m in measured:
        found = by_key.pop(t.key, [])
        if len(found) != 1:
            problems.append(f"{escape(t.key)} reported {len(found)} times")
            continue
        problems += _tensor_problems(t, m, found[0], shape)
    for key, found in by_key.items():
        if key not in derived:
            problems.append(f"{escape(key)} is no tensor of the file")
        elif [r.get(shape.digest) for r in found] != [derived[key]]:
            problems.append(f"{escape(key)}'s digest differs")
    return problems


def _tensor_problems(t: RawTensor, measured: Measured, rec: dict,
                     shape: RecordShape) -> list[str]:
    """How one worker record disagrees with the tensor read here; sets its checked counts."""
    key = escape(t.key)
    if rec.get("dtype") != t.dtype or list(rec.get("shape") or ()) != list(t.shape):
        return [f"{key} is {t.dtype} {list(t.shape)}, reported as "
                f"{escape(str(rec.get('dtype')))} {escape(str(rec.get('shape')))}"]
    if rec.get(shape.digest) != measured.digest:
        return [f"{key}'s digest differs"]
    return shape.counts(t, measured, rec)


def _inspected(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """An inspect record's NaN and Inf counts, replaced by the ones counted here, and its
    values' binary orders (what health judges a flipped exponent bit from) held against the
    file's."""
    if measured.nan is None:
        return []
    claimed = (rec.get("nan", 0), rec.get("inf", 0))
    rec.update(nan=measured.nan, inf=measured.inf)
    if claimed != (measured.nan, measured.inf):
        return [f"{escape(t.key)} holds {measured.nan} NaN and {measured.inf} Inf, reported as "
                f"{escape(str(claimed[0]))} and {escape(str(claimed[1]))}"]
    return _order_problems(t, measured, rec)


def _clear(tops: Tops) -> bool:
    """Whether a tensor's top orders prove it free of outliers: more than the tail of its
    values lie within the gap of its top (a lower bound, so never a tensor that holds one)."""
    return not tops.exact_only and tops.near > outlier_tail(tops.values)


def _order_problems(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """The record's largest magnitude must be of the file's top order; where the file's values
    may hold an outlier, its orders were counted here and replace the worker's `exponents`;
    elsewhere the worker's, if any, must show none."""
    from inspector.rawtensors.orders import order_of  # NumPy's import, beside the worker's start

    tops, key, absmax = measured.tops, escape(t.key), rec.get("absmax")
    if tops is None:
        return []
    if tops.top is not None and not (isinstance(absmax, (int, float)) and absmax
                                     and order_of(absmax) == tops.top):
        return [f"{key}'s largest value is of order 2^{tops.top}, reported as "
                f"{escape(str(absmax))}"]
    if measured.orders is not None:
        # the worker's form: counts only where enough values are non-zero to judge them
        if sum(c for _, c in measured.orders) >= MIN_JUDGED:
            rec["exponents"] = measured.orders
        else:
            rec.pop("exponents", None)
        return []
    told = rec.get("exponents")
    if told and magnitude_outliers(told, tops.gap)[0]:
        return [f"{key} reported with outliers its bytes do not hold"]
    return []


def _probed(t: RawTensor, measured: Measured, rec: dict) -> list[str]:
    """A weights-probe row: probed when the worker must probe it (a floating tensor of 2+
    dims), and its non-finite count, which keeps the device from being judged on it,
    replaced by the one counted here."""
    dtype = BY_NAME.get(t.dtype)
    must = dtype is not None and dtype.kind == "float" and len(t.shape) >= 2 and all(t.shape)
    if must and "repeats" not in rec:
        return [f"{escape(t.key)} was not probed"]
    if "repeats" not in rec or measured.nan is None:
        return []
    claimed, counted = rec.get("nonfinite", 0), measured.nan + measured.inf
    if counted:
        rec["nonfinite"] = counted
    else:
        rec.pop("nonfinite", None)
        rec.pop("first_nonfinite", None)
    if claimed != counted:
        return [f"{escape(t.key)} holds {counted} NaN/Inf, reported as {escape(str(claimed))}"]
    return []


@dataclass(frozen=True)
class RecordShape:
    """Where a kind of worker record keeps a tensor's digest, and how its counts are checked."""

    digest: str
    counts: Callable[[RawTensor, Measured, dict], list[str]]


INSPECTED = RecordShape("digest", _inspected)
PROBED = RecordShape("sha256", _probed)


def check_consistency(expected: Expected, result: dict[str, Any], probe: bool) -> None:
    """Check a weights-probe reply (`probe`: what the client asked for, never the reply's
    word) against the file's bytes: the rows' tensors, their NaN / Inf counts, and
    `consistent` against the rows; set `claims`, or SandboxError when a claim fails. A model
    run's outputs are only the worker's: its record says so."""
    if not probe:
        result["claims"] = ClaimCheck(reason="a model run's outputs exist only in the jailed "
                                      "worker").to_json()
        return
    if result.get("mode") != "probe":
        expected.stop()
        raise _refuted("weights probe", [f"the reply is a {escape(str(result.get('mode')))} "
                                         "run"], result.get("sandbox"))
    measured = expected.wait()
    if isinstance(measured, str):
        result["claims"] = ClaimCheck(reason=measured).to_json()
        return
    rows = result.get("tensors") or []
    problems = _record_problems(measured, rows, {}, PROBED)
    failed = {str(r.get("key")) for r in rows if r.get("status") == CheckStatus.FAIL}
    if result.get("consistent") is not (not failed):
        problems.append(f"consistent is {escape(str(result.get('consistent')))} with "
                        f"{len(failed)} failed rows")
    problems += [f"{escape(str(r.get('key')))}'s device copy differs, yet its row passed"
                 for r in result.get("resident_mismatches") or ()
                 if str(r.get("key")) not in failed]
    if problems:
        raise _refuted("weights probe", problems, result.get("sandbox"))
    result["nonfinite_weights"] = [r["key"] for r in rows if r.get("nonfinite")]
    result["claims"] = ClaimCheck(checked=True, tensors=len(measured)).to_json()


@dataclass(frozen=True)
class Asked:
    """What the client asked the conversion for (never the reply's echo of it): the `key`
    and `strip_prefix` selection, and whether tensors may be skipped. A `key` selection is
    not checked here (`check_conversion`)."""

    key: str | None
    strip_prefix: tuple[str, ...]
    skip_unsupported: bool


def check_conversion(expected: Expected, output_fd: int, result: dict[str, Any],
                     asked: Asked) -> None:
    """Check a convert reply against the input's and the output's bytes before the output is
    kept: set `claims`, the digests and the input's tensor count computed here; SandboxError
    when a claim fails."""
    started = time.perf_counter()
    measured = expected.wait()
    if asked.key:
        # `--key` walks the loaded object (a dotted key may be one name or a path); the flat
        # names located here cannot say which tensors it selects
        measured = "a --key selection is made only by the jailed loader"
    if isinstance(measured, str):
        result["claims"] = ClaimCheck(reason=measured).to_json()
        return
    if os.fstat(output_fd).st_size == 0:
        raise _refuted("conversion", ["the output is empty"], result.get("sandbox"))
    try:
        inputs = _selected(measured, asked)
    except CodedError as exc:  # two names after --strip-prefix: no output could hold both
        raise _refuted("conversion", [exc.message], result.get("sandbox")) from None
    with mmap.mmap(output_fd, 0, access=mmap.ACCESS_READ) as out:
        problems, digests = _conversion_problems(inputs, out, result, asked)
    if problems:
        raise _refuted("conversion", problems, result.get("sandbox"))
    result.update(digests=digests, tensors_in_input=len(inputs))
    result["claims"] = ClaimCheck(checked=True, tensors=len(inputs)).to_json()
    _timed(result, started)


def _timed(result: dict[str, Any], started: float) -> None:
    """The check's own seconds, beside the job's (`timing.claims_s`)."""
    if isinstance(result.get("timing"), dict):
        result["timing"]["claims_s"] = round(time.perf_counter() - started, 3)


def _selected(measured: list[tuple[RawTensor, Measured]], asked: Asked
              ) -> dict[str, tuple[RawTensor, Measured]]:
    """The input's tensors under the names the conversion asked for writes them as."""
    chosen = {t.key: (t, m) for t, m in measured}
    names = strip_prefixes(chosen, list(asked.strip_prefix))
    return {names[k]: t for k, t in chosen.items()}


def _conversion_problems(selected: dict[str, tuple[RawTensor, Measured]], out: mmap.mmap,
                         result: dict[str, Any], asked: Asked
                         ) -> tuple[list[str], dict[str, str]]:
    header = read_buffer(out, len(out))
    if header.refusal() is not None:
        return [f"the output's header: {header.refusal()}"], {}
    written = {e.key: e for e in header.entries}
    aliases = recorded_aliases(header.metadata)
    inputs = {name: t for name, (t, _m) in selected.items()}
    skipped = {str(s.get("key")) for s in result.get("tensors_skipped") or ()
               if isinstance(s, dict)} if asked.skip_unsupported else set()
    problems = [f"{escape(k)} was written but is no tensor of the input"
                for k in written if k not in inputs]
    digests: dict[str, str] = {}
    for name, t in inputs.items():
        entry = written.get(name)
        if entry is not None:
            if _safetensors_code(t.dtype) != entry.dtype.safetensors or (
                    list(entry.shape) != list(t.shape)):
                problems.append(f"{escape(name)} was written as {entry.dtype.name} "
                                f"{entry.shape}, the input holds {t.dtype} {list(t.shape)}")
                continue
            if _same_bytes(t, out, entry.begin, entry.end):
                digests[name] = selected[name][1].digest
            else:
                problems.append(f"{escape(name)}'s bytes differ from the input's")
        elif name in skipped and _safetensors_code(t.dtype) is None:
            continue
        elif not _is_alias(name, t, inputs, aliases, written):
            problems.append(f"{escape(name)} of the input is missing from the output")
    problems += [f"the output names {escape(k)} an alias, which is no dropped input tensor"
                 for k in aliases if k in written or k not in inputs]
    if {k: v for k, v in header.metadata.items() if k not in OWN_METADATA} != aliases:
        problems.append("the output's metadata holds entries that are not its recorded aliases")
    return problems, digests


def _safetensors_code(dtype: str) -> str | None:
    """The safetensors code of a dtype; None where a safetensors file cannot hold it."""
    known = BY_NAME.get(dtype)
    return known.safetensors if known is not None else None


def _is_alias(name: str, t: RawTensor, inputs: dict[str, RawTensor],
              aliases: dict[str, str], written: dict) -> bool:
    """Whether the output records `name` as an alias of a written tensor that is the same view
    of the same bytes in the input."""
    kept = aliases.get(name)
    other = inputs.get(kept) if kept in written else None
    return other is not None and (other.dtype, other.shape, other.view) == (
        t.dtype, t.shape, t.view)


def _same_bytes(t: RawTensor, out: mmap.mmap, begin: int, end: int) -> bool:
    """Whether the output's bytes [begin, end) are exactly the input tensor's bytes (read
    again from the page cache); the output's pages are given back once compared."""
    import numpy as np

    position = begin
    for chunk in t.read():
        stop = position + len(chunk)
        same = stop <= end and _equal(np.frombuffer(chunk, dtype=np.uint8),
                                      np.frombuffer(out, np.uint8, len(chunk), position))
        _drop(out, position, stop)
        if not same:
            return False
        position = stop
    return position == end


_LIBC = ctypes.CDLL(None)
_LIBC.memcmp.restype = ctypes.c_int
_LIBC.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte arrays of one length are equal: libc's memcmp, about twice
    `np.array_equal`'s speed (no temporary array), which keeps the check of a 1 GB
    conversion's output well inside a tenth of its time."""
    return len(a) == len(b) and (
        len(a) == 0 or _LIBC.memcmp(a.ctypes.data, b.ctypes.data, len(a)) == 0)


def _drop(out: mmap.mmap, start: int, stop: int) -> None:
    first = start // mmap.PAGESIZE * mmap.PAGESIZE
    if hasattr(mmap, "MADV_DONTNEED") and stop > first:
        out.madvise(mmap.MADV_DONTNEED, first, min(stop, len(out)) - first)
