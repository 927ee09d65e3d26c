"""Every tensor of a checkpoint described (layout, statistics, digest) on a pool of threads.

The `inspect` operation's records: `records` for what each tensor is, `stats` for one pass over
its bytes. Runs only inside the sandbox worker (it imports torch).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import torch

from inspector.core.progress import CancelToken
from inspector.tensors.records import is_dense, layout_record, storage_groups
from inspector.tensors.small_stats import batchable, describe_small
from inspector.tensors.stats import (
    Digest,
    Release,
    statistics_refused,
    tensor_digest,
    tensor_stats,
)


def describe_tensors(
    items: list[tuple[str, torch.Tensor]],
    emit: Callable[[dict], None],
    release: Release | None = None,
    cancel: CancelToken | None = None,
    threads: int = 2,
) -> list[dict]:
    """Full records for every tensor; each is emitted as soon as it is complete.

    Each tensor's digest and statistics come from one pass over its bytes
    (`tensor_stats(digest=)`): with one thread, both on it; with more, tensors under
    `INLINE_BYTES` are described on the calling thread while each pool thread takes a larger
    tensor (largest first) and hashes it inline, except a tensor larger than a thread's share
    of the bytes, whose chunks a hashing thread (half as many as `threads`) hashes beside it
    while they are in the cache (`_PipedDigest`), so even a checkpoint of one huge tensor
    keeps two cores busy. A tensor's pages (those of its own bytes) are released once it is
    done (when a `release` is given), so RSS stays bounded by the tensors in flight rather
    than the checkpoint. A
    tensor that reads the same bytes the same way as an earlier one (a tied weight saved
    under two names) gets that one's statistics and digest without reading them again
    (`_same_view`).
    """
    shared = storage_groups(items)
    records = [layout_record(k, t) for k, t in items]
    dense = []
    first_of: dict[tuple, int] = {}
    twins: dict[int, list[int]] = {}  # a described tensor -> the later ones that are its view
    for i, ((key, t), rec) in enumerate(zip(items, records, strict=True)):
        if key in shared:
            rec["shared_with"] = shared[key]
        if not is_dense(t) or "meta" in rec["flags"]:
            rec.update(_stored_values_stats(t, cancel))
            emit({"type": "tensor", **rec})
            continue
        view = _same_view(t)
        first = i if view is None else first_of.setdefault(view, i)
        if first == i:
            dense.append(i)
        else:
            twins.setdefault(first, []).append(i)

    def finish(i: int, values: dict) -> None:
        _release_tensor(items[i][1], release)
        for j in (i, *twins.get(i, ())):
            records[j].update(values if j == i else copy.deepcopy(values))
            emit({"type": "tensor", **records[j]})

    size = {i: items[i][1].numel() * items[i][1].element_size() for i in dense}
    pooled = [i for i in dense if threads > 1 and size[i] >= INLINE_BYTES]
    inline = [i for i in dense if threads <= 1 or size[i] < INLINE_BYTES]
    small = [i for i in inline if batchable(items[i][1])]
    together = dict(zip(small, describe_small([items[i][1] for i in small]), strict=True))

    def describe_inline() -> None:
        for i in inline:
            found = together.get(i)
            finish(i, found if found is not None else
                   _stats_and_digest(items[i][1], cancel, hashlib.sha256()))

    if not pooled:
        describe_inline()
        return records
    total = sum(size[i] for i in pooled)
    with ThreadPoolExecutor(max_workers=threads // 2, thread_name_prefix="hash") as hashing, \
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stats") as pool:
        # Largest first, so the last tensor to finish is a small one.
        jobs = {pool.submit(_stats_and_digest, items[i][1], cancel,
                            _PipedDigest(hashing) if size[i] * threads > total
                            else hashlib.sha256()): i
                for i in sorted(pooled, key=size.__getitem__, reverse=True)}
        try:
            # the small ones on this thread meanwhile (the pool's threads release the GIL in
            # torch's loops over the big ones)
            describe_inline()
            pending = set(jobs)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    finish(jobs[fut], fut.result())
        except BaseException:
            for fut in jobs:
                fut.cancel()
            raise
    return records


INLINE_BYTES = 256 * 1024
"""Tensors smaller than this are described on the calling thread: handing one to the pool
costs more than describing it, and two threads on tiny tensors contend for the GIL (12,000
4-element tensors took twice as long on two threads as on one)."""


def _same_view(t: torch.Tensor) -> tuple | None:
    """What decides a dense tensor's statistics and digest: its bytes (storage, offset,
    shape, strides) and how they are read (dtype, conjugate and negative bits). None for a
    quantized tensor, which is always described on its own."""
    if t.is_quantized:
        return None
    storage = t.untyped_storage()
    return (storage.data_ptr(), storage.nbytes(), t.storage_offset(), tuple(t.shape),
            t.stride(), t.dtype, t.is_conj(), t.is_neg())


class _PipedDigest:
    """SHA-256 computed on a hashing thread: `update` hands the chunk over and returns, so the
    chunk is hashed while the statistics read it (hashlib releases the GIL); chunks are hashed
    in order, at most one waiting."""

    def __init__(self, hashing: ThreadPoolExecutor) -> None:
        self._sha = hashlib.sha256()
        self._hashing = hashing
        self._pending: Future | None = None

    def update(self, data: memoryview) -> None:
        """Hash `data` after the chunks before it."""
        self._wait()
        self._pending = self._hashing.submit(self._sha.update, data)

    def hexdigest(self) -> str:
        """The digest of every chunk handed over."""
        self._wait()
        return self._sha.hexdigest()

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None


def _release_tensor(t: torch.Tensor, release: Release | None) -> None:
    """Release the bytes this tensor reads, not its whole storage: every tensor of a
    safetensors file shares one storage, the whole mapping, so releasing that after each
    tensor dropped the pages of the tensors still to come (12,000 tensors: 36,000 madvise
    calls over the whole file)."""
    if release is None or t.numel() == 0:
        return
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(),
                                                                   strict=True))
    release(t.data_ptr(), extent * t.element_size())


_SPARSE = {torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr,
           torch.sparse_bsc}


def _stored_values_stats(t: torch.Tensor, cancel: CancelToken | None) -> dict:
    """A CPU sparse tensor judged on the values it stores (`stats_on` "stored values"): NaN,
    Inf, absmax and exponent counts, what health needs to see corruption; zeros count the
    implicit ones too. min, max, mean, std and the histogram stay unset: over the stored
    values alone they would describe another tensor (an identity matrix would look constant).
    {} for anything else without dense data (meta, nested, on a device)."""
    if t.layout not in _SPARSE or t.device.type != "cpu" or not (
            t.dtype.is_floating_point or t.dtype.is_complex):
        return {}
    values = (t._values() if t.layout == torch.sparse_coo else t.values()).reshape(-1)
    rec = tensor_stats(values, cancel)
    implicit = t.numel() - values.numel()
    return {"stats_on": "stored values", "nan": rec["nan"], "inf": rec["inf"],
            "zeros": rec["zeros"] + implicit, "absmax": rec["absmax"],
            **({"exponents": rec["exponents"]} if "exponents" in rec else {})}


def _stats_and_digest(t: torch.Tensor, cancel: CancelToken | None, digest: Digest) -> dict:
    """Statistics (or a note saying why this dtype has none) and the digest, which every
    dense tensor gets; `digest` is a fresh SHA-256."""
    # known before reading (a GGUF file's bits8 blocks): the bytes are read once, for the digest
    refused = None if t.is_quantized else statistics_refused(t.dtype)
    if refused is not None:
        return _digest_only(t, cancel, refused)
    try:
        rec = tensor_stats(t, cancel, digest)
    except (TypeError, RuntimeError, NotImplementedError) as exc:
        return _digest_only(t, cancel, str(exc))
    return {**rec, "digest": digest.hexdigest()}


def _digest_only(t: torch.Tensor, cancel: CancelToken | None, why: str) -> dict:
    return {"stats_on": None, "note": f"no statistics: {why}",
            "digest": tensor_digest(t, None, cancel)}
