"""A Prometheus endpoint over GPU telemetry and training runs (`telemetry --serve`).

GPU series carry dcgm-exporter's names and labels (`dcgm_names`), so its dashboards and the
rules users already wrote keep working; what no exporter has (guard alarms, checkpoint
verification and age, consistency outcomes, decoded clock events) is under `ckpt_inspector_*`.
Every series is a gauge except the `ckpt_inspector_*` event counts: NVML's counters are
published as read, under names that end in `_TOTAL` where dcgm-exporter's do, and a counter
family of that name would gain a second `_total`.

The collector reads a snapshot under a lock; the feeds (a Sampler's callback, a replay loop,
the run refresh) replace it, so a scrape never waits on NVML, a journal or a hash.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

from inspector.core.errors import CodedError
from inspector.gpu.dcgm_names import DCGM_NAMES, GPU_LABELS, XID_METRIC
from inspector.gpu.telemetry import CLOCK_REASONS, FIELDS, GpuSample
from inspector.run.status import ChangeWatch, RunStatus, SavedCheckpoint, read_run

DEFAULT_HOST = "127.0.0.1"
PREFIX = "ckpt_inspector_"
RUN_LABELS = ("run", "Hostname")
_LABEL_OF = {f.name: f.label for f in FIELDS}


@dataclass(frozen=True)
class Address:
    """Where the endpoint listens."""

    host: str
    port: int

    def url(self) -> str:
        """The scrape URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


def parse_address(text: str) -> Address:
    """`PORT`, `HOST:PORT` or `[IPv6]:PORT`; the host defaults to 127.0.0.1 (this machine only)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or int(port) > 65535:
        raise CodedError("bad-address", f"--serve takes [HOST:]PORT, got {text!r}; e.g. 9400")
    return Address(host, int(port))


def _tag(value: str | None) -> str:
    return "" if value is None else value


class Exporter:
    """The newest reading of each GPU and the status of each run, as a prometheus_client
    collector."""

    def __init__(self, hostname: str, runs: Sequence[str | os.PathLike[str]] = ()) -> None:
        self.hostname = hostname
        self.run_dirs = [Path(r) for r in runs]
        self._lock = threading.Lock()
        self._samples: dict[int, GpuSample] = {}
        self._last_xid: dict[int, int] = {}
        self._xid_counts: Counter[tuple[int, int]] = Counter()
        self._runs: list[tuple[RunStatus, list[tuple[SavedCheckpoint, bool]]]] = []
        self._runs_at = 0.0
        self._watch = ChangeWatch()

    def update(self, samples: Iterable[GpuSample]) -> None:
        """Take the newest sample of each GPU (and count the XIDs it carries)."""
        with self._lock:
            for sample in samples:
                self._samples[sample.index] = sample
                for xid in sample.xids:
                    self._last_xid[sample.index] = xid
                    self._xid_counts[(sample.index, xid)] += 1

    def refresh_runs(self, now: float | None = None) -> None:
        """Read every run's journal again and look whether its checkpoints changed on disk."""
        fresh = []
        for folder in self.run_dirs:
            status = read_run(folder)
            # A path saved again (last.ckpt) is judged by its newest record only.
            newest = {s.path: s for s in status.saves}
            changed = [(s, c) for s in newest.values() if (c := self._watch.changed(s)) is not None]
            fresh.append((status, changed))
        with self._lock:
            self._runs, self._runs_at = fresh, time.time() if now is None else now

    def collect(self) -> Iterator[Metric]:
        """The metric families of the current snapshot (called by prometheus_client per scrape)."""
        with self._lock:
            samples = [self._samples[i] for i in sorted(self._samples)]
            last_xid, xid_counts = dict(self._last_xid), Counter(self._xid_counts)
            runs, now = list(self._runs), self._runs_at
        yield from _gpu_families(samples, last_xid, xid_counts, self.hostname)
        yield from _run_families(runs, now, self.hostname)


def _gpu_families(samples: list[GpuSample], last_xid: dict[int, int],
                  xid_counts: Counter[tuple[int, int]], hostname: str) -> Iterator[Metric]:
    def labels(s: GpuSample) -> list[str]:
        return [str(s.index), _tag(s.uuid), f"nvidia{s.index}", _tag(s.name), hostname]

    for spec in DCGM_NAMES:
        family = GaugeMetricFamily(spec.metric, _LABEL_OF[spec.field], labels=GPU_LABELS)
        for s in samples:
            value = getattr(s, spec.field)
            if value is not None and not s.lost:
                family.add_metric(labels(s), float(value) * spec.scale)
        yield family
    xid = GaugeMetricFamily(XID_METRIC, "the last XID the driver reported (0 = none)",
                            labels=GPU_LABELS)
    lost = GaugeMetricFamily(PREFIX + "gpu_lost", "1 when the GPU fell off the bus or needs a "
                             "reset", labels=GPU_LABELS)
    when = GaugeMetricFamily(PREFIX + "gpu_sample_timestamp_seconds",
                             "when the published reading was taken", labels=GPU_LABELS)
    reasons = GaugeMetricFamily(PREFIX + "gpu_clock_event_active",
                                "1 while a clock-event (throttle) reason is active",
                                labels=(*GPU_LABELS, "reason"))
    events = CounterMetricFamily(PREFIX + "gpu_xid_events", "XID events seen by this exporter",
                                 labels=(*GPU_LABELS, "xid"))
    for s in samples:
        tags = labels(s)
        xid.add_metric(tags, float(last_xid.get(s.index, 0)))
        lost.add_metric(tags, float(s.lost))
        when.add_metric(tags, s.timestamp)
        if s.clocks_event_reasons is not None and not s.lost:
            for bit, word in CLOCK_REASONS:
                reasons.add_metric([*tags, word], float(bool(s.clocks_event_reasons & bit)))
    by_index = {s.index: s for s in samples}
    for (gpu, number), count in sorted(xid_counts.items()):
        if gpu in by_index:
            events.add_metric([*labels(by_index[gpu]), str(number)], float(count))
    yield from (xid, lost, when, reasons, events)


def _run_families(runs: list[tuple[RunStatus, list[tuple[SavedCheckpoint, bool]]]], now: float,
                  hostname: str) -> Iterator[Metric]:
    def family(kind: type, name: str, doc: str, extra: tuple[str, ...] = ()) -> Metric:
        return kind(PREFIX + name, doc, labels=(*RUN_LABELS, *extra))

    readable = family(GaugeMetricFamily, "journal_readable", "1 when the run's journal was read")
    problems = family(GaugeMetricFamily, "journal_problems",
                      "journal lines truncated, unreadable, edited or deleted")
    saves = family(CounterMetricFamily, "checkpoint_saves", "checkpoints the ledger recorded")
    checks = family(CounterMetricFamily, "checkpoint_verifications",
                    "saved checkpoints by their verification at save time", ("result",))
    last = family(GaugeMetricFamily, "last_checkpoint_timestamp_seconds", "newest save")
    last_ok = family(GaugeMetricFamily, "last_verified_checkpoint_timestamp_seconds",
                     "newest save that verified")
    age = family(GaugeMetricFamily, "checkpoint_age_seconds", "seconds since the newest save")
    unverified = family(GaugeMetricFamily, "unverified_seconds",
                        "seconds since the newest verified checkpoint (since the run began "
                        "if none verified)")
    changed = family(GaugeMetricFamily, "checkpoint_changed_after_save",
                     "1 when a saved checkpoint's bytes no longer match the ledger's SHA-256",
                     ("step", "path"))
    alarms = family(CounterMetricFamily, "guard_alarms", "training-guard alarms",
                    ("rule", "action"))
    last_alarm = family(GaugeMetricFamily, "last_guard_alarm_timestamp_seconds",
                        "newest training-guard alarm")
    outcomes = family(CounterMetricFamily, "consistency_checks", "consistency-check outcomes",
                      ("outcome",))
    for status, changes in runs:
        tags = [status.run, hostname]
        readable.add_metric(tags, float(status.error is None))
        problems.add_metric(tags, float(status.journal_problems))
        saves.add_metric(tags, float(len(status.saves)))
        results = Counter({True: "verified", False: "failed", None: "unknown"}[s.verified]
                          for s in status.saves)
        for result in ("verified", "failed", "unknown"):
            checks.add_metric([*tags, result], float(results[result]))
        newest, newest_ok = status.last_save(), status.last_verified()
        if newest and newest.time is not None:
            last.add_metric(tags, newest.time)
            age.add_metric(tags, max(0.0, now - newest.time))
        if newest_ok and newest_ok.time is not None:
            last_ok.add_metric(tags, newest_ok.time)
        if (gap := status.unverified_seconds(now)) is not None:
            unverified.add_metric(tags, gap)
        for save, differs in changes:
            step = "" if save.step is None else str(save.step)
            changed.add_metric([*tags, step, str(save.path)], float(differs))
        for (rule, action), count in sorted(status.alarms.items()):
            alarms.add_metric([*tags, rule, action], float(count))
        if status.last_alarm is not None:
            last_alarm.add_metric(tags, status.last_alarm)
        for outcome, count in sorted(status.consistency.items()):
            outcomes.add_metric([*tags, outcome], float(count))
    yield from (readable, problems, saves, checks, last, last_ok, age, unverified, changed,
                alarms, last_alarm, outcomes)


def ticks(samples: Iterable[GpuSample]) -> list[list[GpuSample]]:
    """A replayed log as one list per tick: a new tick starts when a GPU comes round again."""
    out: list[list[GpuSample]] = []
    seen: set[int] = set()
    for sample in samples:
        if not out or sample.index in seen:
            out.append([])
            seen = set()
        out[-1].append(sample)
        seen.add(sample.index)
    return out


class _Handler(WSGIRequestHandler):
    """No request log; no Nagle delay. wsgiref sends the headers and the body in separate
    writes, and with Nagle's algorithm against the scraper's delayed ACK a 50 KB answer
    waited 40 ms for nothing."""

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        """Log nothing: a scrape every few seconds is not news."""


class Endpoint:
    """The HTTP endpoint serving one Exporter on a daemon thread; stop() closes the socket."""

    def __init__(self, exporter: Exporter, address: Address) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(exporter)
        server_class = type("Server", (ThreadingWSGIServer,), {
            "address_family": socket.AF_INET6 if ":" in address.host else socket.AF_INET})
        try:
            self._server = make_server(address.host, address.port, make_wsgi_app(registry),
                                       server_class, handler_class=_Handler)
        except OSError as exc:
            raise CodedError("cannot-listen", f"cannot listen on {address.host}:{address.port}:"
                             f" {exc.strerror or exc}; pick another port") from None
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="metrics-endpoint", daemon=True)
        self._thread.start()
        self.address = Address(address.host, self._server.server_port)

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_until(exporter: Exporter, stop: threading.Event, interval: float,
                duration: float | None = None, feed: Sequence[list[GpuSample]] = ()) -> None:
    """Every `interval`: publish the next tick of `feed` (a replay), then re-read the runs;
    until `stop` is set or `duration` seconds passed. The last tick stays published."""
    end = None if duration is None else time.monotonic() + duration
    pending = iter(feed)
    while not stop.is_set():
        tick = next(pending, None)
        if tick is not None:
            exporter.update(tick)
        exporter.refresh_runs()
        wait = interval if end is None else min(interval, end - time.monotonic())
        if wait <= 0 or stop.wait(wait):
            break
