"""Convert to safetensors: one click, output beside the input, verified tensor by tensor.

A sharded checkpoint (a model folder or its `*.index.json`) converts as the CLI's `convert DIR`
does (`shards.convert`): every shard through the jailed worker's verified conversion, one after
another, then a `model.safetensors.index.json` checked against the written shards; progress
counts shards, and Cancel stops the worker and removes every file the run wrote."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from inspector.checkpoint.results import ConversionResult, FolderConversion
from inspector.core.progress import CancelToken
from inspector.core.termtext import agree, counted
from inspector.core.vocabulary import FileStatus
from inspector.gui.document import FileDocument
from inspector.gui.jobs import EmitFn, Job
from inspector.gui.pipeline import Pipeline, stage_text
from inspector.gui.verdict_style import status_style
from inspector.shards.convert import FolderError, FolderJob, is_folder_input, plan_folder


def default_output(path: Path) -> Path:
    """`model.pt` → `model.safetensors` in the same folder; a sharded checkpoint's shards go
    into its own folder (the index's folder)."""
    if is_folder_input(path):
        return path if path.is_dir() else path.parent
    return path.with_suffix(".safetensors") if path.suffix else path.with_name(
        path.name + ".safetensors")


class ConvertDialog(QDialog):
    """Runs one conversion and shows its verification; offers to open the result."""

    open_result = Signal(str)

    def __init__(self, doc: FileDocument, pipeline: Pipeline, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.pipeline = pipeline
        self.job: Job | None = None
        self.result: ConversionResult | FolderConversion | None = None
        self.sharded = is_folder_input(doc.path)
        """A folder of shards or an index: the output is a folder of shards and an index."""
        self.shard: tuple[int, int] = (0, 0)
        """The shard being converted and how many there are (0, 0 for one file)."""
        self.setWindowTitle(f"Convert {doc.name} to safetensors")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(640, 420)

        self.output = QLineEdit(str(default_output(doc.path)))
        self.output.setAccessibleName("Output folder" if self.sharded else "Output file")
        change = QPushButton("Change…")
        change.clicked.connect(self._choose_output)
        row = QHBoxLayout()
        row.addWidget(self.output, 1)
        row.addWidget(change)
        form = QFormLayout()
        form.addRow("Input:", QLabel(str(doc.path)))
        form.addRow("Output:", row)
        self.change_button = change

        self.stage = QLabel("Ready")
        self.progress = QProgressBar()
        self.report = QTextBrowser()
        self.report.setAccessibleName("Conversion result")
        self.buttons = QDialogButtonBox()
        self.convert_button = self.buttons.addButton(
            "Convert", QDialogButtonBox.ButtonRole.AcceptRole)
        self.open_button = self.buttons.addButton(
            "Open Result", QDialogButtonBox.ButtonRole.ActionRole)
        self.folder_button = self.buttons.addButton(
            "Show in Folder", QDialogButtonBox.ButtonRole.ActionRole)
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.convert_button.clicked.connect(self.start)
        self.open_button.clicked.connect(self._open_result)
        self.folder_button.clicked.connect(self._show_folder)
        self.cancel_button.clicked.connect(self._cancel_or_close)
        self.open_button.setEnabled(False)
        self.folder_button.setEnabled(False)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.stage)
        layout.addWidget(self.progress)
        layout.addWidget(self.report, 1)
        layout.addWidget(self.buttons)

    def start(self) -> Job | None:
        """Start converting to the chosen output, asking before replacing a file."""
        out = Path(self.output.text()).expanduser()
        plan = None
        if self.sharded:
            try:  # reads the index only: what each shard becomes
                plan = plan_folder(self.doc.path, out)
            except FolderError as exc:
                self.report.setHtml(f"<p><b>Cannot convert:</b> {html.escape(exc.message)}</p>")
                return None
            targets = [o for _s, o in plan.pairs] + [plan.output_index] * bool(plan.output_index)
        elif out.resolve() == self.doc.path.resolve():
            self.report.setHtml("<p>The output cannot be the input file.</p>")
            return None
        else:
            targets = [out]
        existing = [t for t in targets if t.exists()]
        overwrite = False
        if existing:
            names = "\n".join(str(t) for t in existing[:6]) + ("\n…" if len(existing) > 6 else "")
            answer = QMessageBox.question(
                self, "Replace files?" if len(existing) > 1 else "Replace file?",
                f"{names}\nalready exist{'s' if len(existing) == 1 else ''}. Replace?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                self.report.setHtml("<p>Choose another output, then Convert.</p>")
                return None
            overwrite = True
        self.convert_button.setEnabled(False)
        self.change_button.setEnabled(False)
        self.output.setReadOnly(True)
        self.progress.setRange(0, 0)
        self.stage.setText("Waiting for the sandbox…")
        self.report.setHtml("<p>Converting inside the jailed worker; the input is only read."
                            "</p>")
        fn = (_convert_folder_fn(plan, overwrite, self.doc.allowed_globals) if plan is not None
              else _convert_fn(self.doc.path, out, overwrite, self.doc.allowed_globals))
        job = Job(f"convert {self.doc.name}", fn, self, doc=self.doc)
        job.events.connect(self._events)
        job.finished.connect(self._finished)
        job.failed.connect(self._failed)
        job.cancelled.connect(lambda: self._failed("Cancelled; nothing was written."))
        self.job = job
        return self.pipeline.run_heavy(job)

    def _events(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            if e.get("type") == "shard":
                self.shard = (int(e["number"]), int(e["count"]))
                self.progress.setRange(0, 1000)
                self.progress.setValue(int(1000 * (self.shard[0] - 1) / self.shard[1]))
            if e.get("type") == "progress":
                number, count = self.shard
                stage = stage_text(str(e.get("stage", "")))
                self.stage.setText(f"Shard {number} of {count}: {stage}" if count else stage)
                total, done = int(e.get("total") or 0), int(e.get("done") or 0)
                if total:
                    share = min(done, total) / total
                    whole = (number - 1 + share) / count if count else share
                    self.progress.setRange(0, 1000)
                    self.progress.setValue(int(1000 * whole))

    def _finished(self, result: ConversionResult | FolderConversion) -> None:
        self.result = result
        self.doc.conversion = result  # the report's conversion section: a file's or a folder's
        self.doc.changed.emit()
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        self.stage.setText("Done")
        self.report.setHtml(conversion_html(result) if isinstance(result, ConversionResult)
                            else folder_conversion_html(result))
        self.open_button.setEnabled(True)
        self.folder_button.setEnabled(True)
        self.cancel_button.setText("Close")

    def _failed(self, message: str) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.stage.setText("Failed")
        self.report.setHtml(f"<p><b>Conversion failed:</b> {html.escape(message)}</p>")
        self.convert_button.setEnabled(True)
        self.change_button.setEnabled(True)
        self.output.setReadOnly(False)

    def _choose_output(self) -> None:
        if self.sharded:
            path = QFileDialog.getExistingDirectory(self, "Write the shards into",
                                                    self.output.text())
        else:
            path, _ = QFileDialog.getSaveFileName(
                self, "Save safetensors as", self.output.text(), "safetensors (*.safetensors)")
        if path:
            self.output.setText(path)

    def _output_path(self) -> str:
        """What Open Result opens: the converted file, or the new index of a folder's shards
        (the app opens an index as the sharded checkpoint it names)."""
        result = self.result
        if isinstance(result, FolderConversion):
            return result.output_index or result.outputs[0]
        return (result.output if result is not None else None) or self.output.text()

    def _open_result(self) -> None:
        self.open_result.emit(self._output_path())
        self.accept()

    def _show_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(self._output_path()).parent)))

    def _cancel_or_close(self) -> None:
        if self.job is not None and self.job.running:
            self.job.cancel()
        else:
            self.reject()


def conversion_html(result: ConversionResult) -> str:
    """The conversion report in words: verification, aliases, sidecar, output hash."""
    verified = result.verified
    ok = status_style(FileStatus.OK if verified else FileStatus.MISMATCH)
    why = result.unchecked_reason
    said = ("Verified: every tensor of the output, read back here, equals the input's stored "
            "bytes, bit for bit." if why is None else
            "The output matches the input as reported by the jailed loader; not checked here: "
            + html.escape(why) + ".")
    parts = [
        f"<p><b style='color:{ok.colour}'>{ok.glyph} "
        + (said if verified else "Not verified: the output does not match the input.")
        + "</b></p>",
        f"<p>Wrote <b>{html.escape(str(result.output))}</b> with "
        f"{result.tensors_written} tensors.</p>",
    ]
    if result.sha256:
        parts.append(f"<p>SHA-256 of the output: <code>{html.escape(result.sha256)}</code>"
                     "</p>")
    aliases = result.aliases
    if aliases:
        items = "".join(
            f"<li><code>{html.escape(str(a))}</code> → <code>{html.escape(str(k))}</code></li>"
            for a, k in list(aliases.items())[:20]
        )
        parts.append(f"<p>{_stored_once(len(aliases))} the file's metadata:</p>"
                     f"<ul>{items}</ul>")
    if result.sidecar:
        moved = counted(len(result.objects_moved), "non-tensor value")
        parts.append(f"<p>{moved} (epoch, config…) went to the JSON sidecar "
                     f"<b>{html.escape(result.sidecar)}</b>.</p>")
    for problem in result.not_serializable:
        parts.append(f"<p>Not kept (JSON cannot hold it): {html.escape(str(problem))}</p>")
    return "".join(parts)


def folder_conversion_html(result: FolderConversion) -> str:
    """A sharded conversion in words: verification, each shard written, the index."""
    ok = status_style(FileStatus.OK)
    index = ", and the index matches the shards written" if result.output_index else ""
    why = result.unchecked_reason
    said = (f"Verified: every tensor of every shard, read back here, equals the input's "
            f"stored bytes, bit for bit{index}." if why is None else
            f"Every shard matches as reported by the jailed loader{index}; not checked here: "
            f"{html.escape(why)}.")
    parts = [f"<p><b style='color:{ok.colour}'>{ok.glyph} {said}</b></p>",
             f"<p>Wrote {counted(len(result.shards), 'shard')}, "
             f"{counted(result.tensors_written, 'tensor')}, "
             f"{result.bytes_written:,} bytes of tensor data:</p><ul>"]
    parts += [f"<li><b>{html.escape(Path(str(shard.output)).name)}</b> "
              f"({shard.tensors_written} tensors) from {html.escape(Path(shard.input).name)}</li>"
              for shard in result.shards]
    parts.append("</ul>")
    if result.output_index:
        parts.append(f"<p>Index: <b>{html.escape(result.output_index)}</b></p>")
    aliases = sum(len(shard.aliases) for shard in result.shards)
    if aliases:
        parts.append(f"<p>{_stored_once(aliases)} each shard's metadata.</p>")
    parts += [f"<p>Note: {html.escape(str(p.get('message')))}</p>" for p in result.problems]
    return "".join(parts)


def _convert_folder_fn(plan: FolderJob, overwrite: bool, allow_globals: tuple[str, ...]):
    def run(emit: EmitFn, cancel: CancelToken) -> FolderConversion:
        from inspector.sandbox.host.client import convert_file
        from inspector.shards.convert import convert_folder

        def convert_one(src: Path, out: Path, force: bool, cancel=None) -> ConversionResult:
            return ConversionResult.from_json(convert_file(
                src, out, overwrite=force, allow_globals=allow_globals, on_event=emit,
                cancel=cancel))

        def on_shard(number: int, count: int, src: Path) -> None:
            emit({"type": "shard", "number": number, "count": count, "source": str(src)})

        # one shard after another: the app runs one heavy job at a time
        return convert_folder(plan, convert_one, overwrite, on_shard, cancel=cancel)

    return run


def _convert_fn(path: Path, out: Path, overwrite: bool, allow_globals: tuple[str, ...]):
    def run(emit: EmitFn, cancel: CancelToken) -> ConversionResult:
        from inspector.sandbox.host.client import convert_file

        # typed here, on the job's thread, not on the UI thread
        return ConversionResult.from_json(convert_file(
            path, out, overwrite=overwrite, allow_globals=allow_globals, on_event=emit,
            cancel=cancel))

    return run


def _stored_once(n: int) -> str:
    """The sentence for tensors a conversion stored once, up to where their aliases are."""
    return (f"{counted(n, 'tensor')} shared storage with another and {agree(n, 'was', 'were')} "
            "stored once; the aliases are recorded in")
