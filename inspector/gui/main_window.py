"""The main window: file list, panes, progress and cancel; its menus are `gui.menus`, its file
drops `gui.drops`."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QItemSelectionModel, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from inspector import formats
from inspector.gui import app as appmod
from inspector.gui.document import FileDocument, distinct_names, list_text
from inspector.gui.drops import FileDrops
from inspector.gui.jobs import Job, JobRunner
from inspector.gui.menus import build_menus, update_actions
from inspector.gui.pipeline import Pipeline, open_list
from inspector.gui.verdict_style import document_icon, document_words, state_tooltip
from inspector.gui.widgets.empty_state import EmptyState
from inspector.gui.widgets.file_list import SIDE_WIDTH, FileListPanel
from inspector.shards.inspect import coverage_text

if TYPE_CHECKING:
    from inspector.gui.folders.entries_pane import FolderPane
    from inspector.scan.discover import Found

FILE_FILTER = formats.dialog_filter()
PROGRESS_MS = 200
DEFAULT_SIZE = (1200, 780)
"""The first window's size where the screen has room; a smaller screen gets what it has."""
TABS_MIN_WIDTH = 480
WINDOW_FRAME = (16, 48)
"""Room left for the window manager's frame and title bar (width, height)."""


def default_size(available: QSize) -> tuple[int, int]:
    """The first window's size on a screen with `available` room (its work area): never more
    than fits, so the status bar, progress and Cancel stay on a 1280×720 screen."""
    return (min(DEFAULT_SIZE[0], available.width() - WINDOW_FRAME[0]),
            min(DEFAULT_SIZE[1], available.height() - WINDOW_FRAME[1]))


PANE_MODULES = ("inspector.gui.panes.integrity_pane", "inspector.gui.panes.overview_pane",
                "inspector.gui.panes.pickle_pane", "inspector.gui.panes.tensors_pane")
"""What `build_panes` imports; `_PanePrefetch` imports them ahead of the first open."""


class _PanePrefetch(QObject):
    """Gets the panes ready once the window has painted, one step per event-loop turn: imports
    their modules, builds them (behind the empty state) and polishes them.

    Importing them inside the first open was most of its UI stall (about 110 ms of 260 ms
    with three files opened at once on a loaded 2-core machine, bench_gui_responsiveness
    --sample); building and polishing the panes was most of what was left (about 25 of the
    open's 40 ms of UI-thread CPU). One step per turn keeps each idle-time step short and the
    empty window's first paint as fast as before; a file opened sooner builds what is left.
    """

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._steps: list[Callable[[], object]] = [
            *(lambda m=m: importlib.import_module(m) for m in PANE_MODULES),
            window.build_panes, window.splitter.ensurePolished]
        window.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            obj.removeEventFilter(self)
            QTimer.singleShot(0, self, self._next)
        return False

    def _next(self) -> None:
        self._steps.pop(0)()
        if self._steps:
            QTimer.singleShot(0, self, self._next)


class LazyPane(QWidget):
    """A tab whose real pane (and its imports) is created the first time it is shown."""

    built = Signal()  # the pane was created and added

    def __init__(self, factory: Callable[[], QWidget]) -> None:
        super().__init__()
        self._factory: Callable[[], QWidget] | None = factory
        self.setLayout(QVBoxLayout())
        self.layout().setContentsMargins(0, 0, 0, 0)

    def showEvent(self, event) -> None:
        """Build the pane on first show."""
        if self._factory is not None:
            factory, self._factory = self._factory, None
            self.layout().addWidget(factory())
            self.built.emit()
        super().showEvent(event)


class MainWindow(QMainWindow):
    """Checkpoint Inspector's window."""

    def __init__(self, warm_worker: bool = False) -> None:
        """`warm_worker`: keep a fork server ready from the first paint (the app sets it)."""
        super().__init__()
        self.setWindowTitle(appmod.APPLICATION)
        self.docs: list[FileDocument] = []
        self.runner = JobRunner(self)
        self.pipeline = Pipeline(self.runner, self)
        self.pipeline.skipped.connect(self._skip_document)

        self.empty = EmptyState()
        self.empty.open_requested.connect(self.open_dialog)
        self.empty.sample_requested.connect(self.open_samples)

        self.files = FileListPanel()
        self.file_list = self.files.list
        self.file_list.currentRowChanged.connect(self._select_row)

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.panes_built = False
        self.gpu: QWidget | None = None
        self.consistency: QWidget | None = None
        self.run_pane: QWidget | None = None
        self.folder_pane: FolderPane | None = None

        # The panes' own minimum sizes must not squeeze the list (it jumped from 230 px to
        # 130 px as the selection changed): the tabs get an explicit minimum, which overrides
        # the hint their contents give, and the list no stretch, so it keeps its width.
        self.tabs.setMinimumWidth(TABS_MIN_WIDTH)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.files)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(0, False)
        self.splitter.setCollapsible(1, False)
        self.splitter.setSizes([SIDE_WIDTH, DEFAULT_SIZE[0] - SIDE_WIDTH])

        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(self.splitter)
        self.setCentralWidget(self.stack)

        self._build_status_bar()
        build_menus(self)
        self.pipeline.progress.connect(self._show_progress)
        self.pipeline.job_started.connect(self._job_started)
        self.runner.busy_changed.connect(self._set_busy)
        self.drops = FileDrops(self, self.open_paths)
        self.drops.route()
        self._restore_settings()
        update_actions(self)
        _PanePrefetch(self)
        self.warm = None
        if warm_worker:
            from inspector.gui.warm_worker import WarmWorker

            self.warm = WarmWorker(self)
            self.warm.unavailable.connect(lambda why: self.statusBar().showMessage(
                f"No warm sandbox worker ({why}): each file starts its own", 15000))
            self.warm.start_after_paint()

    # --- building ----------------------------------------------------------------------

    def build_panes(self) -> None:
        """Create the panes on first need, so the empty window appears without their cost."""
        if self.panes_built:
            return
        self.panes_built = True
        from inspector.gui.panes.integrity_pane import IntegrityPane
        from inspector.gui.panes.overview_pane import OverviewPane
        from inspector.gui.panes.pickle_pane import PicklePane
        from inspector.gui.panes.tensors_pane import TensorsPane

        self.overview = OverviewPane()
        self.overview.load_allowed.connect(lambda doc, names: self.pipeline.load(doc, names))
        self.overview.load_declined.connect(self.pipeline.decline)
        self.overview.opcode_requested.connect(self.show_opcode)
        self.overview.full_check_requested.connect(self.pipeline.full_check)
        self.pickle = PicklePane(self.runner)
        self.tensors = TensorsPane()
        self.integrity = IntegrityPane(self.runner, self.pipeline)
        self.tabs.addTab(self.overview, "Overview")
        self.tabs.addTab(self.pickle, "Pickle")
        self.tabs.addTab(self.tensors, "Tensors")
        self.tabs.addTab(self.integrity, "Integrity")
        for factory, title in ((self._make_gpu_pane, "GPU"),
                               (self._make_consistency_pane, "Consistency")):
            lazy = LazyPane(factory)
            lazy.built.connect(self.drops.route)
            self.tabs.addTab(lazy, title)
        self.drops.route()

    def show_opcode(self, member: str | None, offset: int) -> None:
        """Switch to the Pickle pane at the opcode the scan found at `offset` in `member`."""
        self.tabs.setCurrentWidget(self.pickle)
        self.pickle.show_opcode(member, offset)

    def _make_gpu_pane(self) -> QWidget:
        from inspector.gui.panes.gpu_pane import GpuPane

        self.gpu = GpuPane(runner=self.runner)
        return self.gpu

    def _make_consistency_pane(self) -> QWidget:
        from inspector.gui.panes.consistency_pane import ConsistencyPane

        pane = ConsistencyPane(runner=self.runner,
                               telemetry=lambda: self.gpu.store if self.gpu else None)
        if self.current is not None:
            pane.set_file(str(self.current.path), self.current.verdict)
        self.consistency = pane
        return pane

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.stage_label = QLabel("Ready")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(260)
        self.progress.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the running job and its sandbox worker (Esc)")
        self.cancel_button.clicked.connect(self.cancel_jobs)
        self._progress_state = ("", 0, 0)
        self._progress_timer = QTimer(self)
        self._progress_timer.setSingleShot(True)
        self._progress_timer.setInterval(PROGRESS_MS)
        self._progress_timer.timeout.connect(self._apply_progress)
        self.report_button = QPushButton("Open report")
        self.report_button.setToolTip("Open the report just written")
        self.report_button.clicked.connect(self.open_report)
        self.report_path: Path | None = None
        bar.addWidget(self.stage_label, 1)
        bar.addPermanentWidget(self.report_button)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.cancel_button)
        self.progress.hide()
        self.cancel_button.hide()
        self.report_button.hide()

    # --- documents ---------------------------------------------------------------------

    @property
    def current(self) -> FileDocument | None:
        """The selected document."""
        row = self.file_list.currentRow()
        return self.docs[row] if 0 <= row < len(self.docs) else None

    def open_paths(self, paths: list[str] | list[Path]) -> list[FileDocument]:
        """Open files and folders (recursively); returns the newly opened documents. A
        training run's folder (or journal) opens in the Run pane instead."""
        # The run pane's module brings pyqtgraph (0.2 s): only a run's path needs it.
        from inspector.run.journal import is_run_path

        runs = [p for p in paths if is_run_path(p)]
        if runs:
            self.open_run(runs[-1])
            paths = [p for p in paths if p not in runs]
        listing = open_list(paths)
        files = listing.files
        if files or listing.folders:
            self.build_panes()
        for root, entries in listing.folders:
            self._list_folder(root, entries)
        missing = [str(p) for p in paths if not Path(p).exists()]
        if missing:
            self.statusBar().showMessage(f"Not found: {', '.join(missing)}", 8000)
        opened: list[FileDocument] = []
        for found in files:
            path = found.path.absolute()  # the user's path, not a link's target
            existing = next((d for d in self.docs if d.path == path), None)
            if existing is not None:
                self._select_only(self.docs.index(existing))
                continue
            doc = FileDocument(path, self, in_folder=found.in_folder)
            self.docs.append(doc)
            item = QListWidgetItem(doc.name)
            self.file_list.addItem(item)
            self._relabel()
            doc.changed.connect(lambda d=doc: self._refresh_item(d))
            self._refresh_item(doc)
            opened.append(doc)
            self.pipeline.open(doc)
        for p in paths:
            if Path(p).exists():
                appmod.add_recent_file(str(Path(p).resolve()))
        if opened:
            self.stack.setCurrentWidget(self.splitter)
            self._select_only(self.docs.index(opened[0]))
        update_actions(self)
        return opened

    def _list_folder(self, root: Path, entries: list[Found]) -> None:
        """Give every entry of the opened folder `root` its line in the Folder pane: a
        document's once scanned (`_refresh_item`), a folder the walk did not enter at once."""
        from inspector.scan.engine import scan_found

        if self.folder_pane is None:
            from inspector.gui.folders.entries_pane import FolderPane

            self.folder_pane = FolderPane()
            self.tabs.addTab(self.folder_pane, "Folder")
        self.folder_pane.show_folder(root, [found.path.absolute() for found in entries])
        for found in entries:
            if found.unwalked is not None:  # its line is the walk's reason: nothing to read
                self.folder_pane.set_result(found.path.absolute(), scan_found(found))

    def open_run(self, path: str | Path) -> QWidget:
        """Show a training run's ledgered checkpoints in the Run pane and check them."""
        self.build_panes()
        if self.run_pane is None:
            from inspector.gui.panes.run_pane import RunPane

            self.run_pane = RunPane(self.runner)
            self.run_pane.open_requested.connect(self._open_from_run)
            self.run_pane.checked.connect(lambda: update_actions(self))
            self.tabs.addTab(self.run_pane, "Run")
        self.stack.setCurrentWidget(self.splitter)
        self.tabs.setCurrentWidget(self.run_pane)
        self.run_pane.open_run(path)
        appmod.add_recent_file(str(Path(path).resolve()))
        return self.run_pane

    def _open_from_run(self, path: str) -> None:
        self.open_paths([path])
        self.tabs.setCurrentWidget(self.overview)

    def _select_only(self, row: int) -> None:
        """Make `row` current and the only selected row. The list takes several rows, and
        there a plain setCurrentRow follows the event being handled (a drop keeps the old
        selection), so the command is explicit."""
        self.file_list.setCurrentRow(row, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def close_current(self) -> None:
        """Close the selected document; cancel its jobs first."""
        if self.current is not None:
            self.close_document(self.current)

    def _skip_document(self, doc: FileDocument) -> None:
        """A folder's file that is no checkpoint leaves the list, as `scan DIR` skips it."""
        if doc in self.docs:
            self.close_document(doc)
            self.statusBar().showMessage(f"Skipped {doc.name}: not a checkpoint", 8000)

    def close_document(self, doc: FileDocument) -> None:
        """Close `doc`; its jobs are discarded first (no late result reaches it)."""
        row = self.docs.index(doc)
        self.pipeline.close(doc)
        self.docs.pop(row)
        self.file_list.takeItem(row)
        if not self.docs:
            self._show_document(None)
            self.stack.setCurrentWidget(self.empty)
        update_actions(self)

    def _relabel(self) -> None:
        """Give documents with the same file name (two models' `gpt2` folders) the folders
        that tell them apart, and redraw the rows whose text changed."""
        labels = distinct_names([d.path for d in self.docs])
        for doc, label in zip(self.docs, labels, strict=True):
            wanted = label if label != doc.path.name else None
            if wanted != doc.label:
                doc.label = wanted
                self._refresh_item(doc)

    def _refresh_item(self, doc: FileDocument) -> None:
        if doc not in self.docs:
            return
        item = self.file_list.item(self.docs.index(doc))
        item.setIcon(document_icon(doc))
        coverage = coverage_text(doc.result)
        item.setText(list_text(doc))
        words = document_words(doc)
        item.setToolTip(f"{doc.path}\n{state_tooltip(doc)}\n{words} — {doc.state_words()}"
                        + (f"\n{coverage}" if coverage else ""))
        item.setData(Qt.ItemDataRole.AccessibleTextRole, f"{doc.name}, {words}")
        if self.consistency is not None:
            self.consistency.set_verdict(str(doc.path), doc.verdict)
        if self.folder_pane is not None and doc.scan is not None:
            self.folder_pane.set_result(doc.path, doc.scan)
        if doc is self.current:
            update_actions(self)

    def _select_row(self, row: int) -> None:
        self._show_document(self.docs[row] if 0 <= row < len(self.docs) else None)

    def _show_document(self, doc: FileDocument | None) -> None:
        if self.panes_built:
            self.overview.set_document(doc)
            self.pickle.set_document(doc)
            self.tensors.set_document(doc)
            self.integrity.set_document(doc)
            if self.consistency is not None and doc is not None:
                self.consistency.set_file(str(doc.path), doc.verdict)
        title = appmod.APPLICATION + (f" — {doc.name}" if doc else "")
        self.setWindowTitle(title)
        update_actions(self)

    # --- commands ----------------------------------------------------------------------

    def open_dialog(self) -> None:
        """Ask for files to open."""
        start = str(appmod.settings().value("last_dir", str(Path.home())))
        paths, _ = QFileDialog.getOpenFileNames(self, "Open checkpoints", start, FILE_FILTER)
        if paths:
            appmod.settings().setValue("last_dir", str(Path(paths[0]).parent))
            self.open_paths(paths)

    def open_folder_dialog(self) -> None:
        """Ask for a folder of shards to open."""
        start = str(appmod.settings().value("last_dir", str(Path.home())))
        folder = QFileDialog.getExistingDirectory(self, "Open a folder of shards", start)
        if folder:
            self.open_paths([folder])

    def open_samples(self) -> list[FileDocument]:
        """Write the built-in samples to the cache folder and open both."""
        from inspector.core.samples import write_samples

        try:
            samples = write_samples()
        except OSError as exc:
            QMessageBox.warning(self, "Samples", f"Could not write the samples: {exc}")
            return []
        return self.open_paths([samples.benign, samples.malicious])

    def convert_current(self) -> None:
        """One click: convert the selected file next to itself and verify the result."""
        doc = self.current
        if doc is None:
            return
        from inspector.gui.dialogs.convert_dialog import ConvertDialog

        dialog = ConvertDialog(doc, self.pipeline, self)
        dialog.open_result.connect(lambda p: self.open_paths([p]))
        dialog.show()
        dialog.start()

    def export_report(self) -> Job | None:
        """Ask what goes in and where, then write the report (format from the extension)."""
        from inspector.gui.dialogs.report_export import LIVE, REPORT_FILTER, choose_scope

        run = self.run_pane.summary() if self.run_pane is not None else None
        if not self.docs and run is None:
            return None
        selected = [self.docs[i.row()] for i in self.file_list.selectedIndexes()
                    if 0 <= i.row() < len(self.docs)]
        store = getattr(self.gpu, "store", None)
        label = getattr(self.gpu, "source_label", "")
        recorded = ((LIVE if label in ("", "live") else label)
                    if store is not None and store.gpus() else None)
        scope = choose_scope(self, self.current, selected, self.docs, recorded,
                             run.journal if run is not None else None)
        if scope is None or not (scope.docs or scope.run):
            return None
        first = scope.docs[0].path if scope.docs else Path(run.journal).parent / "run"
        default = str(first.with_name(first.stem + "-report.html"))
        path, _ = QFileDialog.getSaveFileName(self, "Export report", default, REPORT_FILTER)
        if not path:
            return None
        return self.write_report(Path(path), scope.docs, telemetry=scope.telemetry,
                                 runs=scope.run)

    def write_report(self, path: Path, docs: list[FileDocument] | None = None,
                     telemetry: bool = True, runs: bool = True) -> Job:
        """Write the report of `docs` (every open file by default), with the GPU telemetry and
        the checked run in the Run pane when there are any and they are wanted, to `path` in
        a job."""
        from inspector.gui.dialogs.report_export import evidence, export_fn

        run = self.run_pane.summary() if self.run_pane is not None and runs else None
        consistency = getattr(self.consistency, "result", None)
        source = getattr(self.consistency, "file_edit", None)
        store = getattr(self.gpu, "store", None) if telemetry else None
        label = getattr(self.gpu, "source_label", "")
        session = evidence(
            self.docs if docs is None else docs, consistency,
            source.text() if source is not None else None,
            telemetry=store if store is not None and store.gpus() else None,
            telemetry_source="nvml" if label in ("", "live") else label,
            runs=[run] if run is not None else [])
        job = Job("report", export_fn(session, path), self)
        job.finished.connect(self._report_written)
        return self.pipeline.run_heavy(job)

    def _report_written(self, path: object) -> None:
        """Confirm the export in the window, with a button that opens the report."""
        self.report_path = Path(str(path))
        self.report_button.setToolTip(f"Open {self.report_path}")
        self.report_button.show()
        self.statusBar().showMessage(f"Report written: {self.report_path}", 30000)

    def open_report(self) -> bool:
        """Open the last written report in the desktop's viewer for its type."""
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        if self.report_path is None:
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.report_path)))

    def cancel_jobs(self) -> None:
        """Stop every running job and its sandbox worker."""
        self.pipeline.cancel_all()
        self.stage_label.setText("Cancelling…")

    # --- progress ----------------------------------------------------------------------

    def _job_started(self, job: Job) -> None:
        self.stage_label.setText(job.name.capitalize() + "…")
        job.failed.connect(lambda msg, j=job: self.statusBar().showMessage(
            f"{j.name}: {msg}", 10000))

    def _show_progress(self, stage: str, done: int, total: int) -> None:
        # QProgressBar.setValue repaints the whole window synchronously; apply the latest
        # state a few times a second instead of on every event.
        self._progress_state = (stage, done, total)
        if not self._progress_timer.isActive():
            self._progress_timer.start()

    def _apply_progress(self) -> None:
        stage, done, total = self._progress_state
        self.stage_label.setText(stage)
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(done, total) / total))
            self.progress.setFormat(f"{100 * done / total:.0f} %")
        else:
            self.progress.setRange(0, 0)

    def _set_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.act_cancel.setEnabled(busy)
        if busy:
            self.progress.setRange(0, 0)
        else:
            self._progress_timer.stop()
            self.stage_label.setText("Ready")
            if any(d.tensors for d in self.docs):
                from inspector.gui.panes.tensors_pane import warm_up_charts

                warm_up_charts()
        update_actions(self)

    # --- settings ----------------------------------------------------------------------

    def _restore_settings(self) -> None:
        s = appmod.settings()
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(*default_size(self.screen().availableGeometry().size()))
        state = s.value("window/state")
        if state is not None:
            self.restoreState(state)
        splitter = s.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Save geometry, stop every job and worker, then close."""
        s = appmod.settings()
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/splitter", self.splitter.saveState())
        if self.gpu is not None:
            self.gpu.stop()
        self.pipeline.cancel_all()
        self.runner.shutdown()
        if self.warm is not None:
            self.warm.stop()
        super().closeEvent(event)

