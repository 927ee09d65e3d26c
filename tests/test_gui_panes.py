"""Pickle, Integrity and Convert panes on real files (screenshots: tests/test_gui_screens.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import factories
from gui_support import LOAD_TIMEOUT_MS, drop_files, flip_exponent_bit, wait_loaded
from PySide6.QtGui import QColor

from inspector.core.vocabulary import DocumentState
from inspector.gui import roles
from inspector.gui.dialogs.about_dialog import AboutDialog
from inspector.gui.dialogs.convert_dialog import ConvertDialog
from inspector.gui.document import FileDocument
from inspector.gui.panes.integrity_pane import ManifestDropZone
from inspector.gui.verdict_style import status_style

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small, worker_requests


def open_loaded(window, qtbot, path: Path):
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc)
    return doc


def results(window) -> dict[str, str]:
    model = window.integrity.model
    return {row[0]: row[2] for row in model.rows}


def test_pickle_pane_marks_and_jumps_to_the_offending_global(window, qtbot, tmp_path, canary):
    path = factories.mal_stack_global_memo(tmp_path / "memo.pkl", canary)
    (doc,) = window.open_paths([path])
    wait_loaded(qtbot, doc, ("blocked",))
    pane = window.pickle
    qtbot.waitUntil(lambda: pane.op_model.rowCount() > 0, timeout=30_000)
    flagged = [r for r in pane.op_model.rows if r.severity == "dangerous"]
    assert flagged, "the offending opcode is not marked"
    assert pane.op_model.index(pane.op_model.rows.index(flagged[0]), 0).data(
        roles.BACKGROUND) is not None
    dangerous = next(g for g in doc.scan.globals if g.severity == "dangerous")
    dotted = f"{dangerous.module}.{dangerous.name}"
    pane.global_filter.setText(dangerous.name)
    assert pane.proxy.rowCount() >= 1
    pane.globals_view.selectRow(0)
    current = pane.op_view.currentIndex()
    assert current.isValid()
    row = pane.op_model.rows[current.row()]
    assert row.imports == dotted and row.opcode == "STACK_GLOBAL"
    assert current.row() == pane.op_model.first_use(dotted)
    pane.search.setText("STOP")
    hit = pane.find_next()
    assert hit >= 0 and pane.op_model.rows[hit].opcode == "STOP"


def _manifest_written(window, qtbot, small, tmp_path) -> tuple:
    """A copy of the benign checkpoint open on the Integrity pane, its JSON manifest written
    there: the document, the manifest's path and its record."""
    folder, _ = small
    path = tmp_path / "model.pt"
    shutil.copy(folder / "benign.pt", path)
    doc = open_loaded(window, qtbot, path)
    window.tabs.setCurrentWidget(window.integrity)
    manifest = tmp_path / "model.manifest.json"
    job = window.integrity.write_manifest(manifest)
    qtbot.waitUntil(lambda: manifest.exists() and not job.running, timeout=30_000)
    return doc, manifest, json.loads(manifest.read_text())


def test_manifest_with_one_bad_hash_marks_that_row(window, qtbot, small, tmp_path):
    doc, manifest, record = _manifest_written(window, qtbot, small, tmp_path)
    tensors = record["files"][0]["tensors"]
    assert {t["key"] for t in tensors} == {t["key"] for t in doc.tensors}
    victim = tensors[1]["key"]
    tensors[1]["digest"] = "0" * 64
    manifest.write_text(json.dumps(record))
    zone = window.integrity.findChild(ManifestDropZone)
    assert drop_files(zone, [manifest])
    qtbot.waitUntil(lambda: doc.verify is not None, timeout=LOAD_TIMEOUT_MS)
    status = results(window)
    assert status[victim] == "mismatch"
    assert status["model.pt"] == "ok"
    assert all(s == "ok" for k, s in status.items() if k not in (victim,))
    model = window.integrity.model
    assert model.rows[0][0] == victim  # problems first
    brush = model.index(0, 0).data(roles.BACKGROUND)
    assert brush.color().name() == QColor(status_style("mismatch").colour).name()
    assert "Does not match" in window.integrity.summary.toPlainText()
    assert len(window.docs) == 1, "the manifest must not open as a checkpoint"


def test_compare_reports_a_single_bit_flip_in_plain_words(window, qtbot, small, tmp_path,
                                                          artifacts):
    folder, _ = small
    original = folder / "benign.pt"
    flipped = tmp_path / "flipped.pt"
    start = flip_exponent_bit(original, flipped)  # element 0 of fc1.weight
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(original, work / "benign.pt")
    doc = open_loaded(window, qtbot, work / "benign.pt")
    window.integrity.write_manifest(work / "benign.sha256")
    qtbot.waitUntil(lambda: (work / "benign.sha256").exists(), timeout=LOAD_TIMEOUT_MS)
    window.integrity.verify_with(work / "benign.sha256")
    qtbot.waitUntil(lambda: doc.verify is not None, timeout=LOAD_TIMEOUT_MS)
    window.integrity.compare_with(flipped)
    qtbot.waitUntil(lambda: doc.diff is not None, timeout=LOAD_TIMEOUT_MS)
    assert [t.key for t in doc.diff.differing] == ["fc1.weight"]
    text = window.integrity.summary.toPlainText()
    assert "1 single-bit flip in fc1.weight" in text and "exponent" in text and "`" not in text
    assert "memory or storage corruption" in text
    assert f"Differs from {flipped}" in text and "{" not in text  # a path, not a dict
    assert "Matches" in text  # the earlier verification stays beside the comparison
    assert ("Checked here: each of the 4 keys' status, changed elements, NaN / Inf, bit flips "
            "and largest differences recomputed here from both files' bytes.") in text
    assert results(window)["fc1.weight"] == "changed"
    assert results(window)["benign.pt"] == "ok"
    (flip,) = [r for r in window.integrity.model.rows if r[0].startswith("fc1.weight[")]
    before = int.from_bytes(original.read_bytes()[start:start + 4], "little")
    assert flip[1] == "bit 30 (exponent)"
    assert flip[3].endswith(f"(0x{before:08x})") and flip[4].endswith(
        f"(0x{before ^ 0x40000000:08x})")
    assert flip[5] == f"byte {start + 3:,} of this file, byte {start + 3:,} of the other file"
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    window.tabs.setCurrentWidget(window.integrity)
    window.grab().save(str(artifacts / "gui" / "integrity-compare.png"))
    # the exported report carries both: the comparison with its flip, the verification beside
    job = window.write_report(tmp_path / "report.json", [doc])
    qtbot.waitUntil(lambda: not job.running, timeout=LOAD_TIMEOUT_MS)
    (entry,) = json.loads((tmp_path / "report.json").read_text())["files"]
    comparison = entry["comparison"]
    assert comparison["other"] == str(flipped) and comparison["single_bit_flips"] == 1
    assert comparison["checked"].startswith("each of the 4 keys' status, changed elements")
    (tensor,) = comparison["tensors"]
    (bits,) = tensor["bitflips"]
    assert (tensor["key"], bits["bit"], bits["kind"]) == ("fc1.weight", 30, "exponent")
    assert bits["file_offset_a"] == start + 3
    assert entry["verification"]["status"] == "pass"
    assert any(p.startswith(f"differs from {flipped}") for p in entry["problems"])


def test_convert_writes_a_verified_safetensors_and_offers_to_open_it(
        window, qtbot, small, tmp_path, artifacts):
    folder, _ = small
    source = tmp_path / "training.pt"
    shutil.copy(folder / "training.pt", source)
    before = source.read_bytes()
    doc = open_loaded(window, qtbot, source)
    assert window.act_convert.isEnabled()
    window.act_convert.trigger()
    dialog = window.findChild(ConvertDialog)
    assert dialog is not None and dialog.output.text() == str(tmp_path / "training.safetensors")
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=LOAD_TIMEOUT_MS)
    result = dialog.result
    assert result.verified is True
    out = tmp_path / "training.safetensors"
    assert out.exists() and Path(result.sidecar).exists()
    report = dialog.report.toPlainText()
    # "bit for bit" only when the app read the output back itself (`sandbox.host.claims`)
    assert ("Verified: every tensor of the output, read back here, equals the input"
            if result.claims.checked else "as reported by the jailed loader") in report
    assert "sidecar" in report
    assert source.read_bytes() == before, "the input was modified"
    assert doc.conversion is result
    assert dialog.grab().save(str(artifacts / "gui" / "convert-dialog.png"))
    dialog.open_button.click()
    qtbot.waitUntil(lambda: any(d.path == out for d in window.docs), timeout=10_000)
    opened = next(d for d in window.docs if d.path == out)
    wait_loaded(qtbot, opened)
    assert opened.verdict == "safe" and opened.scan.format == "safetensors"
    converted = {t["key"]: t["digest"] for t in opened.tensors}
    original = {t["key"]: t["digest"] for t in doc.tensors}
    assert converted and all(original[k] == v for k, v in converted.items())


def test_convert_never_overwrites_without_asking(window, qtbot, small, tmp_path, monkeypatch):
    folder, _ = small
    source = tmp_path / "benign.pt"
    shutil.copy(folder / "benign.pt", source)
    existing = tmp_path / "benign.safetensors"
    existing.write_bytes(b"keep me")
    open_loaded(window, qtbot, source)
    asked = []

    def refuse(*args, **kwargs):
        asked.append(args[2])
        from PySide6.QtWidgets import QMessageBox

        return QMessageBox.StandardButton.No

    monkeypatch.setattr("inspector.gui.dialogs.convert_dialog.QMessageBox.question", refuse)
    window.act_convert.trigger()
    dialog = window.findChild(ConvertDialog)
    assert asked and str(existing) in asked[0]
    assert dialog.job is None and existing.read_bytes() == b"keep me"


def test_about_lists_the_environment_without_importing_torch(window, qtbot, artifacts):
    dialog = AboutDialog(window.runner, window)
    dialog.show()
    qtbot.waitUntil(lambda: bool(dialog.rows), timeout=120_000)
    labels = dict(dialog.rows)
    for key in ("Python", "torch", "CUDA runtime (torch)", "cuDNN", "NVIDIA driver"):
        assert labels.get(key), key
    assert labels["torch"].startswith("2.")
    assert dialog.grab().save(str(artifacts / "gui" / "about.png"))
    # Other tests import torch into this process; test_gui_samples.py checks in a clean one.


def test_export_report_of_the_session(window, qtbot, tmp_path):
    docs = window.open_samples()
    for doc in docs:
        qtbot.waitUntil(lambda d=doc: d.state in ("loaded", "blocked") and bool(d.sha256),
                        timeout=LOAD_TIMEOUT_MS)
    out = tmp_path / "session-report.json"
    job = window.write_report(out)
    qtbot.waitUntil(lambda: not job.running, timeout=LOAD_TIMEOUT_MS)
    report = json.loads(out.read_text())
    assert report["verdict"] == "dangerous"
    assert [Path(f["file"]["path"]).name for f in report["files"]] == [
        "sample-benign.pt", "sample-malicious-demo.pt"]


def test_export_report_asks_which_files_and_defaults_to_this_one(window, qtbot, tmp_path,
                                                                 monkeypatch):
    from PySide6.QtCore import QItemSelectionModel
    from PySide6.QtWidgets import QDialog, QFileDialog

    from inspector.gui.dialogs.report_export import ScopeDialog

    docs = window.open_samples()
    for doc in docs:
        qtbot.waitUntil(lambda d=doc: d.state in ("loaded", "blocked") and bool(d.sha256),
                        timeout=LOAD_TIMEOUT_MS)
    window.file_list.setCurrentRow(0)
    offered: list[list[tuple[str, bool, bool]]] = []

    def answer(pick: int):
        def exec_(dialog: ScopeDialog) -> int:
            offered.append([(b.text(), b.isEnabled(), b.isChecked()) for b, _ in dialog.choices])
            dialog.choices[pick][0].setChecked(True)
            return QDialog.DialogCode.Accepted
        return exec_

    out = tmp_path / "one.json"
    monkeypatch.setattr(ScopeDialog, "exec", answer(0))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    job = window.export_report()
    qtbot.waitUntil(lambda: not job.running, timeout=LOAD_TIMEOUT_MS)
    report = json.loads(out.read_text())
    assert [Path(f["file"]["path"]).name for f in report["files"]] == ["sample-benign.pt"]
    assert report["verdict"] != "dangerous"  # the malicious demo beside it is not this report's
    assert offered[0] == [("This file (sample-benign.pt)", True, True),
                          ("Selected files (1)", True, False), ("All open files (2)", True, False)]

    selection = window.file_list.selectionModel()
    selection.select(window.file_list.model().index(1, 0), QItemSelectionModel.SelectionFlag.Select)
    out = tmp_path / "both.json"
    monkeypatch.setattr(ScopeDialog, "exec", answer(1))
    job = window.export_report()
    qtbot.waitUntil(lambda: not job.running, timeout=LOAD_TIMEOUT_MS)
    report = json.loads(out.read_text())
    assert offered[1][1] == ("Selected files (2)", True, False)
    assert len(report["files"]) == 2 and report["verdict"] == "dangerous"


def test_overview_says_what_is_in_the_file(window, qtbot, small, artifacts):
    folder, _ = small
    doc = open_loaded(window, qtbot, folder / "training.pt")
    window.tabs.setCurrentWidget(window.overview)
    contents = window.overview.fields["contents"].text()
    elements = sum(int(t["numel"]) for t in doc.tensors)
    assert contents.startswith(f"{len(doc.tensors)} tensors · {elements:,} elements · ")
    # its count takes in the optimizer's state: it is not the model's parameters, which the
    # Architecture line counts
    assert "parameters" not in contents
    assert "float32" in contents
    training = window.overview.fields["training"].text()
    assert "epoch 3" in training and "optimizer: 1 parameter group, lr 0.001" in training
    # whose word each part of the answer is, as `inspect` prints it
    assert window.overview.fields["checked"].text() == (
        f"{len(doc.tensors)} tensors' digests, NaN/Inf counts, ranges, zeros and binary orders "
        "recomputed here from the file's bytes, health judged from them; mean, std and "
        "histograms as reported by the jailed loader")
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    window.grab().save(str(artifacts / "gui" / "overview-training.png"))
    (plain,) = window.open_paths([folder / "benign.pt"])
    wait_loaded(qtbot, plain)
    assert window.overview.fields["training"].text() == "—"


def test_every_state_reads_as_words(tmp_path):
    """The Status line and the file list's tooltip show a state's words: no Markdown
    backticks and no identifiers."""
    doc = FileDocument(tmp_path / "x.pt")
    for state in DocumentState:
        doc.set_state(state)
        words = doc.state_words()
        assert "`" not in words and words != state.value, state


def test_an_ok_without_a_file_hash_says_so_in_its_row(window, qtbot, small, tmp_path,
                                                      artifacts):
    doc, manifest, record = _manifest_written(window, qtbot, small, tmp_path)
    del record["files"][0]["sha256"]  # a manifest of tensor digests only
    manifest.write_text(json.dumps(record))
    assert drop_files(window.integrity.findChild(ManifestDropZone), [manifest])
    qtbot.waitUntil(lambda: doc.verify is not None, timeout=LOAD_TIMEOUT_MS)
    (row,) = [r for r in window.integrity.model.rows if r[1] == "file"]
    assert row[2] == "ok"
    said = "no SHA-256 recorded: only its size and tensors compared, not its other bytes"
    assert row[5].endswith(f"; {said}")
    assert f"model.pt: {said}" in window.integrity.summary.toPlainText()
    window.grab().save(str(artifacts / "gui" / "integrity-unhashed.png"))


def test_a_file_rows_detail_says_what_its_check_could_not_cover():
    """The Integrity table shows a file check's note beside its size, as the CLI prints it."""
    from inspector.gui.document import Verification
    from inspector.gui.panes.integrity_pane import verify_view
    from inspector.integrity.verify import FileCheck, VerifyResult

    note = "no SHA-256 recorded: only its tensors compared, not its other bytes"
    result = VerifyResult(files=[FileCheck(path="model.pt", status="ok", actual_size=2048,
                                           note=note)])
    _summary, rows = verify_view(Verification(result, "tensors-only.json"))
    assert rows[0][5] == f"2,048 bytes; {note}"


def test_a_comparison_the_worker_lies_about_is_refused_not_shown(window, qtbot, small, tmp_path,
                                                                  artifacts, monkeypatch):
    import pickle
    import textwrap

    from inspector.sandbox.protocol import PAYLOAD_ENV, SELFTEST_ENV

    class Payload:
        """Unpickles, inside each later worker's jail, as code that calls A and B identical."""

        def __reduce__(self):
            return exec, (textwrap.dedent("""
                import inspector.sandbox.worker.diff as diff
                real = diff.diff_sides
                def lying(a, b, emit=None, cancel=None):
                    result = real(a, b, None, cancel)
                    for record in result["tensors"]:
                        record["status"], record["summary"] = "identical", ""
                    result.update(identical=True, summary=[],
                                  counts={"identical": len(result["tensors"])})
                    return result
                diff.diff_sides = lying
            """), {})

    folder, _ = small
    flipped = tmp_path / "flipped.pt"
    flip_exponent_bit(folder / "benign.pt", flipped)
    doc = open_loaded(window, qtbot, folder / "benign.pt")
    # the pane's own button follows the scan's verdict, as the toolbar's does
    assert window.integrity.compare_button.isEnabled()
    payload = tmp_path / "payload.pkl"
    payload.write_bytes(pickle.dumps(Payload()))
    monkeypatch.setenv(SELFTEST_ENV, "1")
    monkeypatch.setenv(PAYLOAD_ENV, str(payload))
    window.integrity.compare_with(flipped)
    text = window.integrity.summary.toPlainText
    qtbot.waitUntil(lambda: "does not match the file's own bytes" in text(),
                    timeout=LOAD_TIMEOUT_MS)
    assert "fc1.weight is changed, reported as identical" in text()
    assert doc.diff is None and "Identical" not in text()
    assert "identical" not in results(window).values()
    assert window.integrity.compare_button.isEnabled()  # the user may compare again
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    window.tabs.setCurrentWidget(window.integrity)
    window.grab().save(str(artifacts / "gui" / "integrity-compare-refused.png"))


def test_overview_names_a_negative_running_variance_as_a_weights_problem(window, qtbot, tmp_path,
                                                                          artifacts):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    model(torch.randn(32, 4))
    state = model.state_dict()
    state["1.running_var"][5] = -state["1.running_var"][5]  # a flipped sign bit
    path = tmp_path / "bn.pt"
    torch.save(state, path)
    doc = open_loaded(window, qtbot, path)
    assert doc.health.status == "problem"
    assert [(f.key, f.code) for f in doc.health.findings] == [("1.running_var",
                                                               "negative-variance")]
    window.tabs.setCurrentWidget(window.overview)
    assert "1.running_var" in window.overview.health_banner.subtitle.text()
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    window.grab().save(str(artifacts / "gui" / "overview-negative-variance.png"))
