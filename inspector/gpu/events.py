"""A telemetry timeline's events: the store's alerts and every throttle onset, oldest first.

The GPU pane marks them on its charts and the report lists them, so both read this one list.
A throttle is not an alert (the CLI's exit status ignores it): the clocks slowed, and the
samples say so in `clocks_event_reasons`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from inspector.core.vocabulary import AlertSeverity
from inspector.gpu.telemetry import Alert, TelemetryStore, decode_clock_reasons

THROTTLE = "throttle"
"""The kind of a throttle event."""
THROTTLE_BITS = 0x008 | 0x020 | 0x040 | 0x080
"""Clock-event reasons that are slowdowns (hardware, thermal, power brake), not a power cap."""


def throttle_onsets(times: np.ndarray, reasons: np.ndarray) -> list[tuple[float, int]]:
    """(time, reason mask) where a slowdown reason (THROTTLE_BITS) newly appears."""
    known = np.isfinite(reasons)
    mask = np.where(known, reasons, 0).astype(np.int64) & THROTTLE_BITS
    new = mask & ~np.concatenate(([0], mask[:-1]))
    return [(float(times[i]), int(mask[i])) for i in np.flatnonzero(new)]


def timeline(store: TelemetryStore, alerts: Iterable[Alert] | None = None) -> list[Alert]:
    """Every alert in the store (or `alerts`, all those raised where the caller kept more than
    the store's last `max_events`) and every throttle onset in its samples, oldest first."""
    found = list(store.alerts if alerts is None else alerts)
    for gpu in store.gpus():
        times, reasons = store.series(gpu, "clocks_event_reasons")
        for t, mask in throttle_onsets(times, reasons):
            why = ", ".join(decode_clock_reasons(mask))
            found.append(Alert(t, gpu, THROTTLE, AlertSeverity.WARNING,
                               f"GPU {gpu}: clocks slowed ({why})"))
    return sorted(found, key=lambda a: a.timestamp)
