"""The app's Folder pane gives every entry of an opened folder the line `ckpt-inspector scan
FOLDER` prints for it: checkpoints with their word and format, files that are no checkpoint
with the reason they were skipped, and a folder link the walk did not enter with why. The
pane shows the scan's own line (`scan.advice.entry_line`); the test holds it to the CLI's
output on the same folder, run as a user runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gui_support import LOAD_TIMEOUT_MS
from PySide6.QtWidgets import QApplication

from inspector.core.badges import LOOKS, Badge, shout
from inspector.gui.verdict_style import state_icon

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small


def _folder(small, tmp_path: Path) -> Path:
    source, _ = small
    folder = tmp_path / "download"
    folder.mkdir()
    for name in ("benign.pt", "with_nan.pt", "suspicious.pt"):
        shutil.copy(source / name, folder / name)
    (folder / "README.md").write_text("# model card\n")
    (folder / "config.json").write_text('{"hidden_size": 8}')
    os.symlink(folder, folder / "again")  # a loop: the walk does not enter it, and says so
    return folder


def test_every_entry_of_an_opened_folder_has_the_line_scan_prints(
        window, qtbot, small, tmp_path, artifacts):
    folder = _folder(small, tmp_path)
    window.open_paths([folder])
    pane = window.folder_pane
    assert pane is not None
    qtbot.waitUntil(lambda: len(pane.rows()) == 6 and all(
        row[0] != "Scanning" for row in pane.rows()), timeout=LOAD_TIMEOUT_MS)
    rows = {row[1]: row for row in pane.rows()}
    assert sorted(rows) == ["README.md", "again", "benign.pt", "config.json",
                            "suspicious.pt", "with_nan.pt"]
    # the same folder through the command line: each entry's first line names it
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", str(folder)],
                         capture_output=True, text=True, timeout=600).stdout
    firsts = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert len(firsts) == len(rows)
    for name, (word, _, detail, _why) in rows.items():
        where = str(folder / name)
        line = next(ln for ln in firsts if f" {where}: " in ln or f" {where}  (" in ln)
        assert line.startswith(shout(word) if word != "Skipped" else "SKIPPED"), (line, word)
        assert detail in line, (line, detail)
    assert rows["README.md"][0] == "Skipped" and "not a checkpoint" in rows["README.md"][2]
    assert rows["again"][0] == "Skipped" and "loop" in rows["again"][2]
    assert rows["benign.pt"][0] == "Safe"
    assert rows["suspicious.pt"][3]  # its first flag, as the CLI's indented lines begin
    # the headline counts what was scanned and what was skipped; every row has its state's icon
    assert pane.summary.text().startswith(
        "6 entries in 1 folder: 3 scanned, 3 skipped (not checkpoints). "), pane.summary.text()
    top = pane.tree.topLevelItem(0)
    for i in range(top.childCount()):
        row = top.child(i)
        state = next(b for b in Badge if LOOKS[b].word == row.text(0))
        assert row.icon(0).pixmap(16, 16).toImage() == state_icon(state).pixmap(
            16, 16).toImage(), row.text(1)
    # skipped entries left the file list, as before; the pane keeps their lines
    assert sorted(d.name for d in window.docs) == ["benign.pt", "suspicious.pt",
                                                   "with_nan.pt"]
    window.tabs.setCurrentWidget(pane)
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    window.resize(1280, 720)
    QApplication.processEvents()
    qtbot.wait(80)
    assert window.grab().save(str(shots / "folder-entries-1280x720-light.png"))
