"""GPU alert rules: what a change between two samples of one GPU raises (ECC, retirement and
remapping, SRAM ECC, the recovery action the driver asks for, temperature with hysteresis, a
lost GPU, XIDs), the alert a banner shows, and `ingest`, which files samples and their alerts in
a `TelemetryStore`. Pure Python, like the model it reads (`gpu.telemetry`).
"""

from __future__ import annotations

from collections.abc import Iterable

from inspector.core.termtext import agree, counted
from inspector.core.vocabulary import AlertSeverity
from inspector.gpu.telemetry import (
    DEFAULT_TEMP_THRESHOLD_C,
    SRAM_UNITS,
    TEMP_HYSTERESIS_C,
    Alert,
    GpuSample,
    TelemetryStore,
    XidEvent,
    recovery_words,
)

CRITICAL, WARNING = AlertSeverity.CRITICAL, AlertSeverity.WARNING
"""The severities the rules raise (`core.badges.ALERT_LOOKS` says each in words)."""


class AlertRules:
    """The alert rules over a stream of samples.

    Uncorrected ECC counts alert whenever they exceed the highest count known for that GPU (0
    before any), so a first sample that already shows errors, or a count that appears after
    [N/A] samples, alerts once; an [N/A] between two equal counts does not. Pending
    retirement / remapping and remap failure alert when they appear; temperature alerts once
    when it rises above the threshold and re-arms only after it falls `hysteresis` degrees
    below it, so a GPU hovering at the line alerts once.
    """

    def __init__(self, temp_threshold: float = DEFAULT_TEMP_THRESHOLD_C,
                 hysteresis: float = TEMP_HYSTERESIS_C) -> None:
        self.temp_threshold = temp_threshold
        self.hysteresis = hysteresis
        self._hot: set[int] = set()
        self._ecc_known: dict[tuple[int, str], float] = {}

    def evaluate(self, previous: GpuSample | None, current: GpuSample) -> list[Alert]:
        """Alerts raised by the change from `previous` to `current` of one GPU."""
        alerts: list[Alert] = []
        t, gpu = current.timestamp, current.index

        def add(kind: str, severity: AlertSeverity, message: str) -> None:
            alerts.append(Alert(t, gpu, kind, severity, f"GPU {gpu}: {message}"))

        if current.lost and not (previous and previous.lost):
            add("gpu_lost", CRITICAL, "the GPU is lost (fell off the bus or needs a reset)")
        for name in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"):
            now = getattr(current, name)
            known = self._ecc_known.get((gpu, name))
            if now is not None and now > (known or 0):
                scope = name.rsplit("_", 1)[1]
                add("ecc_uncorrected", CRITICAL,
                    f"uncorrected ECC errors ({scope}) rose from {known:g} to {now:g}"
                    if known is not None else
                    f"{now:g} uncorrected ECC error{'' if now == 1 else 's'} ({scope})")
            if now is not None:
                self._ecc_known[(gpu, name)] = max(now, known or 0)
        for name, what in (
            ("retired_pending", "a page retirement is pending (reset the GPU to apply it)"),
            ("remapped_pending", "a row remapping is pending (reset the GPU to apply it)"),
            ("remapped_failure", "row remapping failed: the GPU has no spare rows left"),
        ):
            if getattr(current, name) and not getattr(previous, name, None):
                add(name, CRITICAL if name == "remapped_failure" else WARNING, what)
        if current.sram_threshold_exceeded and not getattr(previous, "sram_threshold_exceeded",
                                                           None):
            add("sram_threshold", CRITICAL, "uncorrected SRAM ECC errors passed the "
                "threshold: take the GPU out of service")
        for unit in SRAM_UNITS:
            name = f"sram_uncorrected_{unit}"
            now, known = getattr(current, name), self._ecc_known.get((gpu, name))
            if now is not None and now > (known or 0):
                add("sram_uncorrected", CRITICAL,
                    f"{now:g} uncorrected SRAM ECC error{'' if now == 1 else 's'} in {unit.upper()}"
                    + (f" (was {known:g})" if known is not None else ""))
            if now is not None:
                self._ecc_known[(gpu, name)] = max(now, known or 0)
        if current.remap_banks_none and not getattr(previous, "remap_banks_none", None):
            banks = int(current.remap_banks_none)
            add("remap_banks_none", WARNING, f"{counted(banks, 'memory bank')} "
                f"{agree(banks, 'has', 'have')} no spare row left to remap")
        temp, limit = current.temperature_gpu, self.temp_threshold
        if temp is not None:
            if gpu not in self._hot and temp > limit:
                self._hot.add(gpu)
                add("temperature", WARNING, f"temperature {temp:g} °C above {limit:g} °C")
            elif gpu in self._hot and temp <= limit - self.hysteresis:
                self._hot.discard(gpu)
        # the driver's own verdict, whatever the other fields (or a health summary that reads
        # "Healthy") say; raised last, so among a tick's critical alerts the banner leads with it
        wanted = recovery_words(current.recovery_action)
        if wanted and current.recovery_action != getattr(previous, "recovery_action", None):
            add("recovery_action", CRITICAL, f"the driver asks to {wanted} (NVML recovery "
                f"action {int(current.recovery_action)})")
        return alerts


SEVERITY_RANK = {severity: rank for rank, severity in enumerate(AlertSeverity)}
"""Alert severities from least to most urgent."""


def worst_alert(alerts: Iterable[Alert]) -> Alert | None:
    """The alert a banner shows: the most severe, the latest among equals (None if none)."""
    worst: Alert | None = None
    for alert in alerts:
        if worst is None or (SEVERITY_RANK.get(alert.severity, 1), alert.timestamp) >= (
                SEVERITY_RANK.get(worst.severity, 1), worst.timestamp):
            worst = alert
    return worst


def xid_alert(event: XidEvent) -> Alert:
    """The alert for a new XID event."""
    return Alert(event.timestamp, event.gpu, "xid", CRITICAL,
                 f"GPU {event.gpu}: {event.describe()}")


def ingest(
    store: TelemetryStore, samples: Iterable[GpuSample], rules: AlertRules | None = None
) -> list[Alert]:
    """Add samples (and the XIDs they carry) to the store; returns the alerts they raised."""
    rules = rules or AlertRules()
    raised: list[Alert] = []
    for sample in samples:
        previous = store.add(sample)
        alerts = rules.evaluate(previous, sample)
        for xid in sample.xids:
            event = XidEvent(sample.timestamp, sample.index, xid)
            store.add_xid(event)
            alerts.append(xid_alert(event))
        for alert in alerts:
            store.add_alert(alert)
        raised.extend(alerts)
    return raised
