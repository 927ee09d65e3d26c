"""The live sampler: a source read in a background thread at a fixed interval into a
`TelemetryStore`, each tick's alerts raised (`gpu.alerts`), XIDs watched on a second thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from inspector.core.vocabulary import AlertSeverity
from inspector.gpu.alerts import AlertRules, xid_alert
from inspector.gpu.telemetry import (
    DEFAULT_INTERVAL_S,
    MIN_INTERVAL_S,
    Alert,
    GpuSample,
    SourceLost,
    TelemetrySource,
    TelemetryStore,
    XidEvent,
)


class Sampler:
    """Samples a source in a background thread at a fixed interval into a TelemetryStore."""

    def __init__(
        self,
        source: TelemetrySource,
        store: TelemetryStore,
        interval: float = DEFAULT_INTERVAL_S,
        rules: AlertRules | None = None,
        on_samples: Callable[[list[GpuSample], list[Alert]], None] | None = None,
        on_alert: Callable[[Alert], None] | None = None,
    ) -> None:
        if interval < MIN_INTERVAL_S:
            raise ValueError(f"interval must be at least {MIN_INTERVAL_S} s, got {interval}")
        self.source, self.store, self.interval = source, store, interval
        self.rules = rules or AlertRules()
        self.on_samples, self.on_alert = on_samples, on_alert
        self.error: str | None = None
        self.ticks = 0
        self._stop = threading.Event()
        self._pending_xids: dict[int, list[int]] = {}
        self._xid_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the sampling thread and the XID watcher thread."""
        self._threads = [
            threading.Thread(target=self._run, name="telemetry-sampler", daemon=True),
            threading.Thread(target=self._watch, name="telemetry-xid", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads and wait for them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        """True while the sampling thread is alive."""
        return bool(self._threads) and self._threads[0].is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until sampling stops (stop() or a lost source); True if it did."""
        if self._threads:
            self._threads[0].join(timeout)
        return not self.running

    def _watch(self) -> None:
        # A lost source is reported by the sampling thread on its next tick.
        with contextlib.suppress(SourceLost):
            self.source.watch_xids(self._on_xid, self._stop)

    def _on_xid(self, event: XidEvent) -> None:
        self.store.add_xid(event)
        with self._xid_lock:
            self._pending_xids.setdefault(event.gpu, []).append(event.xid)
        self._emit(xid_alert(event))

    def _emit(self, alert: Alert) -> None:
        self.store.add_alert(alert)
        if self.on_alert:
            self.on_alert(alert)

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                samples = self.source.sample()
            except SourceLost as exc:
                self.error = str(exc)
                self._emit(Alert(time.time(), None, "source_lost", AlertSeverity.CRITICAL,
                                 str(exc)))
                self._stop.set()
                break
            with self._xid_lock:
                pending, self._pending_xids = self._pending_xids, {}
            alerts: list[Alert] = []
            for sample in samples:
                # XIDs were stored and alerted as they arrived; the sample only carries them
                # so a recording keeps them beside the reading they happened before.
                sample.xids = tuple(pending.pop(sample.index, ()))
                previous = self.store.add(sample)
                alerts.extend(self.rules.evaluate(previous, sample))
            for alert in alerts:
                self._emit(alert)
            self.ticks += 1
            if self.on_samples:
                self.on_samples(samples, alerts)
            deadline += self.interval
            now = time.monotonic()
            if deadline < now:  # fell behind (suspend, slow driver): skip, don't burst
                deadline = now
            self._stop.wait(deadline - now)
