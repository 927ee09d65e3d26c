"""`run.metrics` reads what the guard wrote without torch: a line cut short by a crash is
a problem, never a value; a step recorded twice counts as the later one; alarms keep every
field a reader relies on, and unknown ones count as unknown."""

from __future__ import annotations

import math
import subprocess
import sys

from inspector.run import journal
from inspector.run.metrics import METRICS_KIND, metrics_path, read_run_metrics


def _write(run, lines: list[str]) -> None:
    path = metrics_path(run, 0)
    path.parent.mkdir(parents=True)
    path.write_text("".join(lines))
    journal.append(journal.journal_path(run), METRICS_KIND,
                   {"path": "guard/rank-00000.jsonl", "rank": 0, "time": 1.0})


def _read(run):
    return read_run_metrics(journal.read(journal.journal_path(run)), run)


def test_a_cut_short_line_is_a_problem_and_a_re_recorded_step_counts_once(tmp_path):
    _write(tmp_path, ['{"s":0,"loss":1.5,"gn":0.5,"a":null}\n',
                      '{"s":1,"loss":"inf","gn":"nan","a":"loss-nonfinite"}\n',
                      '{"s":0,"loss":1.25,"gn":0.25,"a":null}\n',
                      '{"s":2,"loss":1.'])
    [series] = _read(tmp_path).series
    assert series.steps == (0, 1)
    assert series.loss[0] == 1.25 and series.loss[1] == math.inf
    assert math.isnan(series.grad_norm[1])
    [problem] = series.problems
    assert problem.endswith(":4: not a record (cut short: the run ended mid-write)")
    assert _read(tmp_path).problems == (problem,)


def test_an_alarm_with_missing_fields_reads_as_unknown(tmp_path):
    journal.append(journal.journal_path(tmp_path), "guard.alarm", {"step": 3, "rule": "x"})
    [alarm] = _read(tmp_path).alarms
    assert (alarm.step, alarm.rule, alarm.action, alarm.attribution) == (3, "x", "unknown", None)
    assert alarm.params == () and alarm.device is None and alarm.extra == {}
    assert alarm.to_json()["device_text"].startswith("no GPU health recorded")


def test_the_reader_imports_no_torch():
    code = ("import sys, inspector.run.metrics; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
