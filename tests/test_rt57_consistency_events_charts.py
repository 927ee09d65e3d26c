"""The report's charts draw any value their data can hold (a flat series at 1e38, where adding 1
changes nothing; inf and nan as the worker writes them; the whole float range; an integer no
float holds; nothing at all) and end their painter however the drawing ends: a painter left
open on a destroyed image crashed the process (exit 139, no report). The consistency chart's
title says the runs are the jailed worker's word unless a checked probe's rows make them 0.

Each chart is drawn in a child process, so a crash is an exit code, not this test run's end.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from inspector.report import charts, render_html
from inspector.report.sections import consistency_info

BIG = 1.7976931348623157e308
VALUES = [0.0, 1e38, -1e38, BIG, -BIG, 5e-324, 1e-323, 1e16, 2.0 ** 53, -5.0, 3.3]

DRAW = """
import math, sys
from inspector.report import charts
BIG = 1.7976931348623157e308
series = [[1e38] * 3, [1e38, 1e38 + 1e22], ["inf"] * 3, ["nan", "nan"], [], [0.0] * 3,
          [BIG, -BIG], [float("inf"), 1.0, float("nan"), 2.0], [10 ** 400, 1.0], [5e-324, 0.0],
          [-BIG] * 2]
for values in series:
    points = [(i, float(v) if isinstance(v, str) else v) for i, v in enumerate(values, 1)]
    png = charts.line_chart("Max abs difference per iteration", [("max |d|", points)],
                            "iteration", "max |d|")
    assert png.startswith(b"\\x89PNG"), values
for rows in ([("a", float("inf")), ("b", float("nan")), ("c", BIG), ("d", -3)],
             [("e", 10 ** 400), ("f", 1)], []):
    assert charts.bar_chart("Bytes by dtype", rows, "B").startswith(b"\\x89PNG"), rows
print("drawn")
"""


def _child(source: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).parent.parent,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})


def test_every_value_a_series_can_hold_is_drawn() -> None:
    done = _child(DRAW)
    assert done.returncode == 0 and done.stdout.strip() == "drawn", done.stderr[-2000:]


def test_an_error_while_painting_ends_the_painter() -> None:
    done = _child("""
from inspector.report import charts
def broken(*args):
    raise RuntimeError("mid-paint")
charts._fmt = broken  # the tick labels, drawn once the painter is open
for _ in range(3):
    try:
        charts.line_chart("t", [("s", [(1, 1.0), (2, 2.0)])], "x", "y")
    except RuntimeError:
        pass
import gc; gc.collect()
print("survived")
""")
    assert done.returncode == 0 and "survived" in done.stdout, (done.returncode,
                                                                done.stderr[-2000:])
    assert "being painted" not in done.stderr


@pytest.mark.parametrize("lo", VALUES)
@pytest.mark.parametrize("hi", VALUES)
def test_ticks_are_finite_distinct_and_never_raise(lo, hi) -> None:
    ticks = charts._ticks(min(lo, hi), max(lo, hi))
    assert len(ticks) >= 2 and all(math.isfinite(t) for t in ticks)
    assert len(set(ticks)) == len(ticks) and ticks == sorted(ticks)


def _title(result: dict, monkeypatch) -> str:
    titles: list[str] = []
    monkeypatch.setattr(charts, "line_chart", lambda title, *a, **k: titles.append(title)
                        or b"png")
    section = SimpleNamespace(consistency=consistency_info(result))
    render_html._consistency(section, "f1", lambda name, png: name)
    return titles[0]


def _result(checked: bool, diffs: list) -> dict:
    return {"mode": "probe", "consistent": not any(diffs), "device": "cpu",
            "device_label": "CPU", "repeats": 3,
            "iterations": [{"max_abs_diff": d} for d in diffs],
            "claims": {"checked": checked} if checked else {"reason": "unread"}}


def test_the_runs_chart_says_whose_word_its_points_are(monkeypatch) -> None:
    assert _title(_result(True, [0.0] * 3), monkeypatch) == "Max abs difference per iteration"
    for checked, diffs in ((True, [0.0, 0.5, 0.5]), (False, [0.0] * 3)):
        assert _title(_result(checked, diffs), monkeypatch).endswith(
            "(as reported by the jailed worker)")
