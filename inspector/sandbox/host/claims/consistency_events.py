"""A consistency run's live events, checked before any view shows them.

The worker streams a `device` event, an `injected` event when a fault was asked for, and one
`iteration` event per run. They are the jailed worker's word like its reply, so `LiveEvents`
stands between the worker and the views: the device and the fault are checked as they arrive
(against the request and this host's GPUs, as the reply's are: `claims.consistency`) and a view
is given only those that pass; each run is checked for its place in the loop and handed on
marked `checked: False` (the worker's word until the end); at the end every event is checked
against the checked reply (the same device, the fault made, as many runs as asked, and as many
differing runs and as large a difference as its rows say). One event that fails refutes the
whole answer, and the runs that pass become the reply's `iterations`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inspector.core.termtext import escape
from inspector.sandbox.host.claims.consistency import asked_fault, device_problems
from inspector.sandbox.host.jobs import REFUTED, SandboxError

EventFn = Callable[[dict[str, Any]], None]
_LISTED = 3
_KEPT = 20


@dataclass(frozen=True)
class RunRecord:
    """One run of the loop as the worker reported it: its phase (`probe`, `model`, `reload`),
    its number from 1, the elements that differed from the first run, the largest |diff|."""

    phase: str
    iteration: int
    mismatched: int
    max_abs_diff: float
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The `iteration` event this record checked, non-finite numbers as the worker's
        strings (JSON has none)."""
        return {"type": "iteration", "phase": self.phase, "iteration": self.iteration,
                "mismatched": self.mismatched, "max_abs_diff": _json_number(self.max_abs_diff),
                "seconds": self.seconds}


def number(value: object) -> float | None:
    """A JSON number, or the worker's 'inf' / 'nan' string for one, as a float; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value in ("inf", "nan"):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class LiveEvents:
    """The gate between a `consistency` worker's events and `forward` (a view's callback)."""

    def __init__(self, request: dict[str, Any], forward: EventFn | None) -> None:
        self._request = request
        self._forward = forward
        self._repeats = int(request["repeats"])
        self._model = bool(request.get("model"))
        self.problems: list[str] = []
        self.refused = 0
        """How many problems the events had (only the first `_KEPT` are kept)."""
        self.device: tuple[object, object] | None = None
        self.injected_after: int | None = None
        """How many runs had been reported when the fault was announced."""
        self.runs: list[RunRecord] = []

    def __call__(self, event: dict[str, Any]) -> None:
        """Check one event; hand it on only when it passes (progress and other kinds are
        shown by no view, and are not handed on)."""
        handler = {"device": self._device, "injected": self._injected,
                   "iteration": self._iteration}.get(event.get("type"))
        shown = handler(event) if handler is not None else None
        if shown is not None and self._forward is not None:
            self._forward(shown)

    def _refuse(self, *problems: str) -> None:
        # kept to a few: a worker sending events without end must not grow this without end
        self.problems += problems[:_KEPT - len(self.problems)]
        self.refused += len(problems)

    def _device(self, event: dict[str, Any]) -> dict[str, Any] | None:
        device, label = event.get("device"), event.get("label")
        if self.device is not None:
            self._refuse("a second device event")
            return None
        wrong = device_problems(self._request, device, label)
        if wrong:
            self._refuse(*(f"the live device event: {p}" for p in wrong))
            return None
        self.device = (device, label)
        return {"type": "device", "device": device, "label": label, "checked": True}

    def _injected(self, event: dict[str, Any]) -> dict[str, Any] | None:
        asked = asked_fault(self._request)
        told = {k: event.get(k) for k in ("key", "index", "bit", "iteration")}
        if asked is None:
            self._refuse(f"a fault was announced ({escape(str(told))}) that was never asked for")
        elif told != asked:
            self._refuse(f"the fault announced is {escape(str(told))}, asked {asked}")
        elif self.injected_after is not None:
            self._refuse("the fault was announced twice")
        elif len(self.runs) % self._repeats != asked["iteration"] - 1:
            self._refuse(f"the fault asked before run {asked['iteration']} was announced after "
                         f"run {len(self.runs) % self._repeats}")
        else:
            self.injected_after = len(self.runs)
            return {"type": "injected", **asked, "checked": True}
        return None

    def _iteration(self, event: dict[str, Any]) -> dict[str, Any] | None:
        record = self._record(event)
        if record is None:
            return None
        wrong = self._place_problems(record)
        if wrong:
            self._refuse(*wrong)
            return None
        self.runs.append(record)
        return {**record.to_json(), "checked": False}

    def _record(self, event: dict[str, Any]) -> RunRecord | None:
        """The event as a typed record, or None (and a problem) when a field is no number of
        its kind."""
        phase, iteration = event.get("phase"), _count(event.get("iteration"))
        mismatched, diff = _count(event.get("mismatched")), number(event.get("max_abs_diff"))
        seconds = number(event.get("seconds"))
        if (not isinstance(phase, str) or iteration is None or mismatched is None
                or diff is None or diff < 0 or seconds is None or not seconds >= 0):
            self._refuse(f"run {len(self.runs) + 1}'s event is not shaped as a run: "
                         f"{escape(str(event)[:200])}")
            return None
        return RunRecord(phase, iteration, mismatched, diff, seconds)

    def _place_problems(self, run: RunRecord) -> list[str]:
        """The run's number the next one, its phase the loop's at that number, a first run (of
        each group of weights) that differs from nothing, and no |diff| without a difference."""
        n = len(self.runs) + 1
        reload = self._model and self._request.get("reload", True) and n == self._repeats + 1
        phase = "reload" if reload else ("model" if self._model else "probe")
        wrong = []
        if run.iteration != n or run.phase != phase or (self._model and n > self._repeats
                                                        and not reload):
            wrong.append(f"run {n} is reported as {escape(run.phase)} run {run.iteration}")
        if ((not reload and (n - 1) % self._repeats == 0) or run.mismatched == 0) \
                and not (run.mismatched == 0 and run.max_abs_diff == 0):
            wrong.append(f"run {n} is a first run or an identical one, reported with "
                         f"{run.mismatched} elements differing by up to {run.max_abs_diff}")
        return wrong

    def finish(self, result: dict[str, Any]) -> list[RunRecord]:
        """The runs, once every event agrees with the checked `result`; SandboxError when one
        does not."""
        problems = list(self.problems)
        if self.device != (result.get("device"), result.get("device_label")):
            problems.append(f"the live device event named {escape(str(self.device))}, the answer "
                            f"{escape(str((result.get('device'), result.get('device_label'))))}")
        if asked_fault(self._request) is not None and self.injected_after is None:
            problems.append("the fault asked for was never announced")
        problems += self._count_problems(result)
        problems += _agreement_problems(self._loop_runs(), _rows(result), self._repeats)
        problems += self._reload_problems(result)
        if problems:
            total = len(problems) + self.refused - len(self.problems)  # those not kept too
            listed = "; ".join(problems[:_LISTED]) + (
                f" (and {total - _LISTED} more)" if total > _LISTED else "")
            sandbox = result.get("sandbox")
            raise SandboxError(REFUTED, "the jailed loader's live events do not agree with the "
                               "request and its checked answer, so none of its answer is "
                               f"trusted: {listed}",
                               sandbox=sandbox if isinstance(sandbox, dict) else None)
        return list(self.runs)

    def _loop_runs(self) -> list[RunRecord]:
        return [r for r in self.runs if r.phase != "reload"]

    def _count_problems(self, result: dict[str, Any]) -> list[str]:
        """As many runs as the loop makes: `repeats` for each group of probed weights (one
        group at least, at most one per weight matrix), or `repeats` and the reload run."""
        runs = len(self._loop_runs())
        if self._model:
            expected = self._repeats
            reloads = sum(r.phase == "reload" for r in self.runs)
            if reloads != (1 if self._request.get("reload", True) else 0):
                return [f"{reloads} reload runs were reported"]
            return [] if runs == expected else [f"{runs} runs were reported, {expected} made"]
        probed = result.get("probed_tensors")
        groups, rest = divmod(runs, self._repeats)
        if rest or not isinstance(probed, int) or not (min(probed, 1) <= groups <= probed):
            return [f"{runs} runs were reported for {escape(str(probed))} probed weight matrices "
                    f"of {self._repeats} runs each"]
        return []

    def _reload_problems(self, result: dict[str, Any]) -> list[str]:
        reloaded = [r for r in self.runs if r.phase == "reload"]
        record = result.get("reload")
        if not reloaded or not isinstance(record, dict):
            return []
        same = reloaded[0].mismatched == 0
        if record.get("consistent") is not same:
            return [f"the reload run is reported {'the same' if same else 'different'} live, "
                    f"{'the same' if record.get('consistent') else 'different'} in the answer"]
        return []


@dataclass(frozen=True)
class RowRuns:
    """What a row of the answer says of the runs: how many differed from the first, by how
    much at most, and the run where it first differed (None when none did)."""

    runs: int
    diff: float
    first: int | None


def _rows(result: dict[str, Any]) -> list[RowRuns]:
    """What each row the loop repeated says of the runs."""
    if result.get("mode") == "model":
        rows, field = result.get("outputs") or [], "runs_mismatched"
    else:
        rows, field = [r for r in result.get("tensors") or [] if "repeats" in r], \
            "repeat_mismatches"
    out = []
    for row in rows:
        runs, diff = _count(row.get(field)), number(row.get("max_abs_diff", 0.0))
        first = row.get("first_mismatch")
        out.append(RowRuns(runs or 0, 0.0 if diff is None else diff,
                           _count(first.get("iteration")) if isinstance(first, dict) else None))
    return out


def _agreement_problems(runs: list[RunRecord], rows: list[RowRuns], repeats: int) -> list[str]:
    """The runs that differed and the largest |diff| against the rows: none when no row's
    repeats differed (so a consistent answer's runs are all zero), else at least as many as
    the row that differed most often, at most as many as all rows together, the same
    largest |diff|, and (one loop over every row) the first run to differ the rows' first."""
    differing = sum(r.mismatched > 0 for r in runs)
    most, total = max((r.runs for r in rows), default=0), sum(r.runs for r in rows)
    if not most:
        return [] if not differing else [
            f"the rows say every run agreed, the live events say {differing} runs differed"]
    wrong = []
    if not most <= differing <= total:
        wrong.append(f"the live events say {differing} runs differed, the rows {most} to "
                     f"{total}")
    live = max((r.max_abs_diff for r in runs), default=0.0, key=_order)
    rowed = max((r.diff for r in rows), default=0.0, key=_order)
    if not _same(live, rowed):
        wrong.append(f"the live events' largest |diff| is {live}, the rows' {rowed}")
    firsts = [r.first for r in rows if r.first is not None]
    if len(runs) == repeats and firsts:
        told = next((r.iteration for r in runs if r.mismatched > 0), None)
        if told != min(firsts):
            wrong.append(f"the live events' first differing run is {told}, the rows' "
                         f"{min(firsts)}")
    return wrong


def _order(value: float) -> float:
    """NaN above every number, as the largest-|diff| comparison wants it."""
    return math.inf if math.isnan(value) else value
