"""Evidence for a dangerous file: the reconstructed calls with their arguments under the real
module names, links that open the Pickle pane at the opcode, and "Copy threat summary" for a
security ticket. Nothing from the malicious files ever runs (the canary fixture)."""

from __future__ import annotations

import struct
from pathlib import Path

import factories
from gui_support import wait_loaded
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication, QTextBrowser

from inspector.gui import app as appmod
from inspector.gui import roles
from inspector.gui.document import FileDocument
from inspector.gui.explain import MORE_NOT_SHOWN, SEVERITY_ADVICE, SUSPICIOUS_IN_DANGEROUS_ADVICE
from inspector.gui.panes.overview_pane import OverviewPane
from inspector.gui.widgets.evidence import SHOWN, opcode_href, opcode_target
from inspector.scan.engine import scan_file
from inspector.scan.indicators import import_label, indicators_text
from inspector.scan.result import Finding, ScanResult

pytest_plugins = ("gui_fixtures",)  # fixtures: window, worker_requests


def code_in_arguments(path: Path, canary: Path) -> Path:
    """A pickle calling an unknown class with Python source as its argument (a dangerous
    `code-in-arguments` finding); the source would only create `canary` if something ran it."""
    source = f"open({str(canary)!r}, 'w').close()".encode()
    path.write_bytes(b"\x80\x02ctrainer.hooks\nRunner\nX" + struct.pack("<I", len(source))
                     + source + b"\x85R.")
    return path


def open_blocked(window, qtbot, path: Path):
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc, ("blocked",))
    window.tabs.setCurrentWidget(window.overview)
    return doc


def anchors(browser: QTextBrowser) -> list[tuple[str, str, int]]:
    """(href, text, position) of every link in the browser's page."""
    found = []
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            fmt = fragment.charFormat()
            if fmt.isAnchor():
                found.append((fmt.anchorHref(), fragment.text(), fragment.position()))
            it += 1
        block = block.next()
    return found


def click_link(qtbot, browser: QTextBrowser, position: int) -> None:
    """A real mouse click on the page's character at `position`."""
    cursor = QTextCursor(browser.document())
    cursor.setPosition(position + 1)
    browser.setTextCursor(cursor)
    browser.ensureCursorVisible()
    qtbot.mouseClick(browser.viewport(), Qt.MouseButton.LeftButton,
                     pos=browser.cursorRect(cursor).center())


def selected_offset(window) -> int:
    current = window.pickle.op_view.currentIndex()
    assert current.isValid(), window.pickle.op_status.text()
    return window.pickle.op_model.rows[current.row()].offset


def test_overview_shows_each_call_with_its_argument_under_the_real_name(
        window, qtbot, tmp_path, canary, worker_requests):
    path = factories.mal_posix_system(tmp_path / "model.bin", canary)
    doc = open_blocked(window, qtbot, path)
    (g,) = [g for g in doc.scan.globals if g.severity == "dangerous"]
    assert (g.module, g.name) == ("posix", "system")
    page = window.overview.findings.toPlainText()
    assert "os.system (posix.system)" in page
    assert f"os.system(\"touch '{canary}'\")" in page  # the command it would run
    assert "os.system (posix.system)" in window.overview.banner.subtitle.text()
    assert window.overview.fields["weights_only"].text() == (
        "refuses it: needs os.system (posix.system)")
    # never handed to a loading worker (the scan's jailed dry-run readings load nothing)
    assert not [r for r in worker_requests if r.get("op") != "dry-run"]


def test_a_call_link_opens_the_pickle_pane_at_its_opcode(window, qtbot, tmp_path, canary):
    # the payload is the third of five pickles of a legacy stream: the pane must pick that one
    path = factories.mal_legacy_late_payload(tmp_path / "late.pt", canary)
    doc = open_blocked(window, qtbot, path)
    (g,) = [g for g in doc.scan.globals if g.severity == "dangerous"]
    (site,) = g.call_sites
    links = [a for a in anchors(window.overview.findings) if a[1] == g.calls[0]]
    assert links, anchors(window.overview.findings)
    assert opcode_target(QUrl(links[0][0])) == (None, site["offset"])
    # asked while the pane disassembles (its job ends on this thread, so it is still running)
    window.pickle.set_document(doc)
    assert window.pickle._job.running
    click_link(qtbot, window.overview.findings, links[0][2])
    assert window.tabs.currentWidget() is window.pickle
    assert window.pickle.op_status.text().startswith("Disassembling…")
    qtbot.waitUntil(lambda: window.pickle.op_view.currentIndex().isValid(), timeout=30_000)
    assert selected_offset(window) == site["offset"]
    row = window.pickle.op_model.rows[window.pickle.op_view.currentIndex().row()]
    assert row.opcode == "REDUCE"  # the call itself
    assert window.pickle.stream_box.currentIndex() == 2
    # ... and the import it calls: both selected, both tinted as dangerous
    model = window.pickle.op_model
    picked = sorted(i.row() for i in window.pickle.op_view.selectionModel().selectedRows())
    assert [model.rows[i].opcode for i in picked] == ["GLOBAL", "REDUCE"]
    (import_row, call_row) = (model.rows[i] for i in picked)
    assert call_row.calls == import_row.offset and import_row.imports == "os.system"
    tints = [model.data(model.index(i, 0), roles.BACKGROUND) for i in picked]
    assert tints[0] is not None and tints[0] == tints[1]
    assert model.data(model.index(picked[1] + 1, 0), roles.BACKGROUND) is None
    assert model.data(model.index(picked[1], 0), roles.TOOLTIP) == (
        f"dangerous: calls os.system (imported at {import_row.offset})")
    assert window.pickle.op_status.text() == (
        f"Opcode at offset {site['offset']}. REDUCE calls os.system, imported by the GLOBAL"
        f" at offset {import_row.offset}: both selected.")
    # moving on to another row: the status describes that row, not the jump
    window.pickle.op_view.setCurrentIndex(model.index(picked[0], 0))
    assert window.pickle.op_status.text() == (
        f"GLOBAL at offset {import_row.offset} — dangerous: imports os.system.")
    window.pickle.op_view.setCurrentIndex(model.index(picked[1] + 1, 0))
    assert window.pickle.op_status.text() == (
        f"{model.rows[picked[1] + 1].opcode} at offset {model.rows[picked[1] + 1].offset}.")


def test_a_finding_link_in_a_zip_member_selects_its_opcode(window, qtbot, tmp_path, canary):
    zipped = factories.mal_zip_data_pkl(tmp_path / "zipped.pt", canary)
    code = code_in_arguments(tmp_path / "hooks.pkl", canary)
    doc = open_blocked(window, qtbot, code)
    (finding,) = [f for f in doc.scan.findings if f.code == "code-in-arguments"]
    assert "open(" in finding.call and finding.offset is not None
    page = window.overview.findings.toPlainText()
    assert finding.call in page
    assert SUSPICIOUS_IN_DANGEROUS_ADVICE in page  # never "allow it" in a dangerous file
    assert SEVERITY_ADVICE["suspicious"] not in page
    # the finding's location and its call both link to the opcode
    targets = [opcode_target(QUrl(href)) for href, _, _ in anchors(window.overview.findings)]
    assert targets.count((None, finding.offset)) >= 2
    position = next(p for href, _, p in anchors(window.overview.findings)
                    if href == opcode_href(None, finding.offset))
    click_link(qtbot, window.overview.findings, position)
    qtbot.waitUntil(lambda: window.pickle.op_view.currentIndex().isValid(), timeout=30_000)
    assert selected_offset(window) == finding.offset

    zdoc = open_blocked(window, qtbot, zipped)
    (g,) = [g for g in zdoc.scan.globals if g.severity == "dangerous"]
    (site,) = g.call_sites
    assert site["member"].endswith("data.pkl")
    (link,) = [a for a in anchors(window.overview.findings) if a[1] == g.calls[0]]
    click_link(qtbot, window.overview.findings, link[2])
    qtbot.waitUntil(lambda: window.pickle.op_view.currentIndex().isValid()
                    and window.pickle.doc is zdoc, timeout=30_000)
    assert selected_offset(window) == site["offset"]
    assert window.pickle.op_model.rows[window.pickle.op_view.currentIndex().row()].opcode \
        == "REDUCE"


def test_copy_indicators_puts_the_ticket_on_the_clipboard(window, qtbot, tmp_path, canary):
    path = factories.mal_posix_system(tmp_path / "model.bin", canary)
    doc = open_blocked(window, qtbot, path)
    button = window.overview.indicators_button
    assert button.isEnabled() and button.isVisible()
    QApplication.clipboard().clear()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    text = QApplication.clipboard().text()
    assert doc.sha256 and len(doc.sha256) == 64
    assert f"SHA-256: {doc.sha256}" in text
    assert "File: model.bin" in text and f"Size: {path.stat().st_size:,} bytes" in text
    assert "Verdict: dangerous" in text
    assert "dangerous: os.system (posix.system), imported 1x" in text
    (site,) = doc.scan.globals[0].call_sites
    assert f"os.system(\"touch '{canary}'\")    [offset {site['offset']}]" in text

    benign, _ = window.open_samples()
    wait_loaded(qtbot, benign)
    assert window.overview.doc is benign and not button.isEnabled()


def test_indicators_text_escapes_file_text_and_reads_older_scans():
    scan = ScanResult.from_json({
        "path": "evil.pt", "format": "pickle", "verdict": "dangerous",
        "globals": [{"module": "nt", "name": "system", "count": 2, "severity": "dangerous",
                     "reason": "runs programs", "calls": ["os.system('a\x1b[2Jb')"]},
                    {"module": "torch", "name": "Size", "count": 1, "severity": "safe",
                     "reason": ""}],
        "findings": [{"severity": "warning", "code": "zip-crc", "message": "x"}]})
    text = indicators_text(scan, name="evil\u202egnp.pt", size=None, sha256=None)
    assert "File: evil\\u202egnp.pt" in text  # a BiDi override shown, not obeyed
    assert "os.system('a\\x1b[2Jb')\n" in text  # no offset known: no location
    assert "dangerous: os.system (nt.system), imported 2x; runs programs" in text
    assert "torch.Size" not in text and "zip-crc" not in text  # only what is flagged
    assert "SHA-256: not computed yet" in text and "Size: unknown" in text
    assert "Findings (0):\n  none" in text
    assert import_label("os", "system") == "os.system"


def test_a_hostile_file_with_hundreds_of_findings_shows_the_worst_first(qtbot, tmp_path, canary):
    path = factories.mal_posix_system(tmp_path / "model.bin", canary)
    scan = scan_file(str(path))
    # messages no temporary path can hold (pytest-xdist's folders are named popen-gw0, ...)
    warnings = [Finding("warning", "zip-unreferenced-record", f"record {i} of many",
                        member=f"data/{i}") for i in range(SHOWN + 40)]
    worst = Finding("dangerous", "code-in-arguments", "the late one", offset=54,
                    call="os.system('last')")
    scan.findings = [*warnings, worst]
    doc = FileDocument(path)
    doc.scan = scan
    pane = OverviewPane()
    qtbot.addWidget(pane)
    pane.set_document(doc)
    page = pane.findings.toPlainText()
    assert f"Findings ({SHOWN + 41})" in page
    assert "os.system('last')" in page
    assert page.index("the late one") < page.index("record 0 of many")
    assert f"record {SHOWN - 2} of many" in page and f"record {SHOWN - 1} of many" not in page
    assert MORE_NOT_SHOWN.format(n=41) in page
    assert "os.system('last')" in indicators_text(scan, name="m", size=1, sha256=None)


def test_opcode_links_carry_any_member_name():
    for member in (None, "archive/data.pkl", "a b&c=d#e?f/é.pkl", ""):
        assert opcode_target(QUrl(opcode_href(member, 1234))) == (member, 1234)
    assert opcode_target(QUrl("https://example.com/12")) is None
    assert opcode_target(QUrl("opcode:?member=x")) is None
    assert opcode_target(QUrl("opcode:-3")) is None


def link_colours(browser: QTextBrowser) -> set[str]:
    """The colours the page paints its links in."""
    cursor = QTextCursor(browser.document())
    colours = set()
    for _, _, position in anchors(browser):
        cursor.setPosition(position + 1)
        colours.add(cursor.charFormat().foreground().color().name())
    return colours


def test_screenshots_of_the_evidence_light_and_dark(window, qtbot, tmp_path, canary, artifacts):
    shots = artifacts / "gui"
    window.resize(1280, 720)
    open_blocked(window, qtbot, code_in_arguments(tmp_path / "hooks.pkl", canary))
    open_blocked(window, qtbot, factories.mal_posix_system(tmp_path / "model.bin", canary))
    try:
        for theme in ("light", "dark"):
            # switched while the page is shown: its links take the new palette's colour
            appmod.set_theme(theme)
            QApplication.processEvents()
            link = QApplication.palette().link().color().name()
            assert link_colours(window.overview.findings) == {link}
            for doc in reversed(window.docs):
                window.file_list.setCurrentRow(window.docs.index(doc))
                QApplication.processEvents()
                qtbot.wait(150)
                assert link_colours(window.overview.findings) == {link}
                name = f"overview-evidence-{doc.path.stem}-{theme}-1280x720.png"
                assert window.grab().save(str(shots / name))
            (site,) = doc.scan.globals[0].call_sites  # the call of the file shown last
            window.show_opcode(site["member"], site["offset"])
            qtbot.waitUntil(lambda: window.pickle.op_view.currentIndex().isValid(),
                            timeout=30_000)
            qtbot.wait(150)
            assert window.grab().save(str(shots / f"pickle-evidence-{theme}-1280x720.png"))
            window.tabs.setCurrentWidget(window.overview)
    finally:
        appmod.set_theme("system")


def test_a_payload_no_zip_reader_hands_out_is_shown_apart_and_explained(window, qtbot, tmp_path,
                                                                      canary, artifacts):
    """An os.system in an archive zipfile and torch refuse, scanned with the loaders' jailed
    readings as the app runs them (`cli.main` installs them): the file is still dangerous,
    the import is no "offending import" of the file, and the Overview says why in words (the
    `unreached-pickle` finding and its explanation)."""
    from inspector.gui.explain import FINDING_TEXT
    from inspector.sandbox.host.client import dry_run_reader
    from inspector.scan import readings

    window.resize(1280, 720)
    with readings.installed(dry_run_reader):
        doc = open_blocked(window, qtbot, factories.mal_zip_broken_directory(
            tmp_path / "broken.pt", canary))
    assert doc.verdict == "dangerous"
    text = " ".join(window.overview.findings.toPlainText().split())
    meaning, action = FINDING_TEXT["unreached-pickle"]
    assert "Offending imports" not in text
    assert "unreached-pickle" in text and "os.system" in text
    assert " ".join(meaning.split()) in text and action in text
    qtbot.wait(150)
    assert window.grab().save(str(artifacts / "gui" / "overview-unreached-1280x720.png"))
