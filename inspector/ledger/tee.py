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

`FileFollower` takes the file's own SHA-256 the same way: it reads back each part of the file
once it is written (pages of the page cache, which is what a re-read after the write reads too)
on another thread, so that hash also overlaps the write rather than following it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import IO, Any

import numpy as np

from inspector.integrity.hashing import CHUNK_BYTES


class DigestingWriter:
    """A writable file for torch.save: bytes go to `out`; the tensors of `memory` (key -> view)
    whose storage was just written are hashed on `pool`, their futures in `digests`."""

    def __init__(self, out: IO[bytes], memory: dict[str, Any], pool: Executor,
                 reached: Callable[[int], None]) -> None:
        import torch

        self._out, self._pool, self._reached = out, pool, reached
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
            self._reached(self._out.raw.tell())  # type: ignore[attr-defined]
        return written

    def flush(self) -> None:
        """Flush the file (torch.save calls it once, at the end)."""
        self._out.flush()


def _digest(t: Any) -> str:
    from inspector.tensors.stats import tensor_digest

    return tensor_digest(t.detach())


class FileFollower:
    """The SHA-256 of a file read back while it is still being written: `run` (on a thread)
    reads, from the page cache as any re-read does, the bytes `reached` says are in the file,
    and ends at the size `finish` gives; so the file's hash overlaps the write too."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._ready = threading.Condition()
        self._upto, self._final = 0, False

    def reached(self, upto: int) -> None:
        """The file holds its first `upto` bytes."""
        with self._ready:
            self._upto = max(self._upto, upto)
            self._ready.notify()

    def finish(self, size: int) -> None:
        """The file is complete at `size` bytes (or the write failed: the hash is not used)."""
        with self._ready:
            self._upto, self._final = size, True
            self._ready.notify()

    def run(self) -> str:
        """Read and hash up to each point reached, to the end; the hex SHA-256."""
        digest = hashlib.sha256()
        buf = bytearray(CHUNK_BYTES)
        view = memoryview(buf)
        done = 0
        with open(self._path, "rb", buffering=0) as fh:
            while True:
                with self._ready:
                    while self._upto <= done and not self._final:
                        self._ready.wait()
                    upto, final = self._upto, self._final
                while done < upto:
                    n = fh.readinto(view[:min(len(buf), upto - done)])
                    if not n:
                        raise OSError(f"{self._path}: ended at byte {done} of {upto}")
                    digest.update(view[:n])
                    done += n
                if final:
                    return digest.hexdigest()
