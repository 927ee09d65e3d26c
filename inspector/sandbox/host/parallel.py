"""Run independent jailed jobs side by side: at most one per core, results in input order.

Client side (this module never imports torch): each job is a thread of this process that calls
the `sandbox.host.client` functions, so each still gets its own freshly jailed worker (forked from
the warm server when one is in use: `ForkServer.spawn` takes one request at a time on its
socket). Memory is honest arithmetic: N jobs at once hold up to N times one worker's peak.
Cores are shared out the same way: a job thread's `job_threads()` is the cores divided by the
jobs running at once (at least 1), and `jobs.run_job` asks its worker for that many compute
threads, so N workers never run N times the cores' threads.

The first job to fail cancels the rest through the shared `CancelToken` (each client call
kills its worker's process group when the token is set), jobs not yet started never start,
and that first error is raised once every running job has stopped.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from inspector.core.progress import Cancelled, CancelToken, ProgressFn, check

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    """The cores this process may run on (at most `os.cpu_count()`)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


_share = threading.local()


def job_threads() -> int:
    """Compute threads a worker started from this thread may use: its job's share of the
    cores inside `run_parallel`, every core elsewhere."""
    return getattr(_share, "threads", None) or default_jobs()


def _set_share(threads: int) -> None:
    _share.threads = threads


def run_parallel(
    fn: Callable[[T, CancelToken], R],
    items: Iterable[T],
    jobs: int,
    cancel: CancelToken | None = None,
    progress: ProgressFn | None = None,
) -> list[R]:
    """`fn(item, cancel)` per item, `jobs` at a time; the results in input order.

    The first failure cancels `cancel` (a token of its own when None) and is raised after the
    running jobs have stopped; `progress(done, total)` is told on this thread as jobs finish.
    With `jobs` 1 the items run one after another on this thread.
    """
    work = list(items)
    token = cancel if cancel is not None else CancelToken()
    if jobs <= 1 or len(work) <= 1:
        results = []
        for done, item in enumerate(work, 1):
            token.check()
            results.append(fn(item, token))
            if progress is not None:
                progress(done, len(work))
        return results
    # imported here: concurrent.futures pulls in logging, which one-file commands never need
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    failure: BaseException | None = None
    workers = min(jobs, len(work))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="job", initializer=_set_share,
                            initargs=(max(1, default_jobs() // workers),)) as pool:
        futures = [pool.submit(fn, item, token) for item in work]
        pending = set(futures)
        try:
            while pending and failure is None:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                # of jobs failing together, the earliest in input order is the one reported
                errors = [f.exception() for f in futures if f in finished and f.exception()]
                failure = errors[0] if errors else None
                if progress is not None and failure is None:
                    progress(len(futures) - len(pending), len(futures))
        finally:
            if pending:  # a failure, or this thread interrupted: stop the others
                token.cancel()
                for future in pending:
                    future.cancel()
    if failure is not None:
        raise failure
    return [f.result() for f in futures]


class Prefetch(Generic[T, R]):
    """`fn(item, cancel)` for every item, `jobs` at a time in the background, each result
    handed out by `get` as soon as it is ready: for a caller that goes through the items in
    order doing its own work (hashing each file) while the next ones' workers already run.

    Unlike `run_parallel`, one item's failure is only that item's: `get` raises it. `close`
    (or leaving the `with` block) cancels what is still running and waits for it.
    """

    def __init__(self, fn: Callable[[T, CancelToken], R], items: Iterable[T], jobs: int) -> None:
        from concurrent.futures import Future

        self._token = CancelToken()
        self._futures: dict[T, Future] = {item: Future() for item in items}
        self._thread = threading.Thread(target=self._run, args=(fn, jobs), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[T, CancelToken], R], jobs: int) -> None:
        def one(item: T, cancel: CancelToken) -> None:
            future = self._futures[item]
            try:
                cancel.check()
                future.set_result(fn(item, cancel))
            except BaseException as exc:  # handed to whoever asks for this item
                future.set_exception(exc)

        with contextlib.suppress(Cancelled):  # closed: the items not begun are not wanted
            run_parallel(one, list(self._futures), jobs, cancel=self._token)

    def __contains__(self, item: object) -> bool:
        return item in self._futures

    def get(self, item: T, cancel: CancelToken | None = None) -> R:
        """The item's result (its exception raised), waiting for it; `cancel` stops the wait."""
        from concurrent.futures import TimeoutError as Pending

        future = self._futures[item]
        while True:
            check(cancel)
            try:
                return future.result(timeout=0.1)
            except Pending:
                continue

    def close(self) -> None:
        """Cancel every job still running or waiting, and wait until they have stopped."""
        self._token.cancel()
        self._thread.join()

    def __enter__(self) -> Prefetch[T, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
