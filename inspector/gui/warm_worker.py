"""The desktop app's warm fork server: started after the window's first paint, off the UI
thread, and stopped when the window closes (the server also exits with this process).

Until it is ready, and whenever it is gone (it could not start, or it died), every job starts
a cold worker as before: no job ever waits for it. A server that dies (killed) is replaced
in the background as soon as it ends (`keep_warm`), so later files fork from the new one.
`sandbox.host.client.start_fork_server` and `stop_fork_server` do the work; this module only
decides when, and tells the window once if the server could not start.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer, Signal
from PySide6.QtWidgets import QWidget

from inspector.core.progress import CancelToken
from inspector.gui.jobs import EmitFn, Job, JobRunner


class WarmWorker(QObject):
    """Owns the process's fork server for `window`: `start_after_paint()`, then `stop()`."""

    ready = Signal()
    unavailable = Signal(str)  # one line: why jobs keep starting cold workers

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self._window = window
        # Its own one-thread runner: the start neither takes a thread from the window's jobs
        # nor shows as the window being busy.
        self._runner = JobRunner(self, max_threads=1)
        self._job: Job | None = None
        self._stopped = False
        QCoreApplication.instance().aboutToQuit.connect(self.stop)

    def start_after_paint(self) -> None:
        """Start the server once the window has painted for the first time."""
        self._window.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        """Schedule the start after the window's first paint, then stop watching."""
        if event.type() == QEvent.Type.Paint and obj is self._window:
            obj.removeEventFilter(self)
            QTimer.singleShot(0, self, self.start)
        return False

    def start(self) -> None:
        """Start the server in a background job (once); jobs use it as soon as it is ready."""
        if self._job is not None or self._stopped:
            return
        self._job = Job("fork server", _start_server, self)
        self._job.finished.connect(self._started_with)
        self._runner.start(self._job)

    def stop(self) -> None:
        """Stop the server, or kill it if it is still starting; bounded (a few seconds)."""
        self._stopped = True
        if self._job is not None:
            from inspector.sandbox.host import client

            self._job.discard()  # a start not yet under way stops itself
            client.stop_fork_server()

    def _started_with(self, error: str | None) -> None:
        if error is None:
            self.ready.emit()
        elif not self._stopped:
            self.unavailable.emit(error)


def _start_server(_emit: EmitFn, cancel: CancelToken) -> str | None:
    """Start the process's fork server; None when it is ready, else why not (one line)."""
    from inspector.sandbox.host import client

    if cancel.cancelled:
        return "stopped before it started"
    try:
        client.start_fork_server(keep_warm=True)
    except client.ForkServerError as exc:
        return str(exc)
    if cancel.cancelled:  # stop() ran before this start had registered the server
        client.stop_fork_server()
        return "stopped while it started"
    return None
