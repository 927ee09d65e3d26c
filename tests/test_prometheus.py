"""The shipped alert rules under the real promtool, and end to end: a real Prometheus server on
127.0.0.1 scrapes `telemetry --serve` replaying a log, the double-bit ECC alert fires, and
`telemetry --from-prometheus` reads the node's history back into the same alerts."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from fleet_fixtures import write_replay

from inspector.cli import main
from inspector.run import journal

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "packaging" / "prometheus" / "ckpt-inspector-rules.yml"
RULE_TESTS = REPO / "tests" / "prometheus" / "ckpt-inspector-rules.test.yml"
PROMTOOL, PROMETHEUS = shutil.which("promtool"), shutil.which("prometheus")
NODE = "node-e2e"
WAIT_S = 120

MISSING = "not installed (Debian package prometheus; .ci/run installs it)"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=f"promtool {MISSING}")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason=f"prometheus {MISSING}")


@needs_promtool
def test_promtool_checks_the_rules():
    proc = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in proc.stdout


@needs_promtool
def test_promtool_rule_unit_tests_pass():
    proc = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    fired = {case["alertname"] for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for case in t["alert_rule_test"] if case["exp_alerts"]}
    assert alerts == fired
    for issue_topic in ("Xid", "DoubleBitEcc", "RowRemapFailure", "RetirementPending",
                        "RecoveryAction", "ThermalThrottling", "GuardAlarm",
                        "ChangedAfterSave", "NoVerifiedCheckpoint"):
        assert any(issue_topic in a for a in alerts), issue_topic


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def _wait(what: str, check, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def _ecc_scraped(url: str) -> float:
    """Waits until GPU 1's two ECC errors are scraped; a range end just past that scrape, so a
    range query's last step sees it whenever the query runs."""
    scraped = _wait("GPU 1's ECC errors to be scraped", lambda: _query(
        url, 'timestamp(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1"} == 2)'))
    return float(scraped[0]["value"][1]) + 2


def _wait_firing(url: str, alertname: str) -> list[dict]:
    """The Prometheus's alerts of this name once one fires."""

    def firing() -> list[dict]:
        alerts = _get_json(f"{url}/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts
                if a["labels"]["alertname"] == alertname and a["state"] == "firing"]

    return _wait(f"{alertname} to fire", firing)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, python_exe):
    """A real Prometheus on 127.0.0.1 (1 s scrapes and rule evaluation, the shipped rules)
    scraping `telemetry --serve` replaying 2 GPUs, GPU 1 gaining 2 double-bit ECC errors
    after 10 s, and a run whose guard just raised an alarm; yields (Prometheus URL, when the
    replay started)."""
    if PROMETHEUS is None:
        pytest.skip(f"prometheus {MISSING}")
    tmp = tmp_path_factory.mktemp("prom")
    log = write_replay(tmp / "smi.csv", gpus=2, ticks=40, dbe_from=20, dbe_gpu=1)
    run = tmp / "run-e2e"
    journal.append(journal.journal_path(run), "guard.alarm", {
        "step": 1200, "rule": "nan_loss", "action": "snapshot", "time": time.time()})
    exporter_port, prom_port = _free_port(), _free_port()
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "ckpt-inspector",
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}],
    }))
    url = f"http://127.0.0.1:{prom_port}"
    procs = []
    server_log = (tmp / "prometheus.log").open("w")
    try:
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=server_log))

        def ready():
            if procs[0].poll() is not None:
                tail = (tmp / "prometheus.log").read_text()[-2000:]
                pytest.fail(f"prometheus exited with {procs[0].returncode}: {tail}")
            return _get_json(f"{url}/api/v1/status/buildinfo")

        _wait("Prometheus to be ready", ready)
        started = time.time()
        # The replay starts once Prometheus scrapes, so it sees GPU 1's healthy ticks first.
        procs.append(subprocess.Popen(
            [python_exe, "-I", "-m", "inspector", "telemetry", "--replay", str(log),
             "--serve", f"127.0.0.1:{exporter_port}", "--interval", "0.5", "--duration", "600",
             "--hostname", NODE, "--run", str(run)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        assert "serving http://127.0.0.1:" in procs[1].stdout.readline()
        yield url, started
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)
        server_log.close()


def _query(url: str, promql: str) -> list:
    params = urllib.parse.urlencode({"query": promql})
    return _get_json(f"{url}/api/v1/query?{params}")["data"]["result"]


@needs_prometheus
def test_the_double_bit_ecc_alert_fires_in_a_real_prometheus(prometheus):
    url, _ = prometheus

    alerts = _wait_firing(url, "GpuDoubleBitEccError")
    assert [(a["labels"]["gpu"], a["labels"]["Hostname"]) for a in alerts] == [("1", NODE)]
    assert float(alerts[0]["value"]) == 2.0
    assert alerts[0]["annotations"]["summary"].startswith(f"GPU 1 on {NODE}: 2 uncorrected")


@needs_prometheus
def test_from_prometheus_reads_the_node_back_into_the_same_alerts(prometheus, capsys):
    url, started = prometheus
    end = _ecc_scraped(url)
    code = main(["telemetry", "--from-prometheus", url, "--node", NODE,
                 "--start", f"{started - 5:.0f}", "--end", f"{end:.3f}", "--step", "1"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert re.search(rf"^{re.escape(url)}: \d+ rows, 2 GPUs", out, re.M), out
    assert "GPU 1: uncorrected ECC errors (volatile) rose from 0 to 2" in out
    assert "GPU 0: uncorrected" not in out


@needs_prometheus
def test_from_prometheus_names_an_unknown_node_in_one_line(prometheus, capsys):
    url, _ = prometheus
    code = main(["telemetry", "--from-prometheus", url, "--node", "no-such-node"])
    err = capsys.readouterr().err.strip()
    assert code == 4 and len(err.splitlines()) == 1 and "check --node" in err


def test_from_prometheus_unreachable_is_one_line(capsys):
    code = main(["telemetry", "--from-prometheus", f"http://127.0.0.1:{_free_port()}"])
    err = capsys.readouterr().err.strip()
    assert code == 4 and len(err.splitlines()) == 1 and "that Prometheus is running" in err


DASHBOARD = REPO / "packaging" / "grafana" / "ckpt-inspector-dashboard.json"
_METRIC = re.compile(r"\b(DCGM_[A-Z_]+|ckpt_inspector_[a-z_]+)\b")


def _panel_queries() -> dict[str, str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {p["title"] + "/" + t["refId"]: t["expr"]
            for p in dashboard["panels"] for t in p.get("targets", ())}


def test_the_dashboard_charts_every_metric_an_alert_uses():
    charted = {m for expr in _panel_queries().values() for m in _METRIC.findall(expr)}
    alerted = {m for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
               for m in _METRIC.findall(r["expr"])}
    assert alerted <= charted, alerted - charted


@needs_prometheus
def test_every_dashboard_query_runs_in_a_real_prometheus(prometheus):
    url, _ = prometheus
    _ecc_scraped(url)
    results = {}
    for title, expr in _panel_queries().items():
        promql = expr.replace("$Hostname", ".*").replace("$gpu", ".*")
        params = urllib.parse.urlencode({"query": promql})
        reply = _get_json(f"{url}/api/v1/query?{params}")  # a bad query is an HTTP 400
        assert reply["status"] == "success", title
        results[title] = reply["data"]["result"]
    ecc = next(v for k, v in results.items() if k.startswith("Double-bit"))
    assert sorted(float(r["value"][1]) for r in ecc) == [0.0, 2.0]


@needs_prometheus
def test_the_gpu_pane_loads_a_node_from_prometheus(prometheus, qtbot):
    from inspector.gpu.prom_reader import make_query
    from inspector.gui.panes.gpu_pane import GpuPane

    url, started = prometheus
    end = _ecc_scraped(url)
    pane = GpuPane(autostart=False)
    qtbot.addWidget(pane)
    pane.open_prometheus(make_query(url, NODE, f"{started - 5:.0f}", f"{end:.3f}", 1))
    qtbot.waitUntil(lambda: pane.status.text().startswith("Replay of"), timeout=60_000)
    assert pane.status.text().startswith(f"Replay of {NODE} from {url}:")
    assert pane.stack.currentIndex() == 1 and pane.store.gpus() == [0, 1]
    ecc = [a for a in pane.store.alerts if a.kind == "ecc_uncorrected"]
    assert {a.gpu for a in ecc} == {1}
    _, values = pane.store.series(1, "ecc_uncorrected_volatile")
    assert values.max() == 2.0 and values.min() == 0.0


def test_the_gpu_pane_says_in_one_line_why_prometheus_failed(qtbot):
    from inspector.gpu.prom_reader import make_query
    from inspector.gui.panes.gpu_pane import GpuPane

    pane = GpuPane(autostart=False)
    qtbot.addWidget(pane)
    pane.open_prometheus(make_query(f"http://127.0.0.1:{_free_port()}", "n", "1h", "now"))
    qtbot.waitUntil(lambda: pane.status.text().startswith("Cannot load"), timeout=60_000)
    assert "that Prometheus is running" in pane.status.text()
    assert "\n" not in pane.status.text()


def test_the_prometheus_dialog_stays_open_on_a_bad_time_and_builds_the_query(qtbot):
    from inspector.gui.dialogs.prometheus_dialog import PrometheusDialog

    dialog = PrometheusDialog(url="http://prom:9090/")
    qtbot.addWidget(dialog)
    dialog.node.setText("gpu-node-7")
    dialog.start.setText("yesterday-ish")
    dialog.accept()
    assert dialog.query is None and "cannot read the time" in dialog.error.text()
    dialog.start.setText("2h")
    dialog.accept()
    query = dialog.query
    assert (query.url, query.node) == ("http://prom:9090", "gpu-node-7")
    assert query.end - query.start == pytest.approx(7200, abs=1)
    assert dialog.result() == PrometheusDialog.DialogCode.Accepted


@needs_prometheus
def test_a_run_journals_guard_alarm_reaches_prometheus_and_alerts(prometheus):
    url, _ = prometheus

    (alert,) = _wait_firing(url, "TrainingGuardAlarm")
    assert (alert["labels"]["run"], alert["labels"]["Hostname"]) == ("run-e2e", NODE)
    (count,) = _query(url, 'ckpt_inspector_guard_alarms_total{rule="nan_loss"}')
    assert count["metric"]["action"] == "snapshot" and float(count["value"][1]) == 1.0
