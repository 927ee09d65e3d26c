"""Streaming SHA-256 of files with progress and cancellation, one file per core at once."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from inspector.core.progress import CancelToken, ProgressFn, check
from inspector.integrity.regular_file import open_regular

DIGEST_ALGORITHM = "sha256"
"""The hash of every tensor content digest, named in each output's `digest_algorithm`."""
CHUNK_BYTES = 64 * 1024
"""Reads this size stay in L2 between the kernel's copy and the hash: measured 1.0 s of CPU
per GB (as `openssl dgst -sha256`) against 1.3-1.4 s with 4 MiB reads. hashlib still releases
the GIL on buffers this size."""

PROGRESS_STEPS = 256
"""Progress is reported about this many times per file (at most every 16 MiB, at least every
read), so callbacks stay off the hot path while a bar still moves smoothly."""


def sha256_file(
    path: str | os.PathLike[str],
    progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> str:
    """Return the hex SHA-256 of a file, reading it once in large chunks."""
    digest = hashlib.sha256()
    # never a FIFO (its open would wait for a writer) or a device read without end
    fh, st = open_regular(path, "only a regular file is hashed", buffering=0)
    with fh:
        total = st.st_size
        buf = bytearray(chunk_bytes)
        view = memoryview(buf)
        step = max(chunk_bytes, min(16 * 1024 * 1024, total // PROGRESS_STEPS))
        done = reported = 0
        _advise_sequential(fh.fileno())
        while True:
            check(cancel)
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            done += n
            if progress is not None and (done - reported >= step or done == total):
                reported = done
                progress(done, total)
    return digest.hexdigest()


def hash_threads() -> int:
    """Files hashed at once by `HashAhead`: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class HashAhead:
    """SHA-256 of many files on `threads` threads (readinto and hashlib release the GIL), begun
    in the order given, so a caller asking for them in that order waits for one at most.

    Each thread holds one CHUNK_BYTES buffer: memory does not grow with the files. A failed
    or cancelled hash is raised by `get` for that file; `close` stops the rest."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], track: ByteProgress | None = None,
                 cancel: CancelToken | None = None, threads: int | None = None) -> None:
        self._paths = list(dict.fromkeys(Path(p) for p in paths))
        self._track, self._cancel = track, cancel
        self._stop = _Linked(cancel)
        self._done: dict[Path, str | BaseException] = {}
        self._next = 0
        self._lock = threading.Condition()
        count = min(threads or hash_threads(), len(self._paths))
        self._threads = [threading.Thread(target=self._work, name=f"file-hash-{i}", daemon=True)
                         for i in range(count)]
        for thread in self._threads:
            thread.start()

    def __contains__(self, path: object) -> bool:
        return path in self._paths

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._next >= len(self._paths) or self._stop.cancelled:
                    return
                path = self._paths[self._next]
                self._next += 1
            progress = self._track.for_file() if self._track is not None else None
            try:
                value: str | BaseException = sha256_file(path, progress, self._stop)
            except BaseException as exc:  # handed to the caller that asks for this file
                value = exc
            with self._lock:
                self._done[path] = value
                self._lock.notify_all()

    def get(self, path: str | os.PathLike[str]) -> str:
        """The hex SHA-256 of a file, waiting for it (hashed here if it was not given); raises
        what its hash raised."""
        path = Path(path)
        if path not in self._paths:
            return sha256_file(path, None, self._cancel)
        with self._lock:
            while path not in self._done:
                check(self._cancel)
                self._lock.wait(0.1)
            value = self._done[path]
        if isinstance(value, BaseException):
            raise value
        return value

    def close(self) -> None:
        """Stop the hashes not yet asked for and wait for the threads."""
        self._stop.cancel()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> HashAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Linked(CancelToken):
    """Cancelled by its own `cancel` or by the caller's token."""

    def __init__(self, outer: CancelToken | None) -> None:
        super().__init__()
        self._outer = outer

    @property
    def cancelled(self) -> bool:
        """True once either token was cancelled."""
        return super().cancelled or (self._outer is not None and self._outer.cancelled)

    def check(self) -> None:
        """Raise Cancelled if either token was cancelled."""
        check(self._outer)
        super().check()


class ByteProgress:
    """Progress over every file hashed in one job, files in any order or at once (each file's
    reports add what it read since its last), passed on at most every 0.1 %."""

    def __init__(self, progress: ProgressFn | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0
        self.step = max(1, total // 1000)
        self.reported = -self.step
        self._lock = threading.Lock()

    def for_file(self) -> ProgressFn | None:
        """A progress function for one file, reporting overall bytes."""
        if self.progress is None:
            return None
        seen = 0

        def report(done: int, _total: int) -> None:
            nonlocal seen
            with self._lock:
                self.done += done - seen
                seen = done
                overall = self.done
                # small reads mean many calls; a UI wants a few hundred updates, not thousands
                due = overall - self.reported >= self.step or overall == self.total
                if due:
                    self.reported = overall
            if due:
                self.progress(overall, self.total)

        return report


def _advise_sequential(fd: int) -> None:
    """Tell the kernel we read front to back so it reads ahead aggressively."""
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


def is_sha256_hex(text: str) -> bool:
    """True when text is 64 hexadecimal characters."""
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)

