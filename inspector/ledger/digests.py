"""Tensor digests of a checkpoint in memory and of the file that landed on disk, alike.

Both sides name and hash tensors as `manifest create` and `verify` do: the keys of
`tensors.load.split_leaves` (quantized and sparse tensors as the parts `tensors.encoded`
names), SHA-256 of each tensor's bytes, contiguous and row-major (`tensors.stats`), and on disk
the readers of the worker's `digests` op (`tensors.sources`), so a ledger record is a manifest
that `verify` checks unchanged. Hashing streams in bounded chunks: views of the tensors in
memory, pages of the file dropped once read; no second copy of the checkpoint is made.

`proven_digests` is the one read-back `ledger.save` makes: each tensor's bytes on disk are
compared with the same tensor's bytes in memory, word by word, and hashed for the record in the
same pass, unless its digest was already taken in memory right after torch.save wrote it
(`tee`, on a thread during the write; the compare is what makes that digest the disk's);
`proven_file` is that pass over one file of a folder, against the folder's tensors in memory.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from inspector.core.vocabulary import TensorCheckStatus
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.integrity.manifest import TensorEntry
from inspector.integrity.verify import compare_tensors


def memory_digests(obj: Any) -> list[TensorEntry]:
    """Every tensor leaf of `obj` (a state dict or any nesting of containers) with its digest."""
    import torch

    from inspector.tensors.records import dtype_name
    from inspector.tensors.stats import tensor_digest

    tensors = list(memory_tensors(obj).items())
    entries = []
    for key, t in tensors:
        dense = t.layout == torch.strided and t.device.type != "meta"
        entries.append(TensorEntry(
            key=key, dtype=dtype_name(t.dtype), shape=tuple(t.shape),
            digest=tensor_digest(t.detach()) if dense else None,
            digest_algorithm=DIGEST_ALGORITHM,
        ))
    return entries


def disk_digests(path: str | os.PathLike[str], allow_globals: tuple[str, ...] = ()
                 ) -> tuple[str, list[TensorEntry]]:
    """The format and every tensor of the checkpoint file (or DCP folder) at `path`; a pickle
    is loaded with weights_only=True and `allow_globals` (a `scan.pickles.presets` preset's)."""
    from inspector.tensors.sources import digest, open_checkpoint

    ckpt = open_checkpoint(os.fspath(path), allow_globals)
    return ckpt.format, [
        TensorEntry(key=s.key, dtype=s.dtype, shape=tuple(s.shape), digest=digest(s),
                    digest_algorithm=DIGEST_ALGORITHM)
        for s in ckpt.tensors
    ]


def memory_tensors(obj: Any) -> dict[str, Any]:
    """Every tensor leaf of `obj` by the key a file names it with (views, no copy), with each
    encoded (quantized or sparse) tensor's rebuild spec as the `KEY::spec` part a file's
    reading lists beside its parts."""
    import torch

    from inspector.formats.safetensors_header import spec_bytes
    from inspector.tensors.encoded import expand
    from inspector.tensors.load import split_leaves
    from inspector.tensors.sources import SPEC_PART

    parts, specs = expand(split_leaves(obj)[0])
    tensors = dict(parts)
    for key, spec in specs.items():
        tensors[key + SPEC_PART] = torch.frombuffer(bytearray(spec_bytes(spec)), dtype=torch.uint8)
    return tensors


def proven_digests(path: str | os.PathLike[str], obj: Any, allow_globals: tuple[str, ...] = (),
                   known: dict[str, Future[str]] | None = None
                   ) -> tuple[str, list[TensorEntry], list[str]]:
    """The format and every tensor of the file at `path` with its digest, and the keys whose
    dtype, shape or bytes differ from `obj`'s tensors in memory, or that only one side has;
    `known`: digests taken as the file was written (`tee`), not taken again."""
    memory = memory_tensors(obj)
    fmt, entries, bad, _ = proven_file(path, memory, allow_globals, known)
    return fmt, entries, bad + list(memory)


def proven_file(path: str | os.PathLike[str], memory: dict[str, Any],
                allow_globals: tuple[str, ...] = (),
                known: dict[str, Future[str]] | None = None
                ) -> tuple[str, list[TensorEntry], list[str], set[str]]:
    """The format and every tensor of the file at `path` with its digest, each compared with
    the tensor of the same key in `memory` (popped from it) in the same pass; the keys that
    differ (in the file's order), and among them those `memory` did not hold. A tensor in
    `known` is compared only: its digest was taken in memory after its bytes were written."""
    import torch

    from inspector.core.dtypes import canonical_dtype
    from inspector.tensors.records import dtype_name
    from inspector.tensors.sources import open_checkpoint
    from inspector.tensors.stats import byte_chunks

    ckpt = open_checkpoint(os.fspath(path), allow_globals)
    entries, bad, only_on_disk = [], [], set()
    for s in ckpt.tensors:
        t = memory.pop(s.key, None)
        if t is None:
            only_on_disk.add(s.key)
        same = (t is not None and canonical_dtype(dtype_name(t.dtype)) == canonical_dtype(s.dtype)
                and tuple(t.shape) == tuple(s.shape))
        dense = same and t.layout == torch.strided and t.device.type != "meta"
        digest = None
        taken = known.get(s.key) if dense and known else None
        if s.read is None:
            if dense:
                same = False  # memory has bytes the file does not
        elif taken is not None:  # hashed in memory after its write (`tee`): compared only
            same = _same_bytes(_blocks(s.read()), byte_chunks(t.detach()))
            # bytes that differ are recorded as the disk holds them, as below
            digest = taken.result() if same else _disk_digest(s.read())
        elif dense:
            h = hashlib.sha256()
            same = _same_bytes(_blocks(s.read(), h), byte_chunks(t.detach()))
            digest = h.hexdigest()
        else:
            digest = _disk_digest(s.read())  # the record holds what is on disk
        if not same:
            bad.append(s.key)
        entries.append(TensorEntry(key=s.key, dtype=s.dtype, shape=tuple(s.shape), digest=digest,
                                   digest_algorithm=DIGEST_ALGORITHM))
    return ckpt.format, entries, bad, only_on_disk


_BLOCK = 1 << 20
"""Bytes hashed then compared at a time: the compare finds them still in the core's cache."""


def _blocks(chunks: Iterable[Any], h: Any = None) -> Iterator[np.ndarray]:
    """The chunks' bytes in blocks of at most _BLOCK (numpy views, no copy), each fed to `h`
    (when given) just before it is handed on."""
    for chunk in chunks:
        data = np.frombuffer(chunk, np.uint8)
        for at in range(0, data.size, _BLOCK):
            block = data[at:at + _BLOCK]
            if h is not None:
                h.update(block)
            yield block


def _disk_digest(chunks: Iterable[Any]) -> str:
    """SHA-256 of the chunks' bytes."""
    h = hashlib.sha256()
    deque(_blocks(chunks, h), maxlen=0)
    return h.hexdigest()


def _same_bytes(disk: Iterator[np.ndarray], memory: Iterable[Any]) -> bool:
    """Whether two byte streams, cut into chunks at different places, are equal; `disk` is
    consumed to its end either way (its chunks are being hashed)."""
    held = iter(memory)
    mine = np.empty(0, np.uint8)
    same = True
    for got in disk:
        while same and got.size:
            if not mine.size:
                nxt = next(held, None)
                if nxt is None:
                    same = False
                    break
                mine = np.frombuffer(nxt, np.uint8)
            n = min(got.size, mine.size)
            same = _equal(got[:n], mine[:n])
            got, mine = got[n:], mine[n:]
    return same and not mine.size and not any(len(c) for c in held)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bytes, compared as 64-bit words a block at a time."""
    for at in range(0, a.size, _BLOCK):
        x, y = a[at:at + _BLOCK], b[at:at + _BLOCK]
        whole = x.size // 8 * 8
        if not (np.array_equal(x[:whole].view(np.uint64), y[:whole].view(np.uint64))
                and np.array_equal(x[whole:], y[whole:])):
            return False
    return True


def differences(expected: list[TensorEntry], actual: list[TensorEntry], file: str) -> list[str]:
    """Keys whose bytes on disk differ from memory, or that only one side has."""
    return [c.key for c in compare_tensors(expected, actual, file)
            if c.status != TensorCheckStatus.OK]


def expected_bytes(obj: Any) -> int:
    """About how many bytes a checkpoint of `obj` takes: its tensors' data."""
    from inspector.tensors.load import split_leaves

    return sum(t.numel() * t.element_size() for _k, t in split_leaves(obj)[0])
