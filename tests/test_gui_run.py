"""The Run pane: a training run folder opens as a table of its ledgered checkpoints, checked
off the UI thread; a row opens its checkpoint in the usual panes."""

from __future__ import annotations

import json

import torch
from gui_support import LOAD_TIMEOUT_MS

from inspector.gui import app as appmod
from inspector.gui.panes.run_model import CHECKING
from inspector.layout.torch_save import describe_archive
from inspector.ledger import save
from inspector.run import journal
from inspector.run.checkpoints import resume_choice

pytest_plugins = ("gui_fixtures",)  # fixtures: window, make_window


def _run(folder):
    for step in (1000, 2000, 3000, 4000):
        save({"encoder.weight": torch.full((32, 32), step / 1000),
              "head.weight": torch.ones(4, 32) * step}, folder / "ckpt" / f"step-{step}.pt",
             step=step, epoch=step // 2000, run_dir=folder)
    path = folder / "ckpt" / "step-3000.pt"
    data = bytearray(path.read_bytes())
    data[{t.key: t for t in describe_archive(bytes(data))}["head.weight"].data_offset] ^= 8
    path.write_bytes(bytes(data))
    (folder / "ckpt" / "step-2000.pt").unlink()
    return folder


def _states(pane):
    return [(r.record.step, r.state.value if r.state else None) for r in pane.model.rows]


def test_a_run_folder_opens_as_its_checkpoints_checked_off_the_ui_thread(window, qtbot,
                                                                         tmp_path, artifacts):
    run = _run(tmp_path)
    assert window.open_paths([run]) == []  # a run is not a document itself
    pane = window.run_pane
    assert window.tabs.currentWidget() is pane
    # the rows are there before the hashes are done, then the check fills them in
    qtbot.waitUntil(lambda: pane.model.rowCount() == 4, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: CHECKING not in [c[5] for c in pane.model._cells],
                    timeout=LOAD_TIMEOUT_MS)
    assert _states(pane) == [(4000, "intact"), (3000, "changed"), (2000, "missing"),
                             (1000, "intact")]
    changed = pane.model.rows[1]
    assert "tensor: head.weight" in changed.detail
    assert pane.model.data(pane.model.index(1, 3)).endswith("kB")
    assert "chain intact (4 records, no seal key)" in pane.chain.text()
    assert "2 intact" in pane.chain.text() and "1 changed" in pane.chain.text()
    (artifacts / "screens").mkdir(parents=True, exist_ok=True)
    window.resize(1280, 720)
    qtbot.wait(50)
    assert window.grab().save(str(artifacts / "screens" / "run-1280x720-light.png"))

    pane.table.doubleClicked.emit(pane.model.index(0, 0))
    assert [d.path.name for d in window.docs] == ["step-4000.pt"]
    assert window.tabs.currentWidget() is window.overview


def test_a_broken_chain_is_named_and_the_rest_still_shown(window, qtbot, tmp_path):
    run = _run(tmp_path)
    path = journal.journal_path(run)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"epoch": 1', b'"epoch": 5')
    path.write_bytes(b"\n".join(lines))
    pane = window.open_run(path)  # the journal file itself opens the run too
    qtbot.waitUntil(lambda: pane.model.rowCount() == 4 and pane.model.rows[0].state is not None,
                    timeout=LOAD_TIMEOUT_MS)
    assert "chain broken: line 2 edited" in pane.chain.text()
    row = next(r for r in pane.model.rows if r.record.line == 2)
    assert row.chain == "edited" and "(edited)" in row.cells()[7]


def test_the_pane_leads_with_the_resume_verdict_and_names_every_skipped_checkpoint(
        window, qtbot, tmp_path, artifacts):
    run = _run(tmp_path)
    newest = run / "ckpt" / "step-4000.pt"
    data = bytearray(newest.read_bytes())
    data[{t.key: t for t in describe_archive(bytes(data))}["encoder.weight"].data_offset] ^= 1
    newest.write_bytes(bytes(data))
    pane = window.open_run(run)
    qtbot.waitUntil(lambda: pane.choice is not None, timeout=LOAD_TIMEOUT_MS)
    cli = resume_choice(run)  # what `run latest` reads
    assert pane.choice.record.step == cli.record.step == 1000
    assert [(r.step, why.split(":")[0]) for r, why in pane.choice.skipped] == \
        [(r.step, why.split(":")[0]) for r, why in cli.skipped] == \
        [(4000, "changed"), (3000, "changed"), (2000, "missing")]
    text = pane.verdict.text()
    assert text.startswith("<b>Resume from step 1,000</b>")
    assert "Skipped step 4,000" in text and "tensor: encoder.weight" in text
    assert "Skipped step 2,000 (ckpt/step-2000.pt): missing: ckpt/step-2000.pt" in text
    # the verdict sits above the table, where the eye lands first
    table_top = pane.table.mapTo(pane, pane.table.rect().topLeft()).y()
    assert pane.verdict.isVisible() and pane.verdict.y() < table_top
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 720), (1920, 1080)):
        window.resize(width, height)
        qtbot.wait(50)
        assert window.grab().save(str(shots / f"run-resume-{width}x{height}-light.png"))


def test_no_intact_checkpoint_is_a_verdict_too(window, qtbot, tmp_path):
    run = _run(tmp_path)
    for step in (1000, 3000, 4000):
        (run / "ckpt" / f"step-{step}.pt").unlink()
    pane = window.open_run(run)
    qtbot.waitUntil(lambda: pane.choice is not None, timeout=LOAD_TIMEOUT_MS)
    assert pane.choice.record is None and resume_choice(run).record is None
    assert pane.verdict.text().startswith("<b>No checkpoint to resume from</b>: none of the 4")
    assert pane.verdict_role == "bad"


def test_a_run_goes_in_open_recent_and_into_the_exported_report(window, qtbot, tmp_path):
    run = _run(tmp_path)
    assert not window.act_report.isEnabled()  # nothing open yet
    pane = window.open_run(run)
    assert str(run.resolve()) in appmod.recent_files()
    qtbot.waitUntil(lambda: pane.summary() is not None, timeout=LOAD_TIMEOUT_MS)
    assert window.act_report.isEnabled() and not window.docs  # a run alone can be reported
    out = tmp_path / "run-report.json"
    job = window.write_report(out, [])
    qtbot.waitUntil(lambda: out.exists(), timeout=LOAD_TIMEOUT_MS)
    assert job is not None
    report = json.loads(out.read_text())
    [ledger] = report["runs"]
    assert ledger["latest_valid"]["step"] == 4000
    assert (ledger["intact"], ledger["changed"], ledger["missing"]) == (2, 1, 1)
    assert report["status"] == "failed"  # a changed and a missing checkpoint are problems
