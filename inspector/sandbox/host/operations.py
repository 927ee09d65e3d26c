"""The operations on one checkpoint, each a job in a jailed worker: inspect, convert, digests
and diff, with the static scan first.

A file the scan calls dangerous is not handed to the worker unless the caller overrides, and
even then it is only loaded with weights_only=True inside the jail (`admission`). For
`inspect_one` the file's SHA-256 is computed in a thread of this process while the worker loads
and hashes tensors, so the two use both cores. A job's limits are `protocol.Limits` scaled to
its input's size, then the caller's own (`limits`).
"""

from __future__ import annotations

import json
import mmap
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.checkpoint.results import ConversionResult, DiffResult
from inspector.core.atomic import OutputExistsError, atomic_write, write_text_atomic
from inspector.core.progress import Cancelled, CancelToken
from inspector.core.termtext import escape
from inspector.integrity.hashing import DIGEST_ALGORITHM, sha256_file
from inspector.integrity.shard_index import ShardError, ShardIndex, check_contents
from inspector.layout.torchscript import CODE_ARCHIVES, NotCovered, describe_code_archive
from inspector.sandbox.host.admission import check_loadable, static_scan
from inspector.sandbox.host.claims.conversion import Asked, check_conversion
from inspector.sandbox.host.claims.diff import SideBySide, check_diff
from inspector.sandbox.host.claims.errors import Facts, checked_error
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.claims.inspection import check_digests, check_inspection
from inspector.sandbox.host.claims.refusal import check_shape
from inspector.sandbox.host.events import ProtocolViolation
from inspector.sandbox.host.jobs import EventFn, SandboxError, run_job
from inspector.sandbox.protocol import Limits
from inspector.scan.dcp_folder import folder_files, is_dcp_folder
from inspector.scan.result import ScanResult
from inspector.shards.shard_set import resolve as resolve_shards


def _input(path: Path) -> tuple[int, list[str]]:
    """The input's size, and a DCP folder's files (empty for a file): the jail lets the worker
    read them and counts them in its memory allowance, as it counts one mapped file."""
    if is_dcp_folder(path):
        files = folder_files(path)
        return sum(p.stat().st_size for p in files), [str(p) for p in files]
    return path.stat().st_size, []


def _limits(size: int, limits: dict | None) -> dict:
    """A request's limits for an input of `size` bytes (`Limits.for_input`), then the caller's."""
    return {**Limits.for_input(size).to_json(), **(limits or {})}


class _FileHash:
    """The file's SHA-256, computed on a second core while the worker runs."""

    def __init__(self, path: Path, cancel: CancelToken | None) -> None:
        self.digest: str | None = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, args=(path, cancel), daemon=True)
        self._thread.start()

    def _run(self, path: Path, cancel: CancelToken | None) -> None:
        try:
            self.digest = sha256_file(path, cancel=cancel)
        except (OSError, Cancelled) as exc:
            self.error = str(exc) or type(exc).__name__

    def result(self) -> str | None:
        self._thread.join()
        return self.digest


@dataclass(frozen=True)
class InspectOptions:
    """How an inspection runs: the globals the user allowed, whether a dangerous file may load
    anyway, where its events go, its cancellation, its time limit and the worker's limits."""

    allow_globals: tuple[str, ...] = ()
    override_dangerous: bool = False
    on_event: EventFn | None = None
    cancel: CancelToken | None = None
    timeout: float | None = None
    limits: dict | None = None


def inspect_one(path: str | os.PathLike[str], options: InspectOptions = InspectOptions(),
                scan: ScanResult | None = None) -> dict:
    """Scan, hash and load one file (or a DCP folder) in the jail; the `inspect` contract
    (error set instead of raising). `scan`: the file's scan, made before (its shard's)."""
    target = Path(path).resolve()
    allow = list(options.allow_globals)
    cancel = options.cancel
    size, files = _input(target)
    report: dict = {"path": str(target), "size": size, "sha256": None, "format": None,
                    "scan": None, "sandbox": None, "digest_algorithm": DIGEST_ALGORITHM,
                    "tensors": [], "objects": [], "error": None, "allowed_globals": allow,
                    "health": None, "unique_storage": None, "architecture": None,
                    "resume": None}
    hasher = None if files else _FileHash(target, cancel)  # a folder has no one SHA-256
    # what the bytes say, measured while the worker runs: once the scan has admitted the file,
    # since the worker waits for the scan and a worker that skips torch is ready before it
    expected = Expected(target, counts=True, start=False)
    admitted: list[ScanResult] = []  # the host's own scan, once the gate has run

    def admit() -> dict:
        scanned = scan or static_scan(target)
        admitted.append(scanned)
        report.update(scan=scanned.to_json(), format=scanned.format)
        check_loadable(scanned, allow, options.override_dangerous)
        expected.start()
        return {"format": scanned.format}

    try:
        request = {"op": "inspect", "path": str(target), "paths": files, "allow_globals": allow,
                   "limits": _limits(size, options.limits)}
        # The scan runs while the worker starts; the worker opens nothing until it passes.
        result = inspect_reply(request, on_event=options.on_event, cancel=cancel,
                               timeout=options.timeout, gate=admit)
        report.update(sandbox=result["sandbox"], tensors=result["tensors"],
                      objects=result["objects"], timing=result["timing"],
                      digest_algorithm=result.get("digest_algorithm", DIGEST_ALGORITHM),
                      unique_storage=result.get("unique_storage"))
        check_inspection(expected, report)  # the reply is a claim until it passes
        kind = admitted[0].format if admitted else None
        if kind in CODE_ARCHIVES:
            report.update(_code_report(target, kind))
    except SandboxError as exc:
        expected.stop()
        exc = checked_error(exc, Facts(admitted, tuple(allow)))  # a claim, as a reply is
        report["error"] = exc.to_json()
        report["sandbox"] = exc.sandbox
    report["sha256"] = hasher.result() if hasher is not None else None
    if cancel is not None:
        cancel.check()
    return report


def _code_report(path: Path, kind: str) -> dict:
    """A TorchScript or torch.export archive's code files and what is flagged in them, read
    here from the zip (`layout.torchscript`, which runs nothing), never the worker's word."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            return describe_code_archive(mm, kind).code_report()
        except NotCovered as exc:
            raise SandboxError("not_covered", f"{kind} archive's code not read: {exc}") from None


def inspect_reply(request: dict, on_event: EventFn | None = None, **job: Any) -> dict:
    """An `inspect` job's reply (`run_job`'s keyword arguments), unchecked: the worker sends
    each tensor's record once, in a `tensors` event of several (`records`), and its result
    names their order (`tensor_keys`); the records are gathered here into the result's
    `tensors`, and `on_event` gets each as a `tensor` event of its own (and each record of an
    `objects` event as an `object` event: the result lists them as `objects`)."""
    gathered: list[dict] = []

    def gather(event: dict) -> None:
        kind = event.get("type")
        if kind not in _SEVERAL:
            if on_event is not None:
                on_event(event)
            return
        records = event.get("records")
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ProtocolViolation(f"a {kind} line whose records are not JSON objects")
        if kind == "tensors":
            gathered.extend(records)
        if on_event is not None:
            for record in records:
                on_event({"type": _SEVERAL[kind], **record})  # the app keeps it as its row

    result = run_job(request, on_event=gather, **job)
    result["tensors"] = _in_order(gathered, result.pop("tensor_keys", None))
    return result


_SEVERAL = {"tensors": "tensor", "objects": "object"}
"""An `inspect` worker's lines of several records -> the event each record is handed on as."""


def _in_order(records: list[dict], keys: object) -> list[dict]:
    """`records` in the order of `keys` (the worker's pool finishes large tensors first); a
    record with a key not listed keeps its place after those listed (the claims check says
    what is wrong with it)."""
    if not isinstance(keys, list):
        return records
    place = {key: n for n, key in enumerate(keys) if isinstance(key, str)}

    def position(record: dict) -> int:
        key = record.get("key")
        return place.get(key, len(place)) if isinstance(key, str) else len(place)

    return sorted(records, key=position)


def sidecar_path(output: Path) -> Path:
    """Where the non-tensor data of a conversion goes: `<output stem>.sidecar.json`."""
    return output.with_name(output.stem + ".sidecar.json")


def convert_file(
    path: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    cancel: CancelToken | None = None,
    timeout: float | None = None,
    limits: dict | None = None,
    skip_unsupported: bool = False,
    key: str | None = None,
    strip_prefix: Iterable[str] = (),
) -> dict:
    """Convert to safetensors inside the jail, verified bit for bit; the conversion report.

    `key` converts only what lies under that dotted path of the loaded object, and
    `strip_prefix` removes those prefixes from the names (`sandbox.worker.convert.select_leaves`).

    Raises SandboxError (and leaves nothing behind) when the conversion cannot be done, or
    (code `unsupported_tensors`) would leave tensors out and skip_unsupported is not set.
    """
    source = Path(path).resolve()
    out = Path(output).resolve() if output else source.with_suffix(".safetensors")
    sidecar = sidecar_path(out)
    for target in (out, sidecar):
        if target.exists() and os.path.samefile(target, source):
            raise SandboxError("output_is_input", f"refusing to overwrite the input {source}")
        if target.exists() and not overwrite:
            raise SandboxError("output_exists",
                               f"{target} exists; refusing to overwrite it (--force replaces it)")
    allow = list(allow_globals)
    size, files = _input(source)
    scanned: list[ScanResult] = []

    def admit() -> dict:
        scanned.append(static_scan(source))
        check_loadable(scanned[0], allow, override_dangerous)
        return {"format": scanned[0].format}

    request = {"op": "convert", "path": str(source), "paths": files, "allow_globals": allow,
               "limits": _limits(size, limits), "skip_unsupported": skip_unsupported,
               "key": key, "strip_prefix": list(strip_prefix),
               # Views are cloned, so the output may exceed the input; this bounds it.
               "output_bytes": 4 * size + (64 << 20)}
    expected = Expected(source, counts=False)  # the input's bytes, while the worker runs
    asked = Asked(key, tuple(request["strip_prefix"]), skip_unsupported)
    try:
        with atomic_write(out, overwrite=overwrite) as fh:
            request["output_fd"] = fh.fileno()
            try:
                result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout,
                                 pass_fds=(fh.fileno(),), gate=admit)
            except SandboxError as exc:  # its code chooses the exit status: a claim too
                expected.stop()
                raise checked_error(exc, Facts(scanned, tuple(allow), asked)) from None
            check_shape("conversion", ConversionResult, result)  # before any of it is read
            if not result.get("verified"):
                # nothing is kept either way; the mismatches are only the worker's word
                raise SandboxError("verify_failed", "the jailed worker says the output it read "
                                   "back does not match the input (nothing kept): "
                                   + ", ".join(escape(str(m)) for m in
                                               result.get("mismatches", [])[:8]),
                                   sandbox=result.get("sandbox"))
            # "verified" is the worker's word; the output is kept only once it is checked here
            check_conversion(expected, fh.fileno(), result, asked)
        sidecar_doc = result.pop("sidecar_document", None)
        result["sidecar"] = None
        if sidecar_doc is not None:
            write_text_atomic(sidecar, json.dumps(sidecar_doc, indent=1, allow_nan=False) + "\n",
                              overwrite=overwrite)
            result["sidecar"] = str(sidecar)
    except OutputExistsError as exc:
        raise SandboxError("output_exists", str(exc)) from None
    except OSError as exc:
        raise SandboxError("output_unwritable",
                           f"cannot write {out.parent}: {exc.strerror or exc}") from None
    finally:
        expected.stop()  # a job that failed leaves nothing to check
    result.update(input=str(source), output=str(out),
                  scan_verdict=scanned[0].verdict if scanned else None)
    return result


def _admit_for_integrity(path: Path, allow: list[str], override_dangerous: bool
                         ) -> ScanResult:
    """Scan one input and refuse a dangerous pickle as `inspect` would (safetensors has none);
    the scan."""
    scan = static_scan(path)
    if scan.format != "safetensors":
        check_loadable(scan, allow, override_dangerous)
    return scan


def tensor_digests(
    path: str | os.PathLike[str],
    *,
    cancel: CancelToken | None = None,
    allow_globals: Iterable[str] = (),
    override_dangerous: bool = False,
    on_event: EventFn | None = None,
    timeout: float | None = None,
) -> list:
    """Every tensor of a checkpoint with its content digest (`TensorEntry`s), from the jail;
    where the file's bytes could not check them, each carries why (`unchecked`)."""
    from inspector.integrity.manifest import TensorEntry

    target = Path(path).resolve()
    allow = list(allow_globals)
    scan = _admit_for_integrity(target, allow, override_dangerous)
    request = {
        "op": "digests",
        "path": str(target),
        "allow_globals": allow,
        "limits": _limits(target.stat().st_size, None),
    }
    expected = Expected(target, counts=False)  # the file's own digests, while the worker runs
    try:
        try:
            result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout)
        except SandboxError as exc:
            expected.stop()
            raise checked_error(exc, Facts([scan], tuple(allow))) from None
        check_digests(expected, result)  # a worker's digests are claims until they pass
    finally:
        expected.stop()
    claims = result.get("claims") or {}
    # a digest nothing here could check carries why: verify and manifest say it is the loader's
    unchecked = None if claims.get("checked") else (claims.get("reason") or "no check was made")
    return [
        TensorEntry(
            key=r["key"],
            dtype=r["dtype"],
            shape=tuple(r["shape"]),
            digest=r["digest"],
            digest_algorithm=DIGEST_ALGORITHM,  # each one checked named so (check_digests)
            unchecked=unchecked,
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
    """Compare two checkpoints of any formats tensor by tensor; the `diff` contract. Either may
    be a folder or a `*.index.json`: its shards are compared key by key in the same worker."""
    try:
        sets = [resolve_shards(a), resolve_shards(b)]
    except ShardError as exc:
        raise SandboxError("bad_shards", str(exc)) from None
    except OSError as exc:
        raise SandboxError("unreadable", f"{exc.filename}: {exc.strerror or exc}") from None
    allow = list(allow_globals)
    files = [[p.resolve() for p in s.files] for s in sets]
    every = list(dict.fromkeys(p for side in files for p in side))
    scans = [_admit_for_integrity(path, allow, override_dangerous) for path in every]
    # the worker opens the links' targets; output names the files as the user reaches them
    sides = [{"path": str(s.path if s.index is not None else side[0]),
              "files": [str(p) for p in side], "names": [p.name for p in s.files]}
             for s, side in zip(sets, files, strict=True)]
    inputs = [_input(p) for p in every]  # a DCP folder's files are read too
    request = {
        "op": "diff",
        "paths": [str(p) for p in every] + [f for _size, fs in inputs for f in fs],
        "sides": sides,
        "allow_globals": allow,
        "limits": _limits(sum(size for size, _fs in inputs), None),
    }
    # both sides' bytes, compared here while the worker runs
    compared = SideBySide(files, [side["names"] for side in sides])
    try:
        try:
            result = run_job(request, on_event=on_event, cancel=cancel, timeout=timeout)
        except SandboxError as exc:
            compared.stop()
            raise checked_error(exc, Facts(scans, tuple(allow))) from None
        check_diff(compared, result)  # the rows' statuses are claims until they pass
    finally:
        compared.stop()
    for n, (letter, shard_set) in enumerate(zip("ab", sets, strict=True)):
        index = shard_set.index
        # which shard stores each key: as read here, else (nothing checked) the loader's word
        stored = ({key: sides[n]["names"][number] for key, number in compared.stored[n].items()}
                  if compared.reason is None else _loaders_shards(result["tensors"], letter))
        result[letter]["path"] = sides[n]["path"]  # the path asked about, not its echo
        result[letter]["index"] = str(index.path) if index is not None else None
        result[letter]["problems"] = _index_problems(index, stored)
    return result


def _loaders_shards(records: list[dict], letter: str) -> dict[str, str]:
    """Which shard of one side the loader says stores each key (a row it reads through a tie
    or an alias is stored under another key)."""
    return {record["key"]: record[f"shard_{letter}"] for record in records
            if record.get(f"shard_{letter}") is not None
            and record.get(f"stored_as_{letter}") is None}


def _index_problems(index: ShardIndex | None, stored: dict[str, str]) -> list[dict]:
    """How the shard that stores each key of one side disagrees with that side's index."""
    if index is None:
        return []
    found: dict[str, list[str]] = {shard: [] for shard in index.shards()}
    for key, shard in stored.items():
        found.setdefault(shard, []).append(key)
    return [p.to_json() for p in check_contents(index, found)]


def diff_result(a: str | os.PathLike[str], b: str | os.PathLike[str],
                **options: Any) -> DiffResult:
    """`diff_files` (same options), its diff contract typed."""
    return DiffResult.from_json(diff_files(a, b, **options))
