"""`telemetry --from-prometheus` against a hostile server on 127.0.0.1: a reply of the wrong
shape, too large, too deep or too slow is one line with an exit code, never a traceback, a
hang or a process grown past its cap; the server's error text reaches the terminal escaped."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from inspector.cli import main
from inspector.gpu import prom_reader


def _serve(body: bytes | None, status: int = 200, trickle: float = 0.0):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            if trickle:
                for _ in range(400):  # bounded: the test's server stops by itself
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(trickle)
            elif body is not None:
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _telemetry_from(server: ThreadingHTTPServer, *extra: str) -> int:
    """`telemetry --from-prometheus` over the last hour from this server, which is then shut
    down; its exit status."""
    try:
        return main(["telemetry", "--from-prometheus", f"http://127.0.0.1:{server.server_port}",
                     *extra, "--start", "1h", "--end", "now"])
    finally:
        server.shutdown()


def _series(metric: dict, values: object) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": metric, "values": values}]}}).encode()


GOOD_LABELS = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "n1"}
REPLIES = {
    "not-json": b"<html>hello</html>",
    "a-list": b"[1, 2, 3]",
    "no-data": json.dumps({"status": "success"}).encode(),
    "result-not-list": json.dumps({"status": "success", "data": {"result": 5}}).encode(),
    "labels-not-strings": _series({"__name__": 5, "gpu": ["0"]}, [[1, "2"]]),
    "values-not-pairs": _series(GOOD_LABELS, [[1]]),
    "values-not-numbers": _series(GOOD_LABELS, [["x", "y"]]),
    "deep": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "short": b'{"status": "succ',
}


@pytest.mark.parametrize("kind", list(REPLIES))
def test_a_reply_of_the_wrong_shape_is_one_line(kind, capsys):
    server = _serve(REPLIES[kind])
    code = _telemetry_from(server, "--node", "n1")
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_reply_past_the_cap_is_refused_without_reading_it_all(monkeypatch, capsys):
    monkeypatch.setattr(prom_reader, "MAX_REPLY_BYTES", 1 << 20)
    server = _serve(b" " * (8 << 20))
    code = _telemetry_from(server)
    err = capsys.readouterr().err
    assert code != 0 and "more than 1 MiB" in err


def test_a_server_that_trickles_is_cut_off_at_the_deadline(monkeypatch, capsys):
    monkeypatch.setattr(prom_reader, "TIMEOUT_S", 1.0)
    server = _serve(None, trickle=0.05)
    started = time.monotonic()
    code = _telemetry_from(server)
    assert code != 0 and "did not finish its reply" in capsys.readouterr().err
    assert time.monotonic() - started < 15  # cut off, not waited out (400 x 0.05 s = 20 s)


def test_the_servers_error_text_reaches_the_terminal_escaped(capsys):
    body = json.dumps({"status": "error", "error": "bad\x1b]0;owned\x07 query"}).encode()
    server = _serve(body, status=400)
    code = _telemetry_from(server)
    err = capsys.readouterr().err
    assert code != 0 and "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned" in err
