"""Progress reporting and cooperative cancellation shared by every long job."""

from __future__ import annotations

import threading
from collections.abc import Callable

ProgressFn = Callable[[int, int], None]
"""Called as progress(done, total) with byte or item counts; total 0 means unknown."""


class Cancelled(Exception):
    """Raised inside a long job when its CancelToken was cancelled."""


class CancelToken:
    """A thread-safe flag a caller sets to stop a long job at its next check."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the job to stop."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once cancel() was called."""
        return self._event.is_set()

    def check(self) -> None:
        """Raise Cancelled if cancel() was called."""
        if self._event.is_set():
            raise Cancelled()


def check(cancel: CancelToken | None) -> None:
    """Raise Cancelled if the optional token was cancelled."""
    if cancel is not None:
        cancel.check()
