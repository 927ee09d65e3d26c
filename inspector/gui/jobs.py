"""Thin Qt adapter that runs engine calls off the UI thread and hands their events to Qt.

A job is a plain function `fn(emit, cancel) -> result` (the same shape as the engine's
`on_event=` / `cancel=` keywords). Events are queued from the worker thread and drained on
the UI thread in batches, so a stream of 100,000 tensor events costs a handful of signal
deliveries instead of 100,000.

Lifetimes (the rule every caller relies on):
- `JobRunner.adopt` makes the runner the job's Qt parent. The pane or dialog that created the
  job only owns its outcome: when that owner is destroyed, or the document the job works for
  is closed, the job is discarded (cancelled, and nothing it still reports is delivered).
- The runner keeps a job until its thread has finished and its end has been handled on the
  UI thread, then deletes it there with `deleteLater`. The bridge worker threads emit through
  is the job's Qt child, so it dies on the UI thread, never while a thread can still emit,
  and never by Python garbage collection on a worker thread.
- A runner belongs to the application, not to the window or pane it works for (its owner):
  the owner's destruction retires it (every job discarded) and it deletes itself once its
  last thread has ended. Destroying a thread pool waits for its threads; if the owner took
  the pool with it, that wait could run with the interpreter lock held (a Python-owned window
  freed by the garbage collector) while the pool's threads need that lock to finish: a
  deadlock no timeout can interrupt.
- Closing a window cancels every job, waits a bounded time for the threads (the engine kills
  its worker processes on cancel), and discards whatever is still on its way.
"""

from __future__ import annotations

import collections
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, QTimer, Signal

from inspector.core.progress import Cancelled, CancelToken

Event = dict[str, Any]
EmitFn = Callable[[Event], None]
JobFn = Callable[[EmitFn, CancelToken], Any]


class _Bridge(QObject):
    """Lives on the UI thread; worker threads emit through it (queued connections)."""

    wake = Signal()
    done = Signal(str, object)  # outcome ("ok" | "failed" | "cancelled"), result or message


class Job(QObject):
    """One background call. Connect to its signals before `JobRunner.start`."""

    events = Signal(list)  # a batch of event dicts, in order
    finished = Signal(object)  # the function's return value
    failed = Signal(str)  # a one-line message for the user
    cancelled = Signal()
    ended = Signal()  # after any of the three above

    def __init__(self, name: str, fn: JobFn, parent: QObject | None = None,
                 doc: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.doc = doc  # the document the job works for, if any; closing it discards the job
        self.token = CancelToken()
        self._fn = fn
        self._queue: collections.deque[Event] = collections.deque()
        self._lock = threading.Lock()
        self._bridge = _Bridge(self)
        self._bridge.wake.connect(self._drain)
        self._bridge.done.connect(self._complete)
        self.running = False
        self.discarded = False

    def cancel(self) -> None:
        """Ask the job to stop; the engine call notices at its next check and kills its worker."""
        self.token.cancel()

    def discard(self) -> None:
        """Cancel, and deliver nothing more: whoever wanted the outcome is gone."""
        self.discarded = True
        self.token.cancel()

    def _emit(self, event: Event) -> None:
        with self._lock:
            first = not self._queue
            self._queue.append(event)
        if first:
            self._bridge.wake.emit()

    def _drain(self) -> None:
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
        if batch and not self.discarded:
            self.events.emit(batch)

    def _run(self) -> None:
        try:
            result = self._fn(self._emit, self.token)
        except Cancelled:
            self._bridge.done.emit("cancelled", None)
        except Exception as exc:  # the user sees one line; the traceback goes to stderr
            traceback.print_exc()
            self._bridge.done.emit("failed", user_message(exc))
        else:
            if self.token.cancelled:
                self._bridge.done.emit("cancelled", None)
            else:
                self._bridge.done.emit("ok", result)

    def _complete(self, outcome: str, payload: object) -> None:
        self._drain()
        self.running = False
        if not self.discarded:
            if outcome == "ok":
                self.finished.emit(payload)
            elif outcome == "cancelled":
                self.cancelled.emit()
            else:
                self.failed.emit(str(payload))
        self.ended.emit()


def user_message(exc: BaseException) -> str:
    """A single line naming what went wrong, without a traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text


class _Runnable(QRunnable):
    def __init__(self, job: Job) -> None:
        super().__init__()
        self._job = job

    def run(self) -> None:
        self._job._run()


class JobRunner(QObject):
    """Starts jobs on a thread pool and keeps them alive until they end.

    `owner` is the window or pane the runner works for; the runner itself is the
    application's child and outlives `owner` until its threads have ended.
    """

    busy_changed = Signal(bool)

    def __init__(self, owner: QObject | None = None, max_threads: int = 4) -> None:
        super().__init__(QCoreApplication.instance())
        # The pool is the runner's first child, so when the runner is destroyed the pool's
        # destructor waits for the threads before the jobs (later children) are deleted.
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max_threads)
        self._active: list[Job] = []
        self._retired = False
        if owner is not None:
            owner.destroyed.connect(self.retire)

    def retire(self) -> None:
        """The owner is gone: discard every job, and delete the runner when none is left."""
        self._retired = True
        for job in self._active:
            job.discard()
        if not self._active:
            self.deleteLater()

    def adopt(self, job: Job) -> None:
        """Take over `job`'s lifetime; its creator's destruction discards it."""
        owner = job.parent()
        if owner is not self:
            job.setParent(self)
            if owner is not None:
                owner.destroyed.connect(job.discard)

    def start(self, job: Job) -> Job:
        """Run `job` in the pool; its signals arrive on the UI thread."""
        self.adopt(job)
        self._active.append(job)
        job.running = True
        job.ended.connect(self._forget)
        if len(self._active) == 1:
            self.busy_changed.emit(True)
        self.pool.start(_Runnable(job))
        return job

    def active(self) -> list[Job]:
        """Jobs started and not yet ended."""
        return list(self._active)

    def cancel_all(self) -> None:
        """Cancel every running job."""
        for job in self._active:
            job.cancel()

    def discard_for(self, doc: QObject) -> None:
        """Discard every job working for `doc` (it was closed)."""
        for job in self._active:
            if job.doc is doc:
                job.discard()

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Discard everything and wait for the threads; True when all stopped in time."""
        for job in self._active:
            job.discard()
        return self.pool.waitForDone(timeout_ms)

    def _forget(self) -> None:
        job = self.sender()
        if job in self._active:
            self._active.remove(job)
            job.deleteLater()
            if not self._active and self._retired:
                self.deleteLater()
            elif not self._active:
                # Deferred so a slot that starts a follow-up job does not see a busy flicker.
                QTimer.singleShot(0, self, self._report_idle)  # dropped if the runner is gone

    def _report_idle(self) -> None:
        if not self._active:
            self.busy_changed.emit(False)
