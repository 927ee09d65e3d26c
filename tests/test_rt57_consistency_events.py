"""A consistency run's live events are the jailed worker's word like its reply
(`sandbox.host.claims.consistency_events`): the device and the fault are checked as they come
and handed on only when they pass, each run at the end against the checked reply (none differ
when its rows say every run agreed), and the reply's `iterations` (what `report --consistency`
charts) are the events that agreed, never the events as they came nor the reply's own.

Lies run as hostile code inside a real `consistency` job (the jail's self-test hook); each
test first shows the lie in the worker's raw events (`run_job`, unchecked), beside an honest
twin run that passes.
"""

from __future__ import annotations

import json

import pytest
import torch

from inspector.cli import main
from inspector.sandbox.host.claims.consistency_events import LiveEvents
from inspector.sandbox.host.consistency_job import ConsistencyRequest, run_consistency
from inspector.sandbox.host.jobs import REFUTED, SandboxError, run_job

H100 = "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90)"
REFUTED_EXIT = 6

LYING_EVENTS = """
    import inspector.sandbox.worker.consistency.op as op
    import inspector.sandbox.worker.consistency.weights_probe as wp
    real = op.json_safe
    def safe(obj):
        out = real(obj)
        if isinstance(out, dict) and out.get("type") == "device" and {device}:
            out.update(device="cuda:0", label={label!r})
        elif isinstance(out, dict) and out.get("type") == "iteration" and {runs}:
            out.update(mismatched=256, max_abs_diff={diff!r})
        return out
    op.json_safe = safe
    real_probe = wp.weights_probe
    def probe(state_dict, device, repeats=10, seed=0, inject=None, emit=None, *a, **k):
        if {inject} and emit is not None:
            emit({{"type": "injected", "key": "w", "index": 5, "bit": 30, "iteration": 2}})
        return real_probe(state_dict, device, repeats, seed, inject, emit, *a, **k)
    op.weights_probe = probe
"""
"""A worker whose reply is honest (a CPU run, every run identical) and whose live events lie:
the device event names an H100, a fault nobody asked for is announced, or every run differs."""

OWN_ITERATIONS = """
    import inspector.sandbox.worker.consistency.op as op
    real = op.json_safe
    def safe(obj):
        out = real(obj)
        if isinstance(out, dict) and "device_label" in out:
            out["iterations"] = [{"type": "iteration", "phase": "probe", "iteration": i,
                                  "mismatched": 256, "max_abs_diff": 1e38, "seconds": 0.1}
                                 for i in (1, 2, 3)]
        return out
    op.json_safe = safe
"""
"""A worker whose reply carries its own per-run series, every run differing by 1e38."""


def _lie(device=False, inject=False, runs=False, diff=1e38) -> str:
    return LYING_EVENTS.format(device=device, label=H100, inject=inject, runs=runs, diff=diff)


@pytest.fixture
def ckpt(tmp_path):
    g = torch.Generator().manual_seed(0)
    path = tmp_path / "c.pt"
    torch.save({"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}, path)
    return path


def _raw_events(path) -> list[dict]:
    """The worker's events as they come, unchecked."""
    seen: list[dict] = []
    request = ConsistencyRequest(str(path), device="cpu", repeats=3).to_request()
    run_job(request, on_event=seen.append, timeout=300)
    return seen


def _checked(path, **options) -> tuple[dict | SandboxError, list[dict]]:
    shown: list[dict] = []
    spec = ConsistencyRequest(str(path), device="cpu", repeats=3, **options)
    try:
        return run_consistency(spec, on_event=shown.append, timeout=300), shown
    except SandboxError as exc:
        return exc, shown


@pytest.mark.parametrize(("lie", "seen_raw"), [
    (_lie(device=True), lambda e: e.get("label") == H100),
    (_lie(inject=True), lambda e: e.get("type") == "injected"),
    (_lie(runs=True), lambda e: e.get("mismatched") == 256),
])
def test_a_lying_event_is_never_shown_and_refutes_the_answer(ckpt, hostile, lie, seen_raw):
    hostile(lie)
    assert any(seen_raw(e) for e in _raw_events(ckpt))  # the lie, as the worker sends it
    outcome, shown = _checked(ckpt)
    assert isinstance(outcome, SandboxError) and outcome.code == REFUTED, outcome
    assert "live events do not agree" in outcome.message
    assert not any(seen_raw(e) for e in shown), shown


def test_an_honest_run_hands_on_its_checked_events_and_its_runs(ckpt) -> None:
    result, shown = _checked(ckpt)
    assert isinstance(result, dict), result
    assert shown[0] == {"type": "device", "device": "cpu", "label": "CPU", "checked": True}
    runs = [e for e in shown if e["type"] == "iteration"]
    assert [e["checked"] for e in runs] == [False] * 3  # the worker's word until the end
    assert result["iterations"] == [{k: v for k, v in e.items() if k != "checked"}
                                    for e in runs]
    assert [(r["iteration"], r["mismatched"], r["max_abs_diff"])
            for r in result["iterations"]] == [(1, 0, 0.0), (2, 0, 0.0), (3, 0, 0.0)]


def test_an_honest_self_test_shows_the_fault_it_asked_for(ckpt) -> None:
    result, shown = _checked(ckpt, inject={"key": "w", "index": 5, "bit": 30, "iteration": 2})
    assert isinstance(result, dict), result
    assert {"type": "injected", "key": "w", "index": 5, "bit": 30, "iteration": 2,
            "checked": True} in shown
    assert [r["mismatched"] > 0 for r in result["iterations"]] == [False, True, True]


def test_the_replys_own_iterations_are_never_its_runs(ckpt, hostile) -> None:
    hostile(OWN_ITERATIONS)
    request = ConsistencyRequest(str(ckpt), device="cpu", repeats=3).to_request()
    assert run_job(request, timeout=300)["iterations"][0]["max_abs_diff"] == 1e38  # the lie
    result, _ = _checked(ckpt)
    assert isinstance(result, dict), result
    assert [r["max_abs_diff"] for r in result["iterations"]] == [0.0, 0.0, 0.0]


def test_the_cli_prints_no_lying_event_beside_an_accepted_verdict(ckpt, hostile, capsys):
    hostile(_lie(device=True, inject=True, runs=True))
    assert main(["consistency", str(ckpt), "--device", "cpu", "--repeats", "3"]) == REFUTED_EXIT
    out, err = capsys.readouterr()
    assert "H100" not in out and "injected" not in out and "256 mismatched" not in out
    assert "CONSISTENT" not in out and "live events do not agree" in err


def test_the_cli_prints_an_honest_run_after_its_check(ckpt, capsys) -> None:
    assert main(["consistency", str(ckpt), "--device", "cpu", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device: CPU\n")
    assert "every run identical to the first (as the rows checked here say)" in out
    assert "probe run 3: 0 mismatched, max |diff| 0," in out


def _report(path, out) -> dict:
    main(["report", str(path), "--consistency", "--device", "cpu", "--repeats", "3",
          "-o", str(out), "--force", "--quiet"])
    (file_report,) = json.loads(out.read_text())["files"]
    return file_report["consistency"]


def test_the_report_charts_no_run_the_checked_answer_contradicts(ckpt, hostile, tmp_path,
                                                                   fast_env) -> None:
    hostile(_lie(runs=True, diff=0.5))
    section = _report(ckpt, tmp_path / "lie.json")
    assert section["status"] == "fail" and section["series"] == []
    assert "live events do not agree" in section["error"]


def test_the_report_charts_an_honest_run_from_its_checked_runs(ckpt, tmp_path,
                                                                fast_env) -> None:
    section = _report(ckpt, tmp_path / "honest.json")
    assert section["status"] == "pass" and section["series"] == [0.0, 0.0, 0.0]
    html = tmp_path / "honest.html"
    main(["report", str(ckpt), "--consistency", "--device", "cpu", "--repeats", "3",
          "-o", str(html), "--force", "--quiet"])
    assert "Consistency per iteration" in html.read_text()


# --- the gate's checks, one event at a time (no worker) ---------------------------------

REQUEST = {"op": "consistency", "device": "cpu", "repeats": 3, "seed": 0, "inject": None}
DEVICE = {"type": "device", "device": "cpu", "label": "CPU"}


def _run(n: int, mismatched: int = 0, diff: float | str = 0.0, phase: str = "probe") -> dict:
    return {"type": "iteration", "phase": phase, "iteration": n, "mismatched": mismatched,
            "max_abs_diff": diff, "seconds": 0.001}


def _answer(**rows) -> dict:
    row = {"key": "w", "repeats": 3, "repeat_mismatches": 0, "max_abs_diff": 0.0, **rows}
    return {"mode": "probe", "device": "cpu", "device_label": "CPU", "probed_tensors": 1,
            "tensors": [row]}


def _gate(events: list[dict], request: dict = REQUEST) -> tuple[LiveEvents, list[dict]]:
    shown: list[dict] = []
    gate = LiveEvents(request, shown.append)
    for event in events:
        gate(event)
    return gate, shown


HONEST = [DEVICE, _run(1), _run(2), _run(3)]


def test_the_gate_passes_an_honest_run() -> None:
    gate, shown = _gate(HONEST)
    assert [r.iteration for r in gate.finish(_answer())] == [1, 2, 3]
    assert len(shown) == 4


@pytest.mark.parametrize(("events", "answer", "why"), [
    ([DEVICE, DEVICE, _run(1), _run(2), _run(3)], _answer(), "a second device event"),
    ([{**DEVICE, "label": "CPU "}, *HONEST[1:]], _answer(), "labelled"),
    (HONEST[1:], _answer(), "device event named None"),
    ([DEVICE, _run(1), _run(3), _run(2)], _answer(), "run 2 is reported as probe run 3"),
    ([DEVICE, _run(1), _run(2)], _answer(), "2 runs were reported"),
    ([*HONEST, _run(4), _run(5), _run(6)], _answer(), "6 runs were reported"),
    ([DEVICE, _run(1, 3, 0.5), _run(2), _run(3)], _answer(), "a first run"),
    ([DEVICE, _run(1), _run(2, 0, 1e38), _run(3)], _answer(), "identical one"),
    ([DEVICE, _run(1), _run(2, 4, 0.5), _run(3)], _answer(), "every run agreed"),
    ([DEVICE, _run(1), _run(2, 4, "inf"), _run(3, 1, "inf")],
     _answer(repeat_mismatches=2, max_abs_diff=0.5), "largest |diff|"),
    ([DEVICE, _run(1), _run(2, 4, 0.5), _run(3)],
     _answer(repeat_mismatches=2, max_abs_diff=0.5), "the rows 2 to 2"),
    ([DEVICE, _run(1), _run(2), _run(3, 4, 0.5)],
     _answer(repeat_mismatches=1, max_abs_diff=0.5, first_mismatch={"iteration": 2}),
     "first differing run is 3, the rows' 2"),
    ([DEVICE, _run(1), _run(2, 4, -0.5), _run(3)], _answer(), "not shaped as a run"),
    ([DEVICE, _run(1), _run(2, True), _run(3)], _answer(), "not shaped as a run"),
    ([DEVICE, _run(1), _run(2, 0, 10**400), _run(3)], _answer(), "not shaped as a run"),
    ([DEVICE, _run(1, phase="model"), _run(2), _run(3)], _answer(), "reported as model"),
])
def test_the_gate_refutes_an_event_that_disagrees(events, answer, why) -> None:
    gate, _shown = _gate(events)
    with pytest.raises(SandboxError) as caught:
        gate.finish(answer)
    assert caught.value.code == REFUTED and why in caught.value.message, caught.value.message


FAULT = {"key": "w", "index": 5, "bit": 30, "iteration": 2}
ASKED = {**REQUEST, "inject": FAULT}
MADE = _answer(repeat_mismatches=2, max_abs_diff=0.5)
FLIPPED = [_run(2, 4, 0.5), _run(3, 4, 0.25)]


@pytest.mark.parametrize(("events", "why"), [
    ([DEVICE, _run(1), {"type": "injected", **FAULT, "bit": 31}, *FLIPPED], "asked"),
    ([DEVICE, {"type": "injected", **FAULT}, _run(1), *FLIPPED], "announced after run 0"),
    ([DEVICE, _run(1), *FLIPPED], "never announced"),
])
def test_the_gate_shows_only_the_fault_asked_for_before_its_run(events, why) -> None:
    gate, shown = _gate(events, ASKED)
    assert not [e for e in shown if e["type"] == "injected"]
    with pytest.raises(SandboxError, match=why):
        gate.finish(MADE)


def test_the_gate_shows_the_fault_asked_for() -> None:
    gate, shown = _gate([DEVICE, _run(1), {"type": "injected", **FAULT}, *FLIPPED], ASKED)
    assert {"type": "injected", **FAULT, "checked": True} in shown
    assert [r.mismatched for r in gate.finish(MADE)] == [0, 4, 4]


MODEL = {**REQUEST, "model": "m:f", "reload": True}


def _model_answer(runs: int, reload: bool) -> dict:
    return {"mode": "model", "device": "cpu", "device_label": "CPU", "reload": {
        "consistent": reload}, "outputs": [{"key": "out", "runs_mismatched": runs,
                                            "max_abs_diff": 0.5 if runs else 0.0}]}


def test_the_gate_checks_a_model_runs_reload_against_the_answer() -> None:
    events = [DEVICE, _run(1, phase="model"), _run(2, phase="model"), _run(3, phase="model"),
              _run(4, 2, 0.5, phase="reload")]
    assert len(_gate(events, MODEL)[0].finish(_model_answer(0, False))) == 4
    with pytest.raises(SandboxError, match="the reload run is reported different live"):
        _gate(events, MODEL)[0].finish(_model_answer(0, True))
    with pytest.raises(SandboxError, match="0 reload runs"):
        _gate(events[:-1], MODEL)[0].finish(_model_answer(0, True))


def test_a_flood_of_bad_events_keeps_a_few_and_counts_them_all() -> None:
    gate, shown = _gate([DEVICE, *[{"type": "injected", **FAULT}] * 5000, *HONEST[1:]])
    assert len(gate.problems) <= 20 and gate.refused == 5000 and len(shown) == 4
    with pytest.raises(SandboxError, match=r"never asked for \(and 4997 more\)"):
        gate.finish(_answer())
