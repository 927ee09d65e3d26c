"""One word for each GPU alert's severity everywhere (issue 37): the CLI's alert lines, the GPU
pane's event log and banner, and the report's telemetry events say the word the shared
vocabulary gives (`core.badges.ALERT_LOOKS`), never a view's own. The report's telemetry
section shows the throttle and the recovery action the driver asks for, as the app does.

Every view reads the shipped sample log (`gpu.sample_log`) through its own path: the CLI's
`telemetry --replay`, the GPU pane's "Open the sample log" and a report built from a store."""

from __future__ import annotations

import re
from html import unescape

import pynvml
from fake_pynvml import FakeNvml, install

from inspector.cli import main
from inspector.core.badges import ALERT_LOOKS, alert_look, shout
from inspector.core.vocabulary import AlertSeverity
from inspector.gpu import sample_log
from inspector.gpu.alerts import ingest
from inspector.gpu.events import timeline
from inspector.gpu.telemetry import TelemetryStore
from inspector.report import build_report
from inspector.report.model import SessionEvidence
from inspector.report.render_html import render_html


def _store() -> TelemetryStore:
    store = TelemetryStore(capacity=1000)
    ingest(store, sample_log.samples())
    return store


def _expected() -> dict[str, str]:
    """Each alert's message and its severity's word in the shared vocabulary."""
    return {a.message: ALERT_LOOKS[a.severity].word for a in _store().alerts}


def cli_words(capsys) -> dict[str, str]:
    """`telemetry --replay`'s word of each alert (its `ALERT [WORD] message` lines)."""
    assert main(["telemetry", "--replay", str(sample_log.path())]) == 1
    lines = re.findall(r"ALERT \[([^\]]+)\] (.+)$", capsys.readouterr().out, re.M)
    return {message: word for word, message in lines}


def report_events(html: str) -> list[tuple[str, str]]:
    """The telemetry section's events table: (severity word, what happened) per row."""
    section = html.split('data-section="telemetry"', 1)[1].split("</section>", 1)[0]
    events = section.split("<h3>Events</h3>", 1)[1]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", events, re.S):
        cells = [unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
        if cells:
            rows.append((cells[2], cells[3]))
    return rows


def app_words(qtbot, monkeypatch) -> tuple[dict[str, str], str]:
    """The GPU pane's event log (message: word) once the sample log is open, and its banner."""
    from inspector.gui.panes.gpu_pane import GpuPane

    install(monkeypatch, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    pane = GpuPane()
    qtbot.addWidget(pane)
    try:
        qtbot.waitUntil(lambda: pane.stack.currentWidget() is pane.placeholder)
        pane.sample_button.click()
        qtbot.waitUntil(lambda: pane.log.topLevelItemCount() == len(_expected()),
                        timeout=30_000)
        items = [pane.log.topLevelItem(i) for i in range(pane.log.topLevelItemCount())]
        return {item.text(3): item.text(2) for item in items}, pane.banner_text.text()
    finally:
        pane.shutdown()


def test_every_view_says_each_alert_in_the_shared_word(qtbot, monkeypatch, capsys):
    expected = _expected()
    assert set(expected.values()) == {ALERT_LOOKS[AlertSeverity.CRITICAL].word,
                                      ALERT_LOOKS[AlertSeverity.WARNING].word}
    assert cli_words(capsys) == {m: shout(w) for m, w in expected.items()}
    app, banner = app_words(qtbot, monkeypatch)
    assert app == expected
    # the banner leads with the worst alert, the driver's reset request, in capitals
    critical = shout(ALERT_LOOKS[AlertSeverity.CRITICAL].word)
    assert banner.startswith(f"⚠ {critical} at ") and "the driver asks to reset the GPU" in banner
    report = report_events(render_html(build_report(SessionEvidence([], telemetry=_store()))))
    assert {m: w for w, m in report if m in expected} == expected


def test_the_report_shows_the_throttle_and_the_recovery_action():
    store = _store()
    report = build_report(SessionEvidence([], telemetry=store))
    events = report_events(render_html(report))
    throttles = [e for e in timeline(store) if e.kind == "throttle"]
    assert [e.gpu for e in throttles] == [0]  # GPU 0 throttles as it runs hot, once
    warning = ALERT_LOOKS[AlertSeverity.WARNING].word
    assert (warning, "GPU 0: clocks slowed (software thermal slowdown, hardware thermal "
            "slowdown)") in events
    assert [w for w, _m in events] == [alert_look(e.severity).word for e in timeline(store)]
    # the driver's reset request: in GPU 1's row, and among the report's problems
    assert [g.recovery_action for g in report.telemetry.gpus] == ["none", "reset the GPU"]
    assert any(p.endswith("GPU 1 (NVIDIA H100 80GB HBM3): the driver asks to reset the GPU")
               for p in report.problems)
    section = render_html(report).split('data-section="telemetry"', 1)[1]
    assert "<th>Driver asks</th>" in section
    colour = ALERT_LOOKS[AlertSeverity.CRITICAL].colour
    assert f'<b style="color: {colour}">reset the GPU</b>' in section


def test_an_unknown_severity_reads_as_a_warning_not_as_nothing():
    assert alert_look("page-me") == ALERT_LOOKS[AlertSeverity.WARNING]
    assert [alert_look(s).word for s in AlertSeverity] == ["Info", "Warning", "Critical"]
