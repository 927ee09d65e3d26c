"""`telemetry --serve`: publish live NVML, a replayed log and run journals to Prometheus.

Kept apart from `telemetry_cmd` so that command stays the one place for sampling and replay;
it calls `serve(args, report_alert)` and owns the exit codes.
"""

from __future__ import annotations

import argparse
import socket
import threading
from collections.abc import Callable

from inspector.core.errors import CodedError
from inspector.core.termtext import counted
from inspector.gpu.alerts import AlertRules
from inspector.gpu.sampler import Sampler
from inspector.gpu.telemetry import Alert, TelemetryStore

INSTALL_HINT = ("--serve needs prometheus_client, a dependency of this package: reinstall it "
                "(scripts/setup.sh) or pip install -c constraints.txt prometheus-client")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of --serve and --from-prometheus."""
    group = parser.add_argument_group("Prometheus")
    group.add_argument("--serve", metavar="[HOST:]PORT",
                       help="serve /metrics for Prometheus (host 127.0.0.1 unless given; "
                            "port 0 picks a free one); with --replay LOG, replays the log")
    group.add_argument("--run", action="append", default=[], metavar="DIR",
                       help="with --serve: also publish RUN_DIR/journal.jsonl (repeatable)")
    group.add_argument("--hostname", default=socket.gethostname(),
                       help="the Hostname label of the served series (default: this host)")
    group.add_argument("--from-prometheus", metavar="URL",
                       help="read a node's GPU history from the Prometheus server at URL")
    group.add_argument("--node", help="with --from-prometheus: the node's Hostname label")
    group.add_argument("--start", default="1h",
                       help="range start: now, an age (2h, 30m, 7d), Unix seconds or ISO time "
                            "(default 1h ago)")
    group.add_argument("--end", default="now", help="range end (default now)")
    group.add_argument("--step", type=float, metavar="S",
                       help="seconds between points (default: 2,000 points over the range)")


def serve(args: argparse.Namespace, report_alert: Callable[[Alert], None]) -> tuple[int, str]:
    """Serve until --duration or Ctrl-C: (0, '') or (exit code, one-line error). Codes:
    2 bad option or port or no prometheus_client, 3 no GPU and nothing else to serve, 4 bad
    log, 6 driver lost."""
    if args.csv or args.from_prometheus:
        other = "--csv" if args.csv else "--from-prometheus"
        return 2, f"{other} does not combine with --serve; run them as two commands"
    try:
        from inspector.gpu import exporter as ex
    except ImportError:
        return 2, INSTALL_HINT
    try:
        address = ex.parse_address(args.serve)
    except CodedError as exc:
        return 2, exc.message
    exporter = ex.Exporter(args.hostname, args.run)
    feed: list = []
    source = None
    if args.replay:
        from inspector.gpu.smi_csv import LogFormatError, read_log

        try:
            feed = ex.ticks(read_log(args.replay).samples)
        except LogFormatError as exc:
            return 4, str(exc)
        what = f"{args.replay} replayed, one tick every {args.interval:g} s"
    else:
        from inspector.gpu.nvml_source import NvmlSource, NvmlUnavailable

        try:
            source = NvmlSource.open()
            what = f"{counted(len(source.names), 'GPU')} live"
        except NvmlUnavailable as exc:
            if not args.run:
                return 3, f"{exc}; serve a recorded log with --replay LOG, or runs with --run DIR"
            what = f"no GPU ({exc})"
    try:
        endpoint = ex.Endpoint(exporter, address)
    except CodedError as exc:
        if source:
            source.close()
        return 2, exc.message
    runs = f", {counted(len(args.run), 'run')}" if args.run else ""
    print(f"serving {endpoint.address.url()}: {what}{runs}; Ctrl-C to stop", flush=True)
    sampler = None
    if source:
        sampler = Sampler(source, TelemetryStore(capacity=16), args.interval,
                          AlertRules(args.temp_threshold),
                          lambda samples, _alerts: exporter.update(samples), report_alert)
        sampler.start()
    stop = threading.Event()
    if sampler:
        threading.Thread(target=lambda: (sampler.wait(), stop.set()), daemon=True).start()
    try:
        ex.serve_until(exporter, stop, args.interval, args.duration, feed)
    except KeyboardInterrupt:
        print("stopped")
    finally:
        if sampler:
            sampler.stop()
        if source:
            source.close()
        endpoint.stop()
    if sampler and sampler.error:
        return 6, sampler.error
    return 0, ""
