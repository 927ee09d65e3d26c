"""The GPU's health at the moment of a transient alarm: NVML ECC counters, retired pages and
remapped rows, and the XID errors seen since the guard started. One line where there is none.

XIDs are only reported to an event set registered before they happen, so `XidWatch` listens
from the guard's start on a daemon thread (`guard-xid`); the counters are read at the alarm.
"""

from __future__ import annotations

import threading
from dataclasses import asdict

from inspector.gpu.nvml_source import NvmlSource, NvmlUnavailable
from inspector.gpu.telemetry import SourceLost, XidEvent

HEALTH_FIELDS = ("ecc_corrected_volatile", "ecc_uncorrected_volatile",
                 "ecc_corrected_aggregate", "ecc_uncorrected_aggregate", "retired_sbe",
                 "retired_dbe", "retired_pending", "remapped_correctable",
                 "remapped_uncorrectable", "remapped_pending", "remapped_failure",
                 "temperature_gpu", "lost")


class XidWatch:
    """Collects XID events from NVML on a daemon thread; `events` is what it has seen."""

    def __init__(self) -> None:
        self.events: list[XidEvent] = []
        self.note: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._source: NvmlSource | None = NvmlSource.open()
        except NvmlUnavailable as exc:
            self._source, self.note = None, str(exc)
            return
        self._thread = threading.Thread(target=self._run, name="guard-xid", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._source is not None
        try:
            self._source.watch_xids(self.events.append, self._stop)
        except SourceLost as exc:
            self.note = str(exc)

    def close(self) -> None:
        """Stop listening and shut NVML down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._source is not None:
            self._source.close()
            self._source = None


def device_state(xids: XidWatch | None = None) -> dict:
    """Each GPU's health counters now, plus the XIDs seen; {'note': one line} without a GPU."""
    try:
        source = NvmlSource.open()
    except NvmlUnavailable as exc:
        return {"note": f"no GPU health attached: {exc}"}
    try:
        gpus = [{"index": s.index, "name": s.name, "uuid": s.uuid,
                 **{k: v for k, v in asdict(s).items() if k in HEALTH_FIELDS}}
                for s in source.sample()]
    except SourceLost as exc:
        return {"note": f"no GPU health attached: {exc}"}
    finally:
        source.close()
    out: dict = {"gpus": gpus}
    if xids is not None:
        out["xids"] = [{"time": e.timestamp, "gpu": e.gpu, "xid": e.xid} for e in xids.events]
        if xids.note:
            out["xid_note"] = xids.note
    return out
