"""The Run pane: a training run folder opens as a table of its ledgered checkpoints, checked
off the UI thread; a row opens its checkpoint in the usual panes."""

from __future__ import annotations

import torch
from gui_support import LOAD_TIMEOUT_MS

from inspector.gui.panes.run_model import CHECKING
from inspector.layout.torch_save import describe_archive
from inspector.ledger import save
from inspector.run import journal

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
    assert "chain intact (4 records)" in pane.chain.text()
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
