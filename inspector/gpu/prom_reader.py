"""A node's GPU history from a Prometheus server, as the same telemetry records a log replays to.

Reads dcgm-exporter's series (or this tool's own exporter, which publishes the same names)
with one `query_range` over the HTTP API, standard library only, so the CLI and the app share
it without torch or Qt. One GpuSample per GPU per evaluation step.

The reply is a claim from a server: it is read within a size cap and a deadline for the whole
reply (a server that trickles bytes is cut off), and its shape is checked before use, so a
wrong, huge, deep or slow reply is one `CodedError` line, never a traceback or a hang.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from inspector.core.errors import CodedError
from inspector.gpu.dcgm_names import DCGM_NAMES, XID_METRIC, DcgmName
from inspector.gpu.telemetry import FIELDS, GpuSample

LOST_METRIC = "ckpt_inspector_gpu_lost"
NODE_LABEL = "Hostname"
# Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 11_000
DEFAULT_POINTS = 2_000
TIMEOUT_S = 30.0
"""The longest wait for a connection or for any one read, and for the whole reply."""
MAX_REPLY_BYTES = 64 << 20
"""The largest reply read (11,000 points of every GPU series of a node is a few MB)."""

_KINDS = {f.name: f.kind for f in FIELDS}
_SPEC_OF: dict[str, DcgmName] = {
    name: spec for spec in DCGM_NAMES for name in (spec.metric, *spec.aliases)
}
_RELATIVE = re.compile(r"^-?(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class RangeQuery:
    """Which node, and which time range at which resolution."""

    url: str
    node: str | None
    start: float
    end: float
    step: float


def parse_time(text: str, now: float | None = None) -> float:
    """`now`, an age (`2h`, `-30m`, `7d` before now), Unix seconds or an ISO 8601 time."""
    now = time.time() if now is None else now
    text = text.strip()
    if text == "now":
        return now
    if m := _RELATIVE.match(text):
        return now - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise CodedError("bad-time", f"cannot read the time {text!r}; give now, an age like 2h, "
                         "Unix seconds or an ISO time like 2026-12-01T10:00") from None


def make_query(url: str, node: str | None, start: str, end: str,
               step: float | None = None, now: float | None = None) -> RangeQuery:
    """A RangeQuery from the command line's words; the step defaults to 2,000 points."""
    t0, t1 = parse_time(start, now), parse_time(end, now)
    if t1 <= t0:
        raise CodedError("bad-time", "the range ends before it starts; swap --start and --end")
    step = step or max(1.0, (t1 - t0) / DEFAULT_POINTS)
    if (t1 - t0) / step > MAX_POINTS:
        raise CodedError("bad-step", f"--step {step:g} gives more than {MAX_POINTS} points; "
                         f"use --step {(t1 - t0) / MAX_POINTS:.0f} or more")
    return RangeQuery(url.rstrip("/"), node, t0, t1, step)


def _selector(node: str | None) -> str:
    names = sorted({*_SPEC_OF, XID_METRIC, LOST_METRIC})
    matchers = [f'__name__=~"{"|".join(names)}"']
    if node is not None:
        matchers.append(f'{NODE_LABEL}="{_escape(node)}"')
    return "{" + ",".join(matchers) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _get(query: RangeQuery) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    params = urllib.parse.urlencode({
        "query": _selector(query.node), "start": f"{query.start:.3f}",
        "end": f"{query.end:.3f}", "step": f"{query.step:g}",
    })
    address = f"{query.url}/api/v1/query_range?{params}"
    deadline = time.monotonic() + TIMEOUT_S
    try:
        with urllib.request.urlopen(address, timeout=TIMEOUT_S) as reply:
            body = _decode(_read_bounded(reply, deadline, query.url), query.url)
    except urllib.error.HTTPError as exc:
        body = _error_body(exc, deadline, query.url)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CodedError("prometheus-unreachable", f"cannot query {query.url}: {reason}; "
                         "check the URL and that Prometheus is running") from None
    if body.get("status") != "success":
        raise CodedError("prometheus-error", f"Prometheus refused the query: "
                         f"{str(body.get('error', 'no reason given'))[:500]}")
    return _series(body, query.url)


def _read_bounded(reply: Any, deadline: float, url: str) -> bytes:
    """The whole reply, within `MAX_REPLY_BYTES` and the deadline (one receive at a time)."""
    chunks, total = [], 0
    read = getattr(reply, "read1", reply.read)
    while chunk := read(1 << 16):
        total += len(chunk)
        if total > MAX_REPLY_BYTES:
            raise CodedError("prometheus-too-large", f"{url} sent more than "
                             f"{MAX_REPLY_BYTES >> 20} MiB; narrow --start/--end or raise --step")
        if time.monotonic() > deadline:
            raise CodedError("prometheus-slow", f"{url} did not finish its reply within "
                             f"{TIMEOUT_S:g} s; check the server's load or narrow the range")
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(data: bytes, url: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise CodedError("prometheus-bad-reply", f"{url} did not answer with Prometheus' JSON "
                         "(is it a Prometheus server?)") from None
    if not isinstance(body, dict):
        raise CodedError("prometheus-bad-reply", f"{url} answered with JSON that is not an "
                         "object (is it a Prometheus server?)")
    return body


def _series(body: dict[str, Any], url: str) -> list[tuple[dict[str, str],
                                                         list[tuple[float, float]]]]:
    """Each series' labels and (time, value) points, checked: a reply of another shape is one
    `prometheus-bad-reply` error."""
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise CodedError("prometheus-bad-reply", f"{url}: the reply has no data.result list")
    out = []
    for s in result:
        labels = s.get("metric") if isinstance(s, dict) else None
        values = s.get("values") if isinstance(s, dict) else None
        if (not isinstance(labels, dict) or not isinstance(values, list)
                or not all(isinstance(k, str) and isinstance(v, str)
                           for k, v in labels.items())):
            raise CodedError("prometheus-bad-reply", f"{url}: a series without string labels "
                             "and a values list")
        try:
            points = [(float(t), float(v)) for t, v in values]
        except (TypeError, ValueError):
            raise CodedError("prometheus-bad-reply", f"{url}: a series' values are not "
                             "[time, number] pairs") from None
        out.append((labels, points))
    return out


def _error_body(exc: urllib.error.HTTPError, deadline: float, url: str) -> dict[str, Any]:
    try:
        return _decode(_read_bounded(exc, deadline, url), url)
    except (CodedError, OSError):
        return {"status": "error", "error": f"HTTP {exc.code}"}


def read_range(query: RangeQuery) -> list[GpuSample]:
    """Every GPU reading of the node over the range, oldest first, XIDs on the sample they
    first appear in; raises CodedError when the server cannot answer or holds no such node."""
    series = _get(query)
    nodes = sorted({labels.get(NODE_LABEL, "") for labels, _ in series})
    if query.node is None and len(nodes) > 1:
        raise CodedError("many-nodes", f"{query.url} holds {len(nodes)} nodes "
                         f"({', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''}); "
                         "pick one with --node")
    if not series:
        where = f"node {query.node!r}" if query.node else "any node"
        raise CodedError("no-gpu-series", f"{query.url} has no GPU series for {where} in that "
                         "range; check --node and --start/--end")
    samples: dict[tuple[int, float], GpuSample] = {}
    xid_values: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for labels, points in series:
        try:
            gpu = int(labels.get("gpu", ""))
        except ValueError:
            continue
        name = labels.get("__name__", "")
        if name not in _SPEC_OF and name not in (XID_METRIC, LOST_METRIC):
            continue  # a series the query did not ask for
        for t, value in points:
            if name == XID_METRIC:
                if math.isfinite(value):
                    xid_values[gpu].append((t, int(value)))
                continue
            sample = samples.get((gpu, t))
            if sample is None:
                sample = samples[(gpu, t)] = GpuSample(
                    t, gpu, labels.get("modelName") or None, labels.get("UUID") or None)
            if name == LOST_METRIC:
                sample.lost = value != 0
            else:
                spec = _SPEC_OF[name]
                _set(sample, spec.field, value / spec.scale)
    _place_xids(samples, xid_values)
    return [samples[k] for k in sorted(samples, key=lambda k: (k[1], k[0]))]


def _set(sample: GpuSample, name: str, value: float) -> None:
    kind = _KINDS[name]
    if kind == "bool":
        setattr(sample, name, value != 0)
    elif kind == "mask":
        setattr(sample, name, int(value) if math.isfinite(value) else None)
    else:
        setattr(sample, name, value)


def _place_xids(samples: dict[tuple[int, float], GpuSample],
                xid_values: dict[int, list[tuple[float, int]]]) -> None:
    """dcgm-exporter publishes the last XID as a level; each change to a new non-zero value
    is one event, put on that GPU's sample of that step."""
    for gpu, points in xid_values.items():
        before = 0
        for t, xid in sorted(points):
            if xid and xid != before:
                sample = samples.get((gpu, t))
                if sample is None:
                    sample = samples[(gpu, t)] = GpuSample(t, gpu)
                sample.xids = (*sample.xids, xid)
            before = xid
