"""The app opens a torch.distributed.checkpoint folder as one document, as `inspect` reads it.

`gui.pipeline.expand_paths` keeps the folder whole (not its `.metadata` and `.distcp` files),
its scan job is `dcp_folder.scan_folder`, its hash job gives None (a folder has no one
SHA-256) and its load is the jailed `inspect` of the folder.
"""

from __future__ import annotations

from pathlib import Path

import factories
from gui_support import LOAD_TIMEOUT_MS

from inspector.gui.pipeline import expand_paths

pytest_plugins = ("gui_fixtures",)  # fixtures: window
SETTLED = ("loaded", "load_failed", "blocked", "error", "needs_decision")


def test_the_app_opens_a_dcp_folder_as_one_document(window, qtbot, tmp_path):
    folder = factories.dcp_save(factories.dcp_state(), tmp_path / "ckpt")
    before = factories.tree_digests(folder)
    assert [found.path for found in expand_paths([folder])] == [Path(folder)]
    (doc,) = window.open_paths([folder])
    qtbot.waitUntil(lambda: doc.state in SETTLED, timeout=LOAD_TIMEOUT_MS)
    assert doc.state == "loaded", doc.message
    assert doc.scan.format == "dcp" and doc.scan.verdict == "safe"
    assert {t["key"] for t in doc.tensors} == {
        "model.embed.weight", "model.head.weight", "model.norm.bias", "model.block.scale",
        "model.block.mask", "model.positions", "temperature"}
    qtbot.waitUntil(lambda: not window.runner.active(), timeout=LOAD_TIMEOUT_MS)
    assert doc.sha256 is None
    assert factories.tree_digests(folder) == before


def test_the_app_blocks_a_dcp_folder_whose_metadata_is_a_payload(window, qtbot, tmp_path,
                                                                 canary):
    folder = factories.adv_dcp_metadata_payload(tmp_path / "evil.bin", canary).parent
    (doc,) = window.open_paths([folder])
    qtbot.waitUntil(lambda: doc.state in SETTLED, timeout=LOAD_TIMEOUT_MS)
    assert doc.state == "blocked", doc.message
    assert doc.scan.verdict == "dangerous" and doc.result is None and not doc.tensors
    qtbot.waitUntil(lambda: not window.runner.active(), timeout=LOAD_TIMEOUT_MS)
    window.overview.set_document(doc)
    assert window.overview.fields["sha256"].text() == "—"  # not "computing…" forever
    assert not canary.exists()
