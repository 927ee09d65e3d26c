"""A conversion's reply, checked against the input's and the output's bytes."""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inspector.checkpoint.extract import strip_prefixes
from inspector.checkpoint.results import ClaimCheck
from inspector.core.dtypes import BY_NAME
from inspector.core.errors import CodedError
from inspector.core.termtext import escape
from inspector.formats.safetensors_header import (
    ALIASES_KEY,
    ENCODED_KEY,
    read_buffer,
    recorded_aliases,
)
from inspector.rawtensors.readers import RawTensor
from inspector.sandbox.host.claims.bytes_equal import equal
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.claims.refusal import refuted, timed

if TYPE_CHECKING:
    from inspector.rawtensors.values import Measured


OWN_METADATA = frozenset({"format", ENCODED_KEY, ALIASES_KEY})
"""`__metadata__` entries a conversion writes that are not aliases."""


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
        raise refuted("conversion", ["the output is empty"], result.get("sandbox"))
    try:
        inputs = _selected(measured, asked)
    except CodedError as exc:  # two names after --strip-prefix: no output could hold both
        raise refuted("conversion", [exc.message], result.get("sandbox")) from None
    with mmap.mmap(output_fd, 0, access=mmap.ACCESS_READ) as out:
        problems, digests = _conversion_problems(inputs, out, result, asked)
    if problems:
        raise refuted("conversion", problems, result.get("sandbox"))
    result.update(digests=digests, tensors_in_input=len(inputs))
    result["claims"] = ClaimCheck(checked=True, tensors=len(inputs)).to_json()
    timed(result, started)


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
