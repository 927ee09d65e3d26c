"""A refused inspection shows none of the jailed loader's answer, in every view.

The worker streams each tensor's record before the host checks the answer against the file's
bytes (`operations.inspect_reply` hands the app a copy of each as a `tensor` event). Those
rows were the app's Tensors pane until the load ended, and stayed when the final answer had
the same keys: a refused answer (`claim_refuted`) kept the loader's repaired statistics as the
file's tensors, the Overview said no check was made, and `inspect`'s table and `--json` listed
them beside the error. Now an answer with an error leaves no rows (as the HTML report, which
says "No tensors were read"), the Overview says the check refused it, an accepted answer's
rows are the checked records (a value the check replaced is the host's, not the worker's
streamed one), and rows the loader streamed before a cancel are dropped. A worker's progress
line shows only a stage the app names, in its own words. A refused shard set counts no
tensors per shard.
"""

from __future__ import annotations

import json

import torch
from gui_support import LOAD_TIMEOUT_MS, wait_loaded
from hostile_worker import REASON, REPAIRED, flipped, weights

from inspector.cli import main
from inspector.cli.inspect_cmd import EXIT_HEALTH_PROBLEM
from inspector.gui.document import REFUSED_WORDS, FileDocument
from inspector.gui.panes.tensor_models import rows_summary
from inspector.gui.pipeline import UNNAMED_STAGE, stage_text

pytest_plugins = ("gui_fixtures",)  # fixtures: window

OUTLIER = 2.55e38
"""model.w[3, 5] after its exponent bit flipped (0.75 becomes about 2.55e38)."""
REFUSED = 5
"""`inspect`'s exit status for a refused answer."""
REFUSAL = ("the jailed loader's inspection does not match the file's own bytes, so none of its "
           "answer is trusted: model.w's digest differs")

ODD_ORDERS = """
    import inspector.tensors.describe as d
    real = d.describe_tensors
    def lying(items, emit, *a, **k):
        def odd(record):
            if record.get("key") == "model.w" and "exponents" in record:
                record["exponents"] = [[-7, 1]]  # no count the file's values give
            emit(record)
        return real(items, odd, *a, **k)
    d.describe_tensors = lying
"""
"""A loader whose binary orders of model.w are not the file's: the check counts them itself
and puts its own in the answer, which it accepts."""

VERDICT = "Every tensor checked here: SAFE"
POSING = f"""
    import inspector.sandbox.worker.inspect_op as op
    real = op._Sender.__init__
    def posing(self, emit, total):
        emit({{"type": "progress", "stage": {VERDICT!r}, "done": 1, "total": 1}})
        real(self, emit, total)
    op._Sender.__init__ = posing
"""
"""A loader whose progress line poses as a verdict."""


def _flipped_file(tmp_path):
    """A checkpoint whose model.w holds one flipped exponent bit, and plain values beside."""
    w = weights()
    w["w"][3, 5] = 0.75
    path = tmp_path / "flip.pt"
    torch.save({"model": {"w": flipped(w["w"]), "b": w["b"]}, "epoch": 3}, path)
    return path


def _open(window, qtbot, path, state: str) -> tuple[FileDocument, list[dict]]:
    """Open `path` in the window; its document once the load ended in `state`, and copies of
    the rows as the worker streamed them in (its word, before the check)."""
    streamed: list[dict] = []
    watched: list[FileDocument] = []

    def watch(job) -> None:
        doc = job.doc
        if doc is not None and doc not in watched:
            watched.append(doc)
            doc.tensors_appended.connect(lambda first, count: streamed.extend(
                dict(r) for r in doc.tensors[first:first + count]))

    window.pipeline.job_started.connect(watch)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc, (state,))
    return doc, streamed


def _maximum(rows: list[dict], key: str) -> float:
    return next(r["max"] for r in rows if r["key"] == key)


# --- the app ----------------------------------------------------------------------------------

def test_a_refused_answer_leaves_no_rows_in_the_tensors_pane_or_the_overview(
        window, qtbot, tmp_path, hostile, artifacts):
    path = _flipped_file(tmp_path)
    hostile(REPAIRED)
    doc, streamed = _open(window, qtbot, path, "load_failed")
    # the lie, under the real loader: it streamed model.w without its outlier
    assert 0 < _maximum(streamed, "model.w") < 10
    assert doc.result.error.code == "claim_refuted" and doc.result.error.message == REFUSAL
    pane = window.tensors
    assert doc.tensors == [] and doc.objects == []
    assert pane.model.rowCount() == 0 and pane.selected is None
    assert pane.summary_label.text() == f"No tensors shown: refused: {REFUSAL}"
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    window.tabs.setCurrentWidget(pane)
    window.grab().save(str(artifacts / "gui" / "rt57-refused-tensors.png"))

    overview = window.overview
    fields = overview.fields
    assert fields["checked"].text() == f"Refused: {REFUSAL}"
    assert "no check was made" not in fields["checked"].text()
    assert [fields[k].text() for k in ("contents", "training", "architecture")] == ["—"] * 3
    assert fields["state"].text() == f"{REFUSED_WORDS}: {REFUSAL}"
    assert overview.health_banner.subtitle.text() == f"Not judged: refused: {REFUSAL}."
    window.tabs.setCurrentWidget(overview)
    window.grab().save(str(artifacts / "gui" / "rt57-refused-overview.png"))


def test_the_honest_twin_shows_the_checked_outlier(window, qtbot, tmp_path):
    path = _flipped_file(tmp_path)
    doc, _streamed_rows = _open(window, qtbot, path, "loaded")
    assert _maximum(doc.tensors, "model.w") > OUTLIER * 0.99
    assert window.tensors.model.rowCount() == 2
    checked = window.overview.fields["checked"].text()
    assert checked.startswith("2 tensors' digests") and "Refused" not in checked
    assert window.overview.fields["contents"].text().startswith("2 tensors")


def test_an_accepted_answer_shows_the_values_the_check_put_in_it(window, qtbot, tmp_path,
                                                                   hostile):
    path = _flipped_file(tmp_path)
    hostile(ODD_ORDERS)
    doc, streamed = _open(window, qtbot, path, "loaded")
    told = next(r for r in streamed if r["key"] == "model.w")
    assert told["exponents"] == [[-7, 1]]  # the worker's word, streamed before the check
    final = next(r for r in doc.result.contract["tensors"] if r["key"] == "model.w")
    assert final["exponents"] != told["exponents"]  # the check counted them here
    assert doc.tensors == doc.result.contract["tensors"]
    shown = window.tensors.model.visible_rows()
    assert next(r for r in shown if r["key"] == "model.w")["exponents"] == final["exponents"]


def test_rows_nothing_here_could_check_say_whose_word_they_are(window, qtbot, tmp_path):
    path = tmp_path / "dt.pt"
    torch.save({"model": weights(), "dtype": torch.float16}, path)  # a dtype: not read here
    doc, _streamed_rows = _open(window, qtbot, path, "loaded")
    assert not doc.result.claims.checked and REASON in doc.result.claims.reason
    assert window.tensors.model.rowCount() == 2
    assert (f"no NaN/Inf  — as reported by the jailed loader, not checked here "
            f"({doc.result.claims.reason})") in window.tensors.summary_label.text()


def test_rows_streamed_before_a_cancel_are_dropped(qtbot, tmp_path):
    doc = FileDocument(tmp_path / "m.pt")
    doc.set_state("loading")
    doc.apply_events([{"type": "tensor", "key": "w", "dtype": "float32", "shape": [2],
                       "numel": 2, "nbytes": 8, "max": 1.0}])
    assert rows_summary(doc, "1 tensor").endswith(
        "(still loading…)  — the jailed loader's rows, not yet checked here")
    from inspector.gui.jobs import JobRunner
    from inspector.gui.pipeline import Pipeline

    pipeline = Pipeline(JobRunner())
    with qtbot.waitSignal(doc.tensors_reset, timeout=LOAD_TIMEOUT_MS):
        pipeline._unanswered(doc, "cancelled")
    assert doc.tensors == [] and doc.result is None
    assert rows_summary(doc, "No tensors yet.").startswith("No tensors shown: the load was "
                                                            "cancelled")


def test_a_progress_line_never_shows_the_workers_own_words(window, qtbot, tmp_path, hostile):
    path = _flipped_file(tmp_path)
    hostile(POSING)
    told: list[str] = []
    shown: list[str] = []
    window.pipeline.job_started.connect(lambda job: job.events.connect(
        lambda events: told.extend(str(e.get("stage")) for e in events
                                   if e.get("type") == "progress")))
    window.pipeline.progress.connect(lambda text, _done, _total: shown.append(text))
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    assert VERDICT in told  # the worker's line reached the app
    assert VERDICT not in shown and stage_text(VERDICT) == UNNAMED_STAGE
    assert stage_text("tensors") == "Computing tensor statistics"  # a stage the app names


# --- the CLI ----------------------------------------------------------------------------------

def test_inspect_prints_no_record_of_a_refused_answer(tmp_path, hostile, capsys):
    path = _flipped_file(tmp_path)
    # the honest twin: its table, its values, and the outlier judged (exit 7: corrupted)
    assert main(["inspect", str(path)]) == EXIT_HEALTH_PROBLEM
    honest = capsys.readouterr().out
    assert any(line.startswith("model.w ") and "2.552e+38" in line
               for line in honest.splitlines())
    assert "1 non-tensor value" in honest

    hostile(REPAIRED)
    assert main(["inspect", str(path)]) == REFUSED
    out = capsys.readouterr().out.splitlines()
    assert f"error:    {REFUSAL}" in out
    assert not [line for line in out if line.startswith(("model.", "key ", "1 non-tensor"))]
    assert "health:   Weights not judged (no answer of the jailed loader stands)" in out

    assert main(["inspect", str(path), "--json"]) == REFUSED
    contract = json.loads(capsys.readouterr().out)
    assert contract["error"]["code"] == "claim_refuted"
    assert contract["tensors"] == [] and contract["objects"] == []
    assert contract["unique_storage"] is None


def _sharded(tmp_path):
    """Two torch shards and their index; model.w (with the flipped bit) in the first."""
    w = weights()
    w["w"][3, 5] = 0.75
    folder = tmp_path / "sharded"
    folder.mkdir()
    names = ("pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin")
    torch.save({"model.w": flipped(w["w"])}, folder / names[0])
    torch.save({"model.b": w["b"]}, folder / names[1])
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"model.w": names[0], "model.b": names[1]}}))
    return folder, names


def test_a_refused_shard_set_counts_no_tensors(tmp_path, hostile, capsys):
    folder, names = _sharded(tmp_path)
    assert main(["inspect", str(folder), "--jobs", "1"]) == EXIT_HEALTH_PROBLEM  # honest
    honest = capsys.readouterr().out
    assert f"  {names[0]}  pytorch-zip  1 tensors  " in honest

    hostile(REPAIRED)
    assert main(["inspect", str(folder), "--jobs", "1"]) == REFUSED
    out = capsys.readouterr().out
    assert f"error:    {names[0]}: {REFUSAL}" in out.splitlines()
    assert f"  {names[0]}  pytorch-zip  - tensors  " in out
    assert main(["inspect", str(folder), "--jobs", "1", "--json"]) == REFUSED
    contract = json.loads(capsys.readouterr().out)
    assert [s["tensors"] for s in contract["shards"]] == [None, None]
    assert contract["tensors"] == []
