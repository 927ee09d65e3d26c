"""A file that hashes the state's tensors as torch.save writes them: each storage torch hands
to the file straight from memory is hashed in memory on a thread once its write returned, so
the tensors' SHA-256s overlap the writer's next records instead of costing the re-read a pass.

Why only after its write: the re-read later compares every tensor's bytes on disk with memory
(`digests.proven_file`). A digest taken between the write and that compare is of the bytes
written, or the compare fails (memory that changed meanwhile differs from the disk), so a
verified record never holds a digest of bytes that are not in the file; a digest taken before
the write could. A storage is matched by its address and size, so only a dense CPU storage
written whole counts; anything else (a GPU tensor's copy, quantized parts, safetensors) is
hashed from disk by the re-read, as before.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future
from typing import IO, Any

import numpy as np


class DigestingWriter:
    """A writable file for torch.save: bytes go to `out`; the tensors of `memory` (key -> view)
    whose storage was just written are hashed on `pool`, their futures in `digests`."""

    def __init__(self, out: IO[bytes], memory: dict[str, Any], pool: Executor) -> None:
        import torch

        self._out, self._pool = out, pool
        self._waiting: dict[tuple[int, int], list[tuple[str, Any]]] = {}
        for key, t in memory.items():
            if t.layout != torch.strided or t.device.type != "cpu":
                continue
            storage = t.untyped_storage()
            if storage.nbytes():
                where = (storage.data_ptr(), storage.nbytes())
                self._waiting.setdefault(where, []).append((key, t))
        self._sizes = {size for _, size in self._waiting}
        self.digests: dict[str, Future[str]] = {}

    def write(self, data: Any) -> int:
        """Write `data` to the file; if it is a waiting storage, queue its tensors' digests."""
        written = self._out.write(data)
        view = memoryview(data)
        if view.nbytes in self._sizes:
            address = np.frombuffer(view, np.uint8).ctypes.data
            for key, t in self._waiting.pop((address, view.nbytes), ()):
                self.digests[key] = self._pool.submit(_digest, t)
        return written

    def flush(self) -> None:
        """Flush the file (torch.save calls it once, at the end)."""
        self._out.flush()


def _digest(t: Any) -> str:
    from inspector.tensors.stats import tensor_digest

    return tensor_digest(t.detach())
