"""`ckpt-inspector telemetry`: sample NVML live, or replay a recorded nvidia-smi / own CSV log."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import datetime

import numpy as np

from inspector.cli.telemetry import serve as telemetry_serve
from inspector.core.atomic import OutputExistsError
from inspector.core.badges import alert_look, shout
from inspector.core.errors import CodedError
from inspector.core.termtext import counted
from inspector.gpu.alerts import AlertRules, ingest
from inspector.gpu.events import THROTTLE, timeline
from inspector.gpu.sampler import Sampler
from inspector.gpu.telemetry import (
    DEFAULT_INTERVAL_S,
    DEFAULT_TEMP_THRESHOLD_C,
    MIN_INTERVAL_S,
    Alert,
    GpuSample,
    TelemetryStore,
)

EXIT_OK = 0
EXIT_ALERTS = 1
EXIT_NO_GPU = 3
EXIT_BAD_LOG = 4
EXIT_OUTPUT = 5
EXIT_SOURCE_LOST = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the telemetry subcommand."""
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"seconds between samples (default 1, at least {MIN_INTERVAL_S})")
    parser.add_argument("--duration", type=float, metavar="S",
                        help="stop after S seconds (default: until Ctrl-C)")
    parser.add_argument("--csv", metavar="OUT",
                        help="record to OUT in nvidia-smi CSV columns (with --replay: convert)")
    parser.add_argument("--replay", metavar="LOG",
                        help="replay an nvidia-smi --format=csv log or a recording of this tool")
    parser.add_argument("--temp-threshold", type=float, default=DEFAULT_TEMP_THRESHOLD_C,
                        metavar="C", help="alert above this GPU temperature (default 85 °C)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --csv OUT")
    telemetry_serve.add_arguments(parser)


def _num(value: float | None, unit: str, fmt: str = "{:.0f}") -> str:
    return "n/a" if value is None else fmt.format(value) + unit


def format_sample(s: GpuSample) -> str:
    """One human line per GPU sample."""
    clock = datetime.fromtimestamp(s.timestamp).strftime("%H:%M:%S.%f")[:-4]
    if s.lost:
        return f"{clock} GPU{s.index}  LOST"
    reasons = ", ".join(s.reasons()) or ("n/a" if s.clocks_event_reasons is None else "none")
    return (
        f"{clock} GPU{s.index}  {_num(s.temperature_gpu, '°C')}"
        f" (mem {_num(s.temperature_memory, '°C')})"
        f"  {_num(s.power_draw, '', '{:.1f}')}/{_num(s.power_limit, ' W')}"
        f"  util {_num(s.utilization_gpu, '%')}"
        f"  mem {_num(s.memory_used, '')}/{_num(s.memory_total, ' MiB')}"
        f"  SM {_num(s.clock_sm, ' MHz')}"
        f"  ECC unc {_num(s.ecc_uncorrected_volatile, '')}"
        f"  PCIe replay {_num(s.pcie_replay, '')}"
        f"  clocks: {reasons}"
    )


def format_alert(alert: Alert) -> str:
    """One line for an alert, or a throttle onset (`THROTTLE`, not an alert: it does not set
    the exit status): its severity's word in capitals, as the GPU pane's banner says it."""
    clock = datetime.fromtimestamp(alert.timestamp).strftime("%H:%M:%S")
    what = "THROTTLE" if alert.kind == THROTTLE else "ALERT"
    return f"{clock} {what} [{shout(alert_look(alert.severity).word)}] {alert.message}"


def _err(message: str) -> None:
    print(f"ckpt-inspector telemetry: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run live sampling or a replay; see the exit codes in the epilog."""
    if args.interval < MIN_INTERVAL_S:
        _err(f"--interval must be at least {MIN_INTERVAL_S} s")
        return 2
    if args.serve is not None:
        code, message = telemetry_serve.serve(args, lambda a: print(format_alert(a), flush=True))
        if message:
            _err(message)
        return code
    if args.from_prometheus:
        return _from_prometheus(args)
    if args.replay:
        return _replay(args)
    return _live(args)


def _replay(args: argparse.Namespace) -> int:
    from inspector.gpu.smi_csv import LogFormatError, read_log, write_log

    try:
        log = read_log(args.replay)
    except LogFormatError as exc:
        _err(str(exc))
        return EXIT_BAD_LOG
    store = TelemetryStore(capacity=max(1, len(log.samples)))
    alerts = ingest(store, log.samples, AlertRules(args.temp_threshold))
    print(_summary(args.replay, store, len(log.samples)))
    if log.bad_cells:
        print(f"  {log.bad_cells} unreadable cells skipped")
    for note in log.notes:
        print(f"  note: {note}")
    for event in timeline(store, alerts):  # the alerts and throttle onsets the GPU pane marks
        print(format_alert(event))
    if args.csv:
        try:
            rows = write_log(args.csv, log.samples, overwrite=args.overwrite)
        except (OutputExistsError, OSError) as exc:
            _err(f"cannot write {args.csv}: {exc}")
            return EXIT_OUTPUT
        print(f"wrote {rows} rows to {args.csv}")
    return EXIT_ALERTS if alerts else EXIT_OK


def _from_prometheus(args: argparse.Namespace) -> int:
    from inspector.gpu.prom_reader import make_query, read_range

    try:
        query = make_query(args.from_prometheus, args.node, args.start, args.end, args.step)
        samples = read_range(query)
    except CodedError as exc:
        _err(exc.message)
        return EXIT_BAD_LOG
    store = TelemetryStore(capacity=max(1, len(samples)))
    alerts = ingest(store, samples, AlertRules(args.temp_threshold))
    print(_summary(args.from_prometheus, store, len(samples)))
    for event in timeline(store, alerts):
        print(format_alert(event))
    return EXIT_ALERTS if alerts else EXIT_OK


def _summary(source: str, store: TelemetryStore, rows: int) -> str:
    gpus = store.gpus()
    lines = []
    spans = []
    for gpu in gpus:
        times, _ = store.series(gpu, "temperature_gpu")
        spans += [times.min(), times.max()]
        latest = store.latest(gpu)
        parts = [f"  GPU{gpu} {latest.name or ''}".rstrip() + f": {len(times)} samples"]
        for name, label, unit in (("temperature_gpu", "temp", "°C"), ("power_draw", "power", "W"),
                                  ("utilization_gpu", "util", "%")):
            _, values = store.series(gpu, name)
            finite = values[np.isfinite(values)]
            parts.append(
                f"{label} n/a" if not finite.size
                else f"{label} {finite.min():.0f}–{finite.max():.0f} {unit}"
            )
        lines.append(", ".join(parts))
    span = (max(spans) - min(spans)) if spans else 0.0
    head = (f"{source}: {counted(rows, 'row')}, {counted(len(gpus), 'GPU')}, "
            f"{time.strftime('%H:%M:%S', time.gmtime(span))} span, "
            f"{counted(len(store.xids), 'XID event')}")
    return "\n".join([head, *lines])


def _live(args: argparse.Namespace) -> int:
    from inspector.gpu.nvml_source import NvmlSource, NvmlUnavailable

    try:
        source = NvmlSource.open()
    except NvmlUnavailable as exc:
        from inspector.gpu import sample_log

        _err(f"{exc}; open a recorded log with --replay LOG (to see one, replay the shipped "
             f"sample: --replay {sample_log.path()})")
        return EXIT_NO_GPU
    try:
        return _sample(args, source)
    finally:
        source.close()


def _sample(args: argparse.Namespace, source) -> int:
    from inspector.gpu.smi_csv import CsvRecorder

    names = ", ".join(f"GPU{i} {n or '?'}" for i, n in enumerate(source.names))
    print(f"NVIDIA driver {source.driver_version or '?'}: {names}; every {args.interval:g} s")
    recorder = None
    if args.csv:
        try:
            recorder = CsvRecorder(args.csv, overwrite=args.overwrite)
        except (OutputExistsError, OSError) as exc:
            _err(f"cannot write {args.csv}: {exc}")
            return EXIT_OUTPUT
    print_lock = threading.Lock()
    alerts: list[Alert] = []

    def on_samples(samples: list[GpuSample], _alerts: list[Alert]) -> None:
        if recorder:
            recorder.write(samples)
        with print_lock:
            for s in samples:
                print(format_sample(s), flush=True)

    def on_alert(alert: Alert) -> None:
        alerts.append(alert)
        with print_lock:
            print(format_alert(alert), flush=True)

    store = TelemetryStore(capacity=4096)  # the CLI keeps only recent history; the CSV keeps all
    rules = AlertRules(args.temp_threshold)
    sampler = Sampler(source, store, args.interval, rules, on_samples, on_alert)
    sampler.start()
    try:
        sampler.wait(args.duration)
    except KeyboardInterrupt:
        print("stopped")
    finally:
        sampler.stop()
        if recorder:
            recorder.close()
            print(f"recorded {recorder.rows} rows to {args.csv}")
    if sampler.error:
        _err(sampler.error)
        return EXIT_SOURCE_LOST
    return EXIT_ALERTS if alerts else EXIT_OK
