"""Tensor digests of a checkpoint in memory and of the file that landed on disk, alike.

Both sides name and hash tensors as `manifest create` and `verify` do: the keys of
`tensors.load.split_leaves` (quantized and sparse tensors as the parts `tensors.encoded`
names), SHA-256 of each tensor's bytes, contiguous and row-major (`tensors.stats`), and on disk
the readers of the worker's `digests` op (`tensors.sources`), so a ledger record is a manifest
that `verify` checks unchanged. Hashing streams in bounded chunks: views of the tensors in
memory, pages of the file dropped once read; no second copy of the checkpoint is made.
"""

from __future__ import annotations

import os
from typing import Any

from inspector.core.vocabulary import TensorCheckStatus
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.integrity.manifest import TensorEntry
from inspector.integrity.verify import compare_tensors


def memory_digests(obj: Any) -> list[TensorEntry]:
    """Every tensor leaf of `obj` (a state dict or any nesting of containers) with its digest."""
    import torch

    from inspector.tensors.encoded import expand
    from inspector.tensors.load import split_leaves
    from inspector.tensors.records import dtype_name
    from inspector.tensors.stats import tensor_digest

    tensors = expand(split_leaves(obj)[0])[0]
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


def differences(expected: list[TensorEntry], actual: list[TensorEntry], file: str,
                partial: bool = False) -> list[str]:
    """Keys whose bytes on disk differ from memory, or that only one side has; with `partial`
    (a folder whose writer drops tied names and adds files of its own) only differing bytes."""
    tolerated = {TensorCheckStatus.OK}
    if partial:
        tolerated |= {TensorCheckStatus.MISSING, TensorCheckStatus.EXTRA}
    return [c.key for c in compare_tensors(expected, actual, file) if c.status not in tolerated]


def expected_bytes(obj: Any) -> int:
    """About how many bytes a checkpoint of `obj` takes: its tensors' data."""
    from inspector.tensors.load import split_leaves

    return sum(t.numel() * t.element_size() for _k, t in split_leaves(obj)[0])
