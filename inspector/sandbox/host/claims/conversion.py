"""A conversion's reply, checked against the input's and the output's bytes."""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspector.checkpoint.extract import strip_prefixes
from inspector.checkpoint.results import ClaimCheck
from inspector.core.dtypes import BY_NAME
from inspector.core.errors import CodedError
from inspector.core.flatten import colliding_keys, flatten, unique_keys
from inspector.core.termtext import escape
from inspector.formats.safetensors_header import (
    ALIASES_KEY,
    ENCODED_KEY,
    read_buffer,
    recorded_aliases,
    recorded_specs,
)
from inspector.layout.torch_legacy import _next_pickle
from inspector.layout.torch_save import (
    NotCovered,
    TensorLayout,
    archive_members,
    main_pickle,
    walk_pickle,
)
from inspector.rawtensors.readers import CHUNK_BYTES, RawTensor
from inspector.sandbox.host.claims.bytes_equal import equal
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.claims.refusal import algorithm_problems, refuted, timed

if TYPE_CHECKING:
    from inspector.rawtensors.values import Measured


OWN_METADATA = frozenset({"format", ENCODED_KEY, ALIASES_KEY})
"""`__metadata__` entries a conversion writes that are not aliases."""
SIDECAR_FORMAT = "ckpt-inspector-sidecar/1"
"""The sidecar document's `format` (`sandbox.worker.convert.SIDECAR_FORMAT`)."""
UNCHECKED_KEY = "unchecked"
"""The sidecar entry that says its values are the jailed loader's word, and why."""
_PLAIN = (bool, int, float, str)


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
    when a claim fails. Whatever the input, the output's SHA-256 is computed here from the
    written file, the tensor and byte totals, the aliases and the encoded tensors' rebuild
    specs read from its header, the selection (`key`, `strip_prefix`) the one asked, and the
    digest algorithm this process's own; where the input is read here, the sidecar's values,
    the cloned views and the views made contiguous are the ones its bytes give, and elsewhere
    the sidecar says they are the jailed loader's (`UNCHECKED_KEY`)."""
    started = time.perf_counter()
    if os.fstat(output_fd).st_size == 0:
        raise refuted("conversion", ["the output is empty"], result.get("sandbox"))
    measured = expected.wait()
    if asked.key:
        # `--key` walks the loaded object (a dotted key may be one name or a path); the flat
        # names located here cannot say which tensors it selects
        measured = "a --key selection is made only by the jailed loader"
    with mmap.mmap(output_fd, 0, access=mmap.ACCESS_READ) as out:
        sha256 = _hashing(out)  # beside the comparison: hashlib lets go of the GIL
        try:
            if isinstance(measured, str):
                problems, digests, inputs = [], {}, {}
            else:
                try:
                    inputs = _selected(measured, asked)
                except CodedError as exc:  # two names after --strip-prefix: none holds both
                    raise refuted("conversion", [exc.message], result.get("sandbox")) from None
                problems, digests = _conversion_problems(inputs, out, result, asked)
            header = read_buffer(out, len(out))
        finally:
            sha256.exception()  # the mapping outlives the hashing thread's view of it
        problems += [p for p in _written_problems(header, sha256.result(), result)
                     if p not in problems]
    problems += algorithm_problems(result)
    values_unchecked = None
    if isinstance(measured, str):
        _mark_unchecked(result, measured)
    elif header.refusal() is None:
        leaf_problems, values_unchecked = _leaf_problems(expected, inputs, header, result, asked)
        problems += leaf_problems
    if problems:
        raise refuted("conversion", problems, result.get("sandbox"))
    # what was asked is the client's, what was written the output's own header
    result.update(sha256=sha256.result(), key=asked.key, strip_prefix=list(asked.strip_prefix),
                  aliases=recorded_aliases(header.metadata),
                  encoded=recorded_specs(header.metadata))
    if isinstance(measured, str):
        result["claims"] = ClaimCheck(reason=measured).to_json()
        return
    result.update(digests=digests, tensors_in_input=len(inputs))
    # the tensors are checked; a reason beside that says the rest (the sidecar's values, the
    # values not kept, the cloned views) is the jailed loader's word, and why
    result["claims"] = ClaimCheck(checked=True, tensors=len(inputs),
                                  reason=values_unchecked).to_json()
    timed(result, started)


def _hashing(out: mmap.mmap) -> Future[str]:
    """The SHA-256 of the whole output, computed on a thread of its own."""
    done: Future[str] = Future()

    def run() -> None:
        try:
            digest = hashlib.sha256()
            with memoryview(out) as view:
                for start in range(0, len(out), CHUNK_BYTES):
                    digest.update(view[start:start + CHUNK_BYTES])
            done.set_result(digest.hexdigest())
        except BaseException as exc:  # the waiter must not wait for ever
            done.set_exception(exc)

    threading.Thread(target=run, name="claims-sha256", daemon=True).start()
    return done


def _written_problems(header, sha256: str, result: dict[str, Any]) -> list[str]:
    """How the reply's account of the written file differs from the file: its SHA-256, and
    the tensors and bytes of tensor data its header lists."""
    if header.refusal() is not None:
        return [f"the output's header: {header.refusal()}"]
    problems = []
    if result.get("sha256") != sha256:
        problems.append(f"the output's SHA-256 is {sha256}, reported as "
                        f"{escape(str(result.get('sha256')))}")
    counted = {"tensors_written": len(header.entries),
               "bytes_written": sum(e.end - e.begin for e in header.entries)}
    problems += [f"the output holds {value} {name.replace('_', ' ')}, reported as "
                 f"{escape(str(result.get(name)))}"
                 for name, value in counted.items() if result.get(name) != value]
    return problems


def _mark_unchecked(result: dict[str, Any], reason: str) -> None:
    """A sidecar whose values could not be read here says so, in itself."""
    document = result.get("sidecar_document")
    if isinstance(document, dict):
        document[UNCHECKED_KEY] = (f"these values are as reported by the jailed loader; not "
                                   f"checked here: {reason}")


@dataclass(frozen=True)
class _Leaves:
    """An input's leaves as the worker's loader gives them, read here without running any:
    its tensors (a pickle's as the layout walk's record of each: storage, offset, shape and
    stride; a GGUF file's as None, each a row-major view of bytes of its own), its plain
    values, and the records of the other values (a GGUF file's `KEY::ggml`)."""

    tensors: list[tuple[str, Any]]
    plain: list[tuple[str, object]]
    described: list[dict]

    def keys(self) -> list[str]:
        """Every leaf's name, in the order the worker selects them (tensors, then values)."""
        return [k for k, _ in self.tensors] + [k for k, _ in self.plain] + [
            r["key"] for r in self.described]


def _leaf_problems(expected: Expected, inputs: dict[str, RawTensor], header,
                   result: dict[str, Any], asked: Asked) -> tuple[list[str], str | None]:
    """How the sidecar document and the cloned views differ from what the input holds, read
    here without running it (its plain values and other records, and which tensors share a
    storage); for a file the readers cannot read so, none, and why (the sidecar marked)."""
    fmt = expected.file.format if expected.file is not None else None
    try:
        leaves = _input_leaves(expected.path, fmt)  # the file `expected` measured
    except (NotCovered, OSError, ValueError) as exc:
        why = f"the input's values could not be read here ({exc})"
        _mark_unchecked(result, why)
        return [], why
    try:
        names = strip_prefixes(leaves.keys(), list(asked.strip_prefix))
    except CodedError as exc:  # a value and a tensor under one name: the worker's refusal
        return [exc.message], None
    if {names[k] for k, _ in leaves.tensors} != set(inputs):
        return ["the input's tensors are not the ones located here"], None
    described = [{**r, "key": names[r["key"]]} for r in leaves.described]
    problems = _sidecar_problems([(names[k], v) for k, v in leaves.plain], described, result,
                                 asked)
    kept = {e.key for e in header.entries}
    stored = {names[k]: leaf for k, leaf in leaves.tensors
              if names[k] in kept or names[k] in recorded_aliases(header.metadata)}
    cloned, made = _views(stored, kept)
    for field, name, listed in (("cloned_views", "cloned views", cloned),
                                ("made_contiguous", "views made contiguous", made)):
        told = result.get(field)
        if not isinstance(told, list) or sorted(map(str, told)) != listed or len(
                told) != len(listed):
            problems.append(f"the {name} are {', '.join(map(escape, listed)) or 'none'}, "
                            f"reported as {escape(str(told))}")
    return problems, None


def _views(stored: dict[str, Any], kept: set[str]) -> tuple[list[str], list[str]]:
    """The written tensors the worker must clone (views sharing a storage that do not cover
    it) and those it must make row-major (the other views that are not)."""
    walked = {k: leaf for k, leaf in stored.items() if leaf is not None}
    sharing: dict[str, int] = {}
    for leaf in walked.values():
        if leaf.storage.nbytes:
            sharing[leaf.storage.key] = sharing.get(leaf.storage.key, 0) + 1
    cloned = sorted(k for k, leaf in walked.items() if k in kept
                    and sharing.get(leaf.storage.key, 0) > 1 and not _covers_storage(leaf))
    made = sorted(k for k, leaf in walked.items() if k in kept and k not in cloned
                  and not _row_major(leaf))
    return cloned, made


def _is_plain(leaf: object) -> bool:
    return leaf is None or type(leaf) in _PLAIN


def _input_leaves(path: Path, fmt: str | None) -> _Leaves:
    """Every leaf of the input: a torch zip archive's or legacy stream's pickle, keyed as
    torch flattens it, or a GGUF file's tensors and `KEY::ggml` records (`objects`, as the
    worker's `tensors.gguf_load` gives them). NotCovered for another format."""
    if fmt == "gguf":
        from inspector.sandbox.host.claims.objects import gguf_leaves

        names, records = gguf_leaves(str(path))
        return _Leaves([(name, None) for name in names], [], records)
    leaves = unique_keys(flatten(_input_root(path, fmt)))
    return _Leaves([(k, leaf) for k, leaf in leaves if not _is_plain(leaf)],
                   [(k, leaf) for k, leaf in leaves if _is_plain(leaf)], [])


def input_collides(path: Path, fmt: str | None) -> bool:
    """Whether two leaves of the input's pickle take one name once flattened, or a tensor
    the name a safetensors header keeps for its metadata (what the worker refuses as
    `key_collision` when nothing is selected). NotCovered for a format not walked here."""
    root = _input_root(path, fmt)
    return bool(colliding_keys(root)) or any(
        key == "__metadata__" and not _is_plain(leaf) for key, leaf in flatten(root))


def _input_root(path: Path, fmt: str | None) -> object:
    """A torch zip archive's or legacy stream's pickle as the layout walk rebuilds it
    (`layout.torch_save.walk_pickle`), nothing of it run; NotCovered for another format."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if fmt == "pytorch-zip":
            data = main_pickle(buf, archive_members(buf), "data.pkl")
        elif fmt == "pytorch-legacy":
            end = 0
            for _ in range(4):  # magic, protocol, system info, then the object
                data, end = _next_pickle(buf, end)
        else:
            raise NotCovered(f"a {fmt} file's values are read only by the jailed loader")
    root, _ = walk_pickle(data, floats=True, legacy=fmt == "pytorch-legacy", int_keys=True)
    return root


def _row_major(leaf: Any) -> bool:
    """Whether a walked tensor is row-major as torch tests it (`Tensor.is_contiguous`: one
    without elements always is)."""
    layout = TensorLayout("", leaf.dtype, leaf.itemsize, leaf.shape, leaf.stride, 0)
    return math.prod(leaf.shape) == 0 or layout.contiguous


def _covers_storage(leaf: Any) -> bool:
    """Whether a walked tensor is its whole storage, row-major from its start (the worker's
    test of a view it need not clone)."""
    layout = TensorLayout("", leaf.dtype, leaf.itemsize, leaf.shape, leaf.stride, 0)
    return (leaf.offset == 0 and layout.contiguous
            and math.prod(leaf.shape) * leaf.itemsize == leaf.storage.nbytes)


def _sidecar_problems(plain: list[tuple[str, object]], described: list[dict],
                      result: dict[str, Any], asked: Asked) -> list[str]:
    """How the sidecar document, and the reply's list of the values moved to it, differ from
    the input's plain values and other records (`described`: none JSON holds) read here."""
    from inspector.sandbox.host.claims.objects import record as describe_object

    skipped = result.get("tensors_skipped") or []
    document: dict[str, Any] | None = None
    if plain or described or skipped:
        kept = [(k, v) for k, v in plain if not (isinstance(v, float) and not math.isfinite(v))]
        document = {"format": SIDECAR_FORMAT,
                    "values": {k: _typed(v) for k, v in kept},
                    "types": {k: describe_object(k, v)["type"] for k, v in kept},
                    "not_serializable": [describe_object(k, v) for k, v in plain
                                         if (k, v) not in kept] + described}
        if skipped:
            document["tensors_skipped"] = skipped
        if asked.key or asked.strip_prefix:
            document.update(key=asked.key, strip_prefix=list(asked.strip_prefix))
    told = result.get("sidecar_document")
    said = ({k: _typed(v) if k == "values" else v for k, v in told.items()}
            if isinstance(told, dict) and isinstance(told.get("values"), dict) else told)
    if said != document:
        return ["the sidecar's values are not the input's"
                + (f" ({_first_difference(document, said)})" if document else "")]
    if result.get("objects_moved") != list(document["values"] if document else ()) or (
            result.get("not_serializable") != (document["not_serializable"] if document
                                               else [])):
        return ["the values moved to the sidecar are not the input's"]
    return []


def _typed(value: object) -> object:
    """A plain value with its type, so that 1, 1.0 and True differ; a mapping's values so."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return (type(value).__name__, value)


def _first_difference(document: dict, said: object) -> str:
    """The first of the input's values the sidecar does not hold as the input does."""
    values = said.get("values") if isinstance(said, dict) else None
    for key, (_, value) in document["values"].items():
        if not isinstance(values, dict) or values.get(key) != _typed(value):
            got = values.get(key) if isinstance(values, dict) else None
            return (f"{escape(key)} is {value!r}, written as "
                    f"{escape(repr(got[1] if isinstance(got, tuple) else got))}")
    return "entries the input does not hold"


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
    left_out: list[str] = []
    for name, t in inputs.items():
        entry = written.get(name)
        if entry is not None:
            if safetensors_code(t.dtype) != entry.dtype.safetensors or (
                    list(entry.shape) != list(t.shape)):
                problems.append(f"{escape(name)} was written as {entry.dtype.name} "
                                f"{entry.shape}, the input holds {t.dtype} {list(t.shape)}")
                continue
            if _same_bytes(t, out, entry.begin, entry.end):
                digests[name] = selected[name][1].digest
            else:
                problems.append(f"{escape(name)}'s bytes differ from the input's")
        elif name in skipped and safetensors_code(t.dtype) is None:
            left_out.append(name)
        elif not _is_alias(name, t, inputs, aliases, written):
            problems.append(f"{escape(name)} of the input is missing from the output")
    problems += _skipped_problems(result.get("tensors_skipped") or [], left_out, inputs)
    problems += [f"the output names {escape(k)} an alias, which is no dropped input tensor"
                 for k in aliases if k in written or k not in inputs]
    if {k: v for k, v in header.metadata.items() if k not in OWN_METADATA} != aliases:
        problems.append("the output's metadata holds entries that are not its recorded aliases")
    if recorded_specs(header.metadata) or ENCODED_KEY in header.metadata:
        # no tensor located here is quantized or sparse: nothing of the input was encoded
        problems.append("the output records encoded tensors, which the input does not hold")
    return problems, digests


def _skipped_problems(told: object, left_out: list[str], inputs: dict[str, RawTensor]
                      ) -> list[str]:
    """How the reply's tensors left out (what the `skipped` lines and the sidecar are written
    from) differ from those of the input whose dtype safetensors cannot hold: each with that
    dtype and the worker's one reason for a dense tensor (`worker.convert._unsupported`)."""
    made = sorted(({"key": k, "dtype": inputs[k].dtype,
                    "reason": f"safetensors has no dtype for {inputs[k].dtype}"}
                   for k in left_out), key=lambda r: r["key"])
    if isinstance(told, list) and sorted(
            told, key=lambda r: str(r.get("key") if isinstance(r, dict) else r)) == made:
        return []
    keys = [r.get("key") if isinstance(r, dict) else r for r in told] if isinstance(
        told, list) else told
    listed = ', '.join(map(escape, sorted(left_out))) or 'none'
    if isinstance(keys, list) and sorted(map(str, keys)) == sorted(left_out):
        return [f"the tensors left out ({listed}) are reported with another dtype or reason"]
    return [f"the tensors left out are {listed}, reported as {escape(str(keys)[:200])}"]


def safetensors_code(dtype: str) -> str | None:
    """The safetensors code of a dtype; None where a safetensors file cannot hold it."""
    known = BY_NAME.get(dtype)
    return known.safetensors if known is not None else None


def _is_alias(name: str, t: RawTensor, inputs: dict[str, RawTensor],
              aliases: dict[str, str], written: dict) -> bool:
    """Whether the output records `name` as an alias of a written tensor that is the same view
    of the same bytes in the input."""
    kept = aliases.get(name)
    other = inputs.get(kept) if kept in written else None
    return other is not None and same_view(other, t)


def same_view(a: RawTensor, b: RawTensor) -> bool:
    """Whether two tensors located in one file are the same view of the same bytes: dtype,
    shape and where they lie (`RawTensor.view`: offset and stride). What a tie or an alias
    must be before it is believed (`_is_alias`, `diff.check_diff`)."""
    return (a.dtype, a.shape, a.view) == (b.dtype, b.shape, b.view)


def _same_bytes(t: RawTensor, out: mmap.mmap, begin: int, end: int) -> bool:
    """Whether the output's bytes [begin, end) are exactly the input tensor's bytes (read
    again from the page cache); the output's pages are given back once compared."""
    import numpy as np

    position = begin
    for chunk in t.read():
        stop = position + len(chunk)
        same = stop <= end and equal(np.frombuffer(chunk, dtype=np.uint8),
                                      np.frombuffer(out, np.uint8, len(chunk), position))
        _drop(out, position, stop)
        if not same:
            return False
        position = stop
    return position == end


def _drop(out: mmap.mmap, start: int, stop: int) -> None:
    first = start // mmap.PAGESIZE * mmap.PAGESIZE
    if hasattr(mmap, "MADV_DONTNEED") and stop > first:
        out.madvise(mmap.MADV_DONTNEED, first, min(stop, len(out)) - first)
