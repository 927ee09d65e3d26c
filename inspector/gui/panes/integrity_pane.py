"""Integrity: verify against a manifest, create one, and compare with another checkpoint."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStyledItemDelegate,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from inspector.checkpoint.results import DiffResult, FlipRecord, TensorDiffRow
from inspector.core.progress import CancelToken
from inspector.core.termtext import counted
from inspector.core.vocabulary import (
    DocumentState,
    FileStatus,
    TensorCheckStatus,
    TensorStatus,
    Verdict,
)
from inspector.gui import app as appmod
from inspector.gui import roles
from inspector.gui.action_reasons import DANGEROUS_COMPARE, compare_blocker, file_blocker
from inspector.gui.document import FileDocument, Verification
from inspector.gui.drops import DROP_OWNER
from inspector.gui.jobs import EmitFn, Job, JobRunner
from inspector.gui.pipeline import Pipeline
from inspector.gui.signing.badge import SignatureBadge
from inspector.gui.verdict_style import status_style, tint
from inspector.integrity.verify import FileCheck, TensorCheck, loader_word

MANIFEST_FILTER = (
    "Manifests (*.json *.sha256 *.sha256sum *.txt *.tsv *.md5 *);;All files (*)"
)
WRITE_FILTERS = {
    "JSON manifest with tensor hashes (*.json)": ".json",
    "sha256sum (*.sha256)": ".sha256",
    "TSV (*.tsv)": ".tsv",
}
RESULT_COLUMNS = ("Item", "Kind", "Status", "This file", "Manifest / other file", "Details")
DETAILS = RESULT_COLUMNS.index("Details")
"""The open file (the one under suspicion) is always the first value column, never
"expected": a manifest's value or the other checkpoint's is the second."""
VERIFY_TIP = "Check the file and every tensor against a manifest"
CREATE_TIP = "Write a manifest of the file and its tensors"
COMPARE_TIP = "Diff against another checkpoint, with bit-flip forensics"
GOOD = {FileStatus.OK, TensorStatus.IDENTICAL}
Row = tuple[str, str, str, str, str, str]


class ResultsModel(roles.RowsModel):
    """File and tensor results, problems first, each row coloured by its status."""

    HEADERS = RESULT_COLUMNS
    rows: list[Row]

    def set_rows(self, rows: list[Row]) -> None:
        """Replace the rows; problems sort before ok rows, order otherwise kept."""
        super().set_rows(sorted(rows, key=lambda r: r[2] in GOOD))

    def data(self, index: QModelIndex, role: int = roles.DISPLAY):
        row = self.rows[index.row()]
        status = row[2]
        if role == roles.DISPLAY:
            if index.column() == 2:
                style = status_style(status)
                return f"{style.glyph} {style.word}"
            value = row[index.column()]
            return value[:24] + "…" if index.column() in (3, 4) and len(value) > 25 else value
        if role == roles.TOOLTIP:
            return row[index.column()] or None
        if role == roles.BACKGROUND:
            return tint(status_style(status).colour, 40 if status in GOOD else 80)
        if role == roles.USER:
            return status
        return None


class ElideMiddle(QStyledItemDelegate):
    """A cell too long for its column drops its middle, not its end (a note's reason)."""

    def initStyleOption(self, option, index: QModelIndex) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideMiddle


class ManifestDropZone(QFrame):
    """A frame that takes a dropped manifest instead of opening it as a checkpoint."""

    def __init__(self, on_drop, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setProperty(DROP_OWNER, True)
        self.setAcceptDrops(True)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._on_drop = on_drop

    def dragEnterEvent(self, event) -> None:
        """Accept one local file."""
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        """Verify against the dropped manifest."""
        urls = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if urls:
            event.acceptProposedAction()
            self._on_drop(urls[0])


class IntegrityPane(QWidget):
    """Manifest verification, manifest creation and checkpoint comparison for a document."""

    def __init__(self, runner: JobRunner, pipeline: Pipeline,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.pipeline = pipeline
        self.doc: FileDocument | None = None

        zone = ManifestDropZone(self.verify_with)
        hint = QLabel(
            "Drop a manifest here — sha256sum or BSD checksums, TSV, a Git LFS pointer, this "
            "app's JSON manifest or a sharded *.index.json — to check the file and every tensor."
        )
        hint.setWordWrap(True)
        self.choose_button = QPushButton("Verify Against Manifest…")
        self.choose_button.clicked.connect(self.choose_manifest)
        self.create_button = QPushButton("Create Manifest…")
        self.create_button.clicked.connect(self.create_manifest)
        self.compare_button = QPushButton("Compare With…")
        self.compare_button.clicked.connect(self.choose_compare)
        buttons = QHBoxLayout()
        buttons.addWidget(self.choose_button)
        buttons.addWidget(self.create_button)
        buttons.addWidget(self.compare_button)
        buttons.addStretch(1)
        zl = QVBoxLayout(zone)
        zl.addWidget(hint)
        zl.addLayout(buttons)

        self.summary = QTextBrowser()
        self.summary.setMaximumHeight(150)
        self.summary.setAccessibleName("Integrity summary")
        self.model = ResultsModel(self)
        self.table = roles.rows_view(self.model, "Integrity results",
                                     self.fontMetrics().height() + 8)
        self.table.setWordWrap(False)
        # a long Details cell keeps its end: why a verdict is the jailed loader's word ends it
        self.table.setItemDelegateForColumn(DETAILS, ElideMiddle(self.table))
        # Sized so Details (a flip's byte offsets) keeps about 200 px in a 1280-pixel window.
        for i, width in enumerate((220, 130, 100, 180, 180)):
            self.table.setColumnWidth(i, width)

        self.badge = SignatureBadge(runner)
        layout = QVBoxLayout(self)
        layout.addWidget(self.badge)
        layout.addWidget(zone)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        self.set_document(None)

    def set_document(self, doc: FileDocument | None) -> None:
        """Show `doc`'s last verification and its last comparison, side by side; its buttons
        follow the document (a comparison waits for the scan's verdict)."""
        if self.doc is not None:
            self.doc.changed.disconnect(self._update_buttons)
        self.doc = doc
        if doc is not None:
            doc.changed.connect(self._update_buttons)
        self._update_buttons()
        self.badge.show_path(doc.path if doc is not None else None)
        if doc is None:
            self._show("<p>No file open.</p>", [])
            return
        heads, rows = [], []
        if doc.verify is not None:
            head, verify_rows = verify_view(doc.verify)
            heads.append(head)
            rows += verify_rows
        elif doc.diff is None:  # above a comparison's result, this line would be stale
            heads.append("<p>Not verified yet. Drop a manifest above, or create one now so later "
                         "copies of this file can be checked against it.</p>")
        if doc.diff is not None:
            head, diff_rows = diff_view(doc.diff)
            heads.append(head)
            rows += diff_rows
        self._show("".join(heads), rows)

    # --- verify ------------------------------------------------------------------------

    def choose_manifest(self) -> None:
        """Ask for a manifest and verify the current document against it."""
        self._ask_file("Verify against manifest", MANIFEST_FILTER, self.verify_with)

    def verify_with(self, manifest_path: str | Path) -> Job | None:
        """Verify the current document's file (and tensors, when it was loaded)."""
        doc = self.doc
        if doc is None:
            return None
        tensors = _tensor_entries(doc) if doc.state == DocumentState.LOADED else None
        job = Job(f"verify {doc.name}", _verify_fn(Path(manifest_path), doc.path, tensors), self,
                  doc=doc)
        return self._run(job, lambda result: self._verified(doc, result), "Could not verify",
                         f"Verifying against {html.escape(str(manifest_path))}")

    def _verified(self, doc: FileDocument, result: Verification) -> None:
        doc.verify = result
        self._changed(doc)

    # --- create ------------------------------------------------------------------------

    def create_manifest(self) -> Job | None:
        """Ask where to write a manifest of the current document, then write it."""
        doc = self.doc
        if doc is None:
            return None
        default = str(doc.path.with_name(doc.path.name + ".manifest.json"))
        path, chosen = QFileDialog.getSaveFileName(
            self, "Create manifest", default, ";;".join(WRITE_FILTERS))
        if not path:
            return None
        if not Path(path).suffix and chosen in WRITE_FILTERS:
            path += WRITE_FILTERS[chosen]
        # The save dialog has already asked before replacing an existing file.
        return self.write_manifest(Path(path), overwrite=True)

    def write_manifest(self, path: Path, overwrite: bool = False) -> Job | None:
        """Write a manifest of the current document to `path` (format from its extension)."""
        doc = self.doc
        if doc is None:
            return None
        tensors = _tensor_entries(doc) if doc.state == DocumentState.LOADED else None
        fmt = doc.scan.format if doc.scan else None
        fn = _manifest_fn(path, doc.path, doc.sha256, fmt, tensors, overwrite)
        job = Job(f"manifest {doc.name}", fn, self, doc=doc)
        return self._run(job, lambda dialect: self._wrote_manifest(path, dialect, tensors),
                         "Could not write the manifest")

    def _wrote_manifest(self, path: Path, dialect: str, tensors: list | None) -> None:
        with_tensors = ""
        if tensors and dialect == "json":
            with_tensors = f" with {len(tensors)} tensor hashes"
            why = next((t.unchecked for t in tensors if t.unchecked is not None), None)
            if why is not None:  # recorded on the loader's word, as `manifest create` says
                with_tensors += (f" ({html.escape(loader_word(why))}: a later verification "
                                 "of this file says so of its tensors)")
        self._show(f"<p>Wrote a {html.escape(dialect)} manifest{with_tensors} to "
                   f"<b>{html.escape(str(path))}</b>.</p>", [])

    # --- compare -----------------------------------------------------------------------

    def choose_compare(self) -> None:
        """Ask for another checkpoint and diff the current document against it."""
        self._ask_file("Compare with", "All files (*)", self.compare_with)

    def compare_with(self, other: str | Path) -> Job | None:
        """Diff the current document against `other` in the sandbox, with bit-flip forensics."""
        doc = self.doc
        if doc is None:
            return None
        if doc.verdict == Verdict.DANGEROUS:
            self._show(f"<p>{DANGEROUS_COMPARE}.</p>", [])
            return None
        job = Job(f"diff {doc.name}", _diff_fn(doc.path, Path(other), doc.allowed_globals), self,
                  doc=doc)
        return self._run(job, lambda result: self._diffed(doc, result), "Could not compare",
                         f"Comparing with {html.escape(str(other))}")

    def _diffed(self, doc: FileDocument, result: DiffResult) -> None:
        doc.diff = result
        self._changed(doc)

    def _update_buttons(self) -> None:
        doc = self.doc
        for button, blocked, tip in ((self.choose_button, file_blocker(doc), VERIFY_TIP),
                                     (self.create_button, file_blocker(doc), CREATE_TIP),
                                     (self.compare_button, compare_blocker(doc), COMPARE_TIP)):
            button.setEnabled(blocked is None)
            button.setToolTip(blocked or tip)

    def _ask_file(self, title: str, name_filter: str, then: Callable[[str], object]) -> None:
        """Ask for a file, starting beside the current document's; `then` takes the chosen
        path (nothing happens without a document or a choice)."""
        if self.doc is None:
            return
        path, _ = QFileDialog.getOpenFileName(self, title, str(self.doc.path.parent), name_filter)
        if path:
            then(path)

    def _run(self, job: Job, done: Callable[[object], None], failed: str,
             waiting: str | None = None) -> Job | None:
        """Run `job` on the heavy pool: `done` takes its result, a failure shows as `failed`
        and the message, and `waiting` (HTML) shows until then."""
        job.finished.connect(done)
        job.failed.connect(lambda msg: self._show(
            f"<p><b>{failed}:</b> {html.escape(msg)}</p>", []))
        if waiting is not None:
            self._show(f"<p>{waiting}…</p>", [])
        return self.pipeline.run_heavy(job)

    def _changed(self, doc: FileDocument) -> None:
        """A document's result changed: say so, and show it if it is the current one."""
        doc.changed.emit()
        if doc is self.doc:
            self.set_document(doc)

    def _show(self, summary_html: str, rows: list[Row]) -> None:
        self.summary.setHtml(summary_html)
        self.model.set_rows(rows)


def verify_view(verification: Verification) -> tuple[str, list[Row]]:
    """The summary paragraph and the table rows of a manifest verification."""
    result = verification.result
    files, tensors = result.files, result.tensors
    rows = [
        (f.path, "file", f.status, f.actual or "", f.expected or "", _file_detail(f))
        for f in files
    ] + [
        (t.key, "tensor", t.status, t.actual or "", t.expected or "", _tensor_detail(t))
        for t in tensors
    ]
    bad_files = sum(f.status != FileStatus.OK for f in files)
    # a tensor equal on the jailed loader's word alone is neither a match nor a difference
    unchecked = sum(t.status == FileStatus.UNCHECKED for t in tensors)
    bad_tensors = sum(t.status not in (TensorCheckStatus.OK, FileStatus.UNCHECKED)
                      for t in tensors)
    name = html.escape(verification.manifest)
    if bad_files or bad_tensors or result.errors:
        also = f"; {unchecked} not checked here" if unchecked else ""
        head = (f"<p><b style='color:{status_style('mismatch').colour}'>✕ Does not match "
                f"{name}</b>: {bad_files} of {counted(len(files), 'file')} and {bad_tensors} of "
                f"{counted(len(tensors), 'tensor')} differ{also}.</p>")
    elif unchecked:
        look = status_style(FileStatus.UNCHECKED)
        head = (f"<p><b style='color:{look.colour}'>{look.glyph} Not checked against {name}"
                f"</b>: nothing differs, but {unchecked} of {counted(len(tensors), 'tensor')} "
                "match only on the jailed loader's word (not a pass).</p>")
    else:
        head = (f"<p><b style='color:{status_style('ok').colour}'>✓ Matches {name}</b>: "
                f"{counted(len(files), 'file')} and {counted(len(tensors), 'tensor')} "
                "verified.</p>")
    notes = "".join(f"<p>{html.escape(e)}</p>" for e in result.errors)
    # what a file's check could not cover reads in full here; its row's cell elides it
    notes += "".join(f"<p>{html.escape(f.path)}: {html.escape(f.note)}</p>"
                     for f in files if f.note)
    # whose word a tensor verdict is, and why, as the CLI says it beside the file's verdicts
    noted = Counter((t.file, t.note) for t in tensors if t.note)
    notes += "".join(f"<p>{html.escape(file)}: {counted(n, 'tensor verdict')} "
                     f"{html.escape(note)}</p>" for (file, note), n in noted.items())
    if verification.note:
        notes += f"<p>{html.escape(verification.note)}</p>"
    return head + notes, rows


def diff_view(result: DiffResult) -> tuple[str, list[Row]]:
    """The summary paragraph and the forensic rows of a comparison: one row per tensor that
    differs, then one per flipped element with its bits, values before and after, and where
    the changed byte lies in each file."""
    tensors = result.tensors
    other = html.escape(result.b.path if result.b is not None else "the other file")
    changed = result.differing
    if not changed:
        head = (f"<p><b style='color:{status_style('ok').colour}'>✓ Identical to {other}"
                f"</b>: all {len(tensors)} tensors are bit for bit the same.</p>")
    else:
        head = (f"<p><b style='color:{status_style('changed').colour}'>✕ Differs from "
                f"{other}</b>: {len(changed)} of {len(tensors)} tensors differ.</p>")
        head += "".join(f"<p>{_code_html(t.summary)}</p>" for t in changed[:8] if t.bitflips)
        head += "<p>" + html.escape(forensic_verdict(changed)) + "</p>"
    head += f"<p>Checked here: {html.escape(result.checked_words)}.</p>"
    rows: list[Row] = []
    for t in changed:
        rows.append((t.key, "tensor", t.status, _dtype_shape(t.dtype_a, t.shape_a),
                     _dtype_shape(t.dtype_b, t.shape_b), t.plain_summary))
        rows += [flip_row(t.key, f) for f in t.bitflips]
    rows += [(t.key, "tensor", t.status, "", "", "bit for bit identical")
             for t in tensors if t.status == TensorStatus.IDENTICAL]
    return head, rows


def flip_row(key: str, flip: FlipRecord) -> Row:
    """One flipped element: where, which bit, its value and bits before and after."""
    where = "[" + ", ".join(map(str, flip.position or [flip.index])) + "]"
    offsets = [f"byte {offset:,} of {side}" for side, offset in (
        ("this file", flip.file_offset_a), ("the other file", flip.file_offset_b))
        if offset is not None]
    return (f"{key}{where}", f"bit {flip.bit} ({flip.label})", TensorStatus.CHANGED,
            _value_bits(flip.before_value, flip.before_bits),
            _value_bits(flip.after_value, flip.after_bits),
            ", ".join(offsets) or "offset in the file unknown")


def _value_bits(value: str | None, bits: str | None) -> str:
    if bits is None:
        return ""
    return f"{value} (0x{bits})" if value is not None else f"0x{bits}"


def _dtype_shape(dtype: str | None, shape: list[int] | None) -> str:
    if dtype is None:
        return "—"
    return f"{dtype} {list(shape or [])}"


def _code_html(text: str) -> str:
    """Engine sentences with their backticked keys set as code, for a rich-text label."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def forensic_verdict(changed: list[TensorDiffRow]) -> str:
    """What the pattern of differences suggests, in plain words."""
    flips = sum(len(t.bitflips) for t in changed)
    elements = sum(t.changed_elements for t in changed)
    if changed and flips and flips == elements:
        return ("Every difference is a single flipped bit — the signature of memory or storage "
                "corruption, not of training. Restore the file from a backup or download it "
                "again, and check the machine's RAM/GPU ECC counters.")
    if elements and not flips:
        return ("Many bits changed in many elements — training, fine-tuning or quantisation "
                "drift rather than corruption.")
    return ("A mix of single-bit flips and broader changes; compare against a trusted copy "
            "before using either file.")


def _file_detail(f: FileCheck) -> str:
    """A file row's detail: its size, and what its check could not cover (`note`: a link
    never followed, an `ok` that compared no file hash), as the CLI prints it."""
    exp, act = f.expected_size, f.actual_size
    if f.status == FileStatus.SIZE_MISMATCH:
        size = f"size {act:,} bytes, manifest says {exp:,}" if exp and act else "size differs"
    else:
        size = f"{act:,} bytes" if isinstance(act, int) else ""
    return "; ".join(part for part in (size, f.note) if part)


def _tensor_detail(t: TensorCheck) -> str:
    """A tensor row's detail: its dtype (or how it changed), then whose word the verdict is
    (`note`: the jailed loader's, not checked here, and why), as the CLI prints it."""
    if t.status == TensorCheckStatus.DTYPE_OR_SHAPE_CHANGED:
        kind = f"{t.expected_dtype} {t.expected_shape} → {t.actual_dtype} {t.actual_shape}"
    else:
        kind = str(t.actual_dtype or t.expected_dtype or "")
    return "; ".join(part for part in (kind, t.note) if part)


def _tensor_entries(doc: FileDocument) -> list:
    """The document's measured tensors as manifest entries (already hashed in the sandbox),
    each carrying why its digest is only the jailed loader's word where the load's claims
    were not checked here (`TensorEntry.unchecked`, as `tensor_digests` sets it for the CLI):
    a verification then calls an equal digest `unchecked`, never `ok`."""
    from inspector.integrity.manifest import TensorEntry

    result = doc.result
    algorithm = (result.digest_algorithm if result else None) or "sha256"
    claims = result.claims if result is not None else None
    unchecked = None if claims is not None and claims.checked else (
        (claims.reason if claims is not None else None) or "no check was made")
    return [
        TensorEntry(key=t["key"], dtype=t.get("dtype"), shape=tuple(t.get("shape") or ()),
                    digest=t.get("digest"), digest_algorithm=algorithm, unchecked=unchecked)
        for t in doc.tensors
    ]


def _verify_fn(manifest_path: Path, path: Path, tensors: list | None):
    def run(emit: EmitFn, cancel: CancelToken) -> Verification:
        from inspector.integrity.manifest import read_manifest
        from inspector.integrity.verify import verify

        manifest = read_manifest(manifest_path)

        def digests(_path: Path, *, cancel: CancelToken | None = None) -> list:
            return tensors or []

        def progress(done: int, total: int) -> None:
            emit({"type": "progress", "stage": "verify", "done": done, "total": total})

        use_tensors = tensors is not None and manifest.has_tensors
        result = verify(manifest, [path], tensor_digests=digests if use_tensors else None,
                        progress=progress, cancel=cancel)
        unchecked = manifest.has_tensors and tensors is None
        return Verification(result, str(manifest_path), "Tensors were not checked: this file "
                            "was not loaded." if unchecked else "")

    return run


def _manifest_fn(target: Path, path: Path, sha256: str | None, fmt: str | None,
                 tensors: list | None, overwrite: bool):
    def run(emit: EmitFn, cancel: CancelToken) -> str:
        from inspector.integrity.hashing import sha256_file
        from inspector.integrity.manifest import FileEntry, relative_path, write_manifest

        def progress(done: int, total: int) -> None:
            emit({"type": "progress", "stage": "hash", "done": done, "total": total})

        digest = sha256 or sha256_file(path, progress=progress, cancel=cancel)
        entry = FileEntry(path=relative_path(path, target.parent), sha256=digest,
                          size=path.stat().st_size, format=fmt, tensors=tensors)
        return write_manifest(target, [entry], overwrite=overwrite,
                              created_by=f"{appmod.APPLICATION}")

    return run


def _diff_fn(a: Path, b: Path, allow_globals: tuple[str, ...]):
    def run(emit: EmitFn, cancel: CancelToken) -> DiffResult:
        from inspector.sandbox.host.client import diff_result

        return diff_result(a, b, on_event=emit, cancel=cancel, allow_globals=allow_globals)

    return run
