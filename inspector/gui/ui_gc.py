"""Python's cyclic garbage collector runs on the UI thread only.

A Qt object that Python owns is destroyed wherever the collector finds it unreachable. Left
automatic, the collector runs in whichever thread happens to allocate: a job's pool thread,
the sandbox client's pipe readers. There it would destroy objects that live on the UI thread
while the UI thread is using them, and the process dies with a segmentation fault. So the
automatic collector is switched off and a UI-thread timer collects each generation when its
threshold is due, as the automatic collector would have done.
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 100
FULL_COLLECTION_GAP_S = 10.0  # a full pass over a large heap costs tens of ms; not more often

_last_full = 0.0


def collect_if_due() -> int:
    """Collect the oldest generation whose threshold is exceeded; the number of objects freed."""
    global _last_full
    counts, thresholds = gc.get_count(), gc.get_threshold()
    generation = -1
    for g in range(3):
        if thresholds[g] and counts[g] > thresholds[g]:
            generation = g
    if generation == 2:
        now = time.monotonic()
        if now - _last_full < FULL_COLLECTION_GAP_S:
            generation = 1
        else:
            _last_full = now
    return gc.collect(generation) if generation >= 0 else 0


def install(parent: QObject) -> QTimer:
    """Stop automatic collection and collect from a timer owned by `parent` (the application)."""
    timer = parent.findChild(QTimer, "ui-thread-gc")
    if timer is None:
        timer = QTimer(parent)
        timer.setObjectName("ui-thread-gc")
        timer.setInterval(INTERVAL_MS)
        timer.timeout.connect(collect_if_due)
        timer.start()
    gc.disable()
    return timer
