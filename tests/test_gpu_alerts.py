"""Uncorrected ECC errors always alert, and the worst alert leads: the rules, `telemetry
--replay`'s exit status, and the GPU pane's banner and charts on a recorded log where GPU 1's
uncorrected count goes from [N/A] to 1 before GPU 0 runs hot."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.cli import main
from inspector.gpu.alerts import AlertRules, worst_alert
from inspector.gpu.telemetry import Alert, GpuSample

pytest_plugins = ("gui_fixtures",)

HEADER = ("timestamp, index, name, temperature.gpu, power.draw [W], utilization.gpu [%], "
          "memory.used [MiB], ecc.errors.uncorrected.volatile.total\n")
ECC_AT, HOT_AT = 12, 30
"""Rows (5 s apart) where GPU 1's count turns from [N/A] to 1, and where GPU 0 passes 85 °C."""


def ecc_then_hot_log() -> str:
    """40 samples of two GPUs: GPU 1's uncorrected ECC count is [N/A], then 1 from row
    ECC_AT; GPU 0 goes above 85 °C at row HOT_AT, later. Power and memory are constant."""
    rows = []
    for i in range(40):
        stamp = f"2026/11/20 10:{i * 5 // 60:02d}:{i * 5 % 60:02d}.000"
        hot = 60 + i if i < HOT_AT else 86 + (i - HOT_AT) % 2
        ecc = "[N/A]" if i < ECC_AT else "1"
        rows.append(f"{stamp}, 0, NVIDIA H100, {hot}, 300.00 W, 90 %, 40000 MiB, 0\n")
        rows.append(f"{stamp}, 1, NVIDIA H100, 55, 300.00 W, 90 %, 40000 MiB, {ecc}\n")
    return HEADER + "".join(rows)


def test_uncorrected_ecc_alerts_after_na_and_on_the_first_sample():
    rules = AlertRules()
    na = GpuSample(0.0, 1, ecc_uncorrected_volatile=None)
    [alert] = rules.evaluate(na, GpuSample(1.0, 1, ecc_uncorrected_volatile=1))
    assert (alert.kind, alert.severity, alert.gpu) == ("ecc_uncorrected", "critical", 1)
    assert alert.message == "GPU 1: 1 uncorrected ECC error (volatile)"
    # the same count again, with an [N/A] between: nothing new
    assert rules.evaluate(GpuSample(2.0, 1), GpuSample(3.0, 1, ecc_uncorrected_volatile=1)) == []
    # a first sample that already shows errors, on a GPU seen for the first time
    [first] = rules.evaluate(None, GpuSample(4.0, 2, ecc_uncorrected_aggregate=3))
    assert first.message == "GPU 2: 3 uncorrected ECC errors (aggregate)"
    # a count of zero is no alert, and neither is a count that never left [N/A]
    assert rules.evaluate(None, GpuSample(5.0, 3, ecc_uncorrected_volatile=0)) == []
    assert rules.evaluate(None, GpuSample(6.0, 4)) == []


def test_worst_alert_is_the_most_severe_then_the_latest():
    ecc = Alert(10.0, 1, "ecc_uncorrected", "critical", "GPU 1: ECC")
    hot = Alert(20.0, 0, "temperature", "warning", "GPU 0: 86 °C")
    lost = Alert(30.0, 2, "gpu_lost", "critical", "GPU 2: lost")
    assert worst_alert([]) is None
    assert worst_alert([ecc, hot]) is ecc
    assert worst_alert([hot, ecc]) is ecc
    assert worst_alert([ecc, hot, lost]) is lost


def test_replay_exits_1_when_uncorrected_ecc_goes_from_na_to_1(tmp_path, capsys):
    log = tmp_path / "smi.csv"
    log.write_text(ecc_then_hot_log())
    assert main(["telemetry", "--replay", str(log)]) == 1
    out = capsys.readouterr().out
    assert "ALERT [CRITICAL] GPU 1: 1 uncorrected ECC error (volatile)" in out
    assert "ALERT [WARNING] GPU 0: temperature 86 °C above 85 °C" in out


def test_replay_without_alerts_exits_0(tmp_path, capsys):
    log = tmp_path / "quiet.csv"
    log.write_text(HEADER + "2026/11/20 10:00:00.000, 0, X, 50, 100 W, 5 %, 10 MiB, [N/A]\n"
                   "2026/11/20 10:00:05.000, 0, X, 51, 100 W, 5 %, 10 MiB, 0\n")
    assert main(["telemetry", "--replay", str(log)]) == 0


def replay(qtbot, pane, log) -> None:
    """Replay `log` in `pane` and wait until it is drawn."""
    pane.open_log(str(log))
    qtbot.waitUntil(lambda: pane.store.count(1) == 40, timeout=30_000)
    qtbot.waitUntil(lambda: pane.banner.isVisibleTo(pane), timeout=30_000)


@pytest.fixture
def gpu_pane(qtbot):
    """A GPU pane with no live source, shown at a laptop size."""
    from inspector.gui.panes.gpu_pane import GpuPane

    pane = GpuPane(autostart=False)
    qtbot.addWidget(pane)
    pane.resize(1200, 640)
    pane.show()
    yield pane
    pane.shutdown()


def test_banner_shows_the_critical_ecc_alert_behind_a_later_warning(qtbot, tmp_path,
                                                                     gpu_pane):
    log = tmp_path / "smi.csv"
    log.write_text(ecc_then_hot_log())
    replay(qtbot, gpu_pane, log)
    kinds = [a.kind for a in gpu_pane.store.alerts]
    assert kinds == ["ecc_uncorrected", "temperature"]  # the warning is the latest
    text = gpu_pane.banner_text.text()
    assert "CRITICAL" in text and "GPU 1: 1 uncorrected ECC error (volatile)" in text
    assert "86 °C" not in text and "(2 alerts in the event log)" in text
    assert gpu_pane.banner_alert.kind == "ecc_uncorrected"
    gpu_pane.dismiss_banner()
    assert not gpu_pane.banner.isVisibleTo(gpu_pane)
    gpu_pane._show_alert(Alert(1e9, 0, "temperature", "warning", "GPU 0: hot again"))
    assert "hot again" in gpu_pane.banner_text.text()  # after a dismissal, the new one


def test_every_chart_has_a_labelled_time_axis(qtbot, tmp_path, gpu_pane):
    from inspector.gui.panes.gpu_layout import TIME_LABEL

    log = tmp_path / "smi.csv"
    log.write_text(ecc_then_hot_log())
    replay(qtbot, gpu_pane, log)
    gpu_pane.graphics.grab()  # every axis lays out its ticks when first painted
    for title, plot in gpu_pane.plots.items():
        axis = plot.getAxis("bottom")
        assert axis.isVisible(), title
        assert axis.labelText == TIME_LABEL, title
        (low, high), _ = plot.getViewBox().viewRange()
        ticks = [label for spacing, values in axis.tickValues(low, high, 600)
                 for label in axis.tickStrings(values, 1, spacing)]
        assert any(":" in label for label in ticks), (title, ticks)  # clock times


def test_a_constant_series_is_not_scaled_into_noise(qtbot, tmp_path, gpu_pane):
    from inspector.gui.panes.gpu_pane import MIN_SPANS
    from inspector.gui.widgets.step_curve import y_range

    log = tmp_path / "smi.csv"
    log.write_text(ecc_then_hot_log())
    replay(qtbot, gpu_pane, log)
    # power is 300 W throughout: the view spans at least MIN_SPANS["W"] around it
    _, (low, high) = gpu_pane.plots["Power"].getViewBox().viewRange()
    assert high - low >= MIN_SPANS["W"] and low < 300 < high
    # a float32 series with jitter in its last bit is still a flat line
    jitter = np.array([300.0, np.nextafter(np.float32(300), np.float32(301))], dtype=np.float32)
    assert y_range([jitter], 20.0) == pytest.approx((290.0, 310.0))
    # counts never go below zero; a real range is kept as it is
    assert y_range([np.zeros(5)], 4.0) == (0.0, 4.0)
    assert y_range([np.array([10.0, 90.0])], 10.0) == (10.0, 90.0)
    assert y_range([np.array([np.nan])], 10.0) is None


def test_zoomed_in_to_seconds_the_axis_still_reads_as_a_clock(qtbot):
    from datetime import datetime

    from inspector.gui.widgets.clock_axis import ClockAxis

    t = datetime(2026, 11, 20, 10, 2, 15, 500_000).timestamp()
    axis = ClockAxis()
    assert axis.tickStrings([t], 1, 0.5) == ["10:02:15.5"]
    assert axis.tickStrings([t], 1, 5) == ["10:02:15"]
    assert axis.tickStrings([1e30], 1, 5) == [""]  # far outside the calendar: no label


def test_a_few_seconds_of_live_samples_get_clock_ticks_that_fit(qtbot):
    from datetime import datetime

    from inspector.gui.widgets.clock_axis import CLOCK_LABEL_PX, ClockAxis

    start = datetime(2026, 11, 20, 10, 2, 15, 300_000).timestamp()
    axis = ClockAxis()
    [(step, values)] = axis.tickValues(start, start + 15, 930)
    assert step == 2 and 5 <= len(values) <= 930 // CLOCK_LABEL_PX
    labels = axis.tickStrings(values, 1, step)
    assert labels[0] == "10:02:16" and all(len(t) == 8 and t.count(":") == 2 for t in labels)
