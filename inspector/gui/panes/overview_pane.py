"""Overview: two badges (code safety, weights health), the file's identity, each finding in
plain words. Damaged data is named as damage; the allow-list question is asked only when the
file imports globals to allow."""

from __future__ import annotations

import html
from enum import StrEnum

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from inspector.checkpoint.contents import Contents, summarize, training_summary
from inspector.checkpoint.health import Health
from inspector.checkpoint.results import InspectResult
from inspector.core.termtext import counted
from inspector.core.vocabulary import DocumentState, HealthSeverity, Severity, Verdict
from inspector.formats import read_without_pickle
from inspector.gui.document import FileDocument
from inspector.gui.explain import (
    INDICATORS_DISABLED_TIP,
    INDICATORS_LABEL,
    INDICATORS_TIP,
    Explanation,
    code_safety_explanation,
    finding_explanation,
    health_explanation,
    not_judged_text,
    verdict_explanation,
)
from inspector.gui.verdict_style import (
    CORRUPT,
    Style,
    badge_icon,
    code_safety_style,
    health_style,
    verdict_style,
    weights_style,
)
from inspector.gui.widgets.code_view import CodeDialog, code_summary
from inspector.gui.widgets.evidence import (
    EvidenceBrowser,
    actionable_message,
    finding_call_html,
    import_html,
    linked_location,
    more_html,
    worst_first,
)
from inspector.gui.widgets.model_summary import ModelSummary
from inspector.integrity.shard_index import has_one_sha256
from inspector.layout.torchscript import CODE_ARCHIVES
from inspector.scan.advice import DAMAGED, INTEGRITY_CODES, integrity_findings
from inspector.scan.indicators import FLAGGED, flagged_globals, import_label, indicators_text
from inspector.shards.inspect import coverage_text


def human_size(n: int | None) -> str:
    """Bytes as a short human string with the exact count."""
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            short = f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
            return f"{short} ({n:,} bytes)" if unit != "B" else short
        value /= 1024
    return str(n)


class VerdictBanner(QFrame):
    """One badge: a caption, colour, icon and words; never colour alone."""

    def __init__(self, caption: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = caption
        self.setObjectName("verdictBanner")
        self.icon = QLabel()
        self.caption_label = QLabel(caption.upper())
        small = QFont(self.caption_label.font())
        small.setBold(True)
        small.setPointSizeF(small.pointSizeF() * 0.8)
        self.caption_label.setFont(small)
        self.title = QLabel()
        font = QFont(self.title.font())
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        self.title.setFont(font)
        self.subtitle = QLabel()
        self.subtitle.setWordWrap(True)
        text = QVBoxLayout()
        text.addWidget(self.caption_label)
        text.addWidget(self.title)
        text.addWidget(self.subtitle)
        row = QHBoxLayout(self)
        row.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        row.addLayout(text, 1)
        row.setContentsMargins(16, 12, 16, 12)

    def show_verdict(self, verdict: str | None, detail: str) -> None:
        """Paint the banner for a scan `verdict` (None while scanning)."""
        self.show_style(verdict_style(verdict), verdict_explanation(verdict), detail)

    def show_style(self, style: Style, text: Explanation, detail: str) -> None:
        """Paint the badge in `style` with the explanation's headline and `detail`."""
        self.icon.setPixmap(badge_icon(style.colour, style.glyph).pixmap(44, 44))
        self.title.setText(text.headline)
        self.subtitle.setText(detail)
        self.setStyleSheet(
            f"#verdictBanner {{ background: {style.colour}; border-radius: 6px; }}"
            "#verdictBanner QLabel { color: white; }"
        )
        self.setAccessibleName(f"{self.caption}: {style.word}")


class Row(StrEnum):
    """A row of the Overview's form (its key in `OverviewPane.fields`)."""

    PATH = "path"
    FORMAT = "format"
    SIZE = "size"
    SHARDS = "shards"
    SHA256 = "sha256"
    SANDBOX = "sandbox"
    WEIGHTS_ONLY = "weights_only"
    STATE = "state"
    CHECKED = "checked"
    CONTENTS = "contents"
    ARCHITECTURE = "architecture"
    TRAINING = "training"
    CODE = "code"


ROWS = ((Row.PATH, "File"), (Row.FORMAT, "Format"), (Row.SIZE, "Size"), (Row.SHARDS, "Shards"),
        (Row.SHA256, "SHA-256"), (Row.SANDBOX, "Sandbox"),
        (Row.WEIGHTS_ONLY, "weights_only=True"), (Row.STATE, "Status"),
        (Row.CHECKED, "Checked here"), (Row.CONTENTS, "Contents"),
        (Row.ARCHITECTURE, "Architecture"), (Row.TRAINING, "Training state"), (Row.CODE, "Code"))
"""The form's rows, in order, with their labels."""


def _whose(result: InspectResult | None, text: str) -> str:
    """A field read from the worker's records, saying it is the jailed loader's word where
    its answer was not checked here (as every view marks such a field)."""
    claims = result.claims if result is not None else None
    if text == "—" or result is None or (claims is not None and claims.checked):
        return text
    return f"{text.rstrip('.')} (as reported by the jailed loader)"


class OverviewPane(QWidget):
    """Summary of one document; asks before loading a suspicious file."""

    load_allowed = Signal(object, tuple)  # document, globals to allow
    load_declined = Signal(object)
    opcode_requested = Signal(object, int)  # zip member (None outside a zip), opcode offset
    full_check_requested = Signal(object)  # document: a finding's "full check" link

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc: FileDocument | None = None
        self.code_dialog: CodeDialog | None = None
        self.banner = VerdictBanner("Code safety")
        self.health_banner = VerdictBanner("Weights health")

        self.decision = QFrame()
        self.decision.setObjectName("decisionBox")
        self.decision.setFrameShape(QFrame.Shape.StyledPanel)
        self.decision_text = QLabel()
        self.decision_text.setWordWrap(True)
        self.decision_text.setTextFormat(Qt.TextFormat.RichText)
        self.allow_button = QPushButton("Load with exactly these globals allowed")
        self.decline_button = QPushButton("Don't load")
        self.allow_button.clicked.connect(self._allow)
        self.decline_button.clicked.connect(self._decline)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.decline_button)
        buttons.addWidget(self.allow_button)
        dbox = QVBoxLayout(self.decision)
        dbox.addWidget(self.decision_text)
        dbox.addLayout(buttons)

        self.fields: dict[str, QLabel] = {}
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        for key, label in ROWS:
            value = QLabel("—")
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setWordWrap(True)
            self.fields[key] = value
            if key == Row.SHA256:
                mono = QFont("monospace")
                mono.setStyleHint(QFont.StyleHint.Monospace)
                value.setFont(mono)
                self.copy_button = QToolButton()
                self.copy_button.setText("Copy")
                self.copy_button.setToolTip("Copy the SHA-256 to the clipboard")
                self.copy_button.clicked.connect(self._copy_sha)
                self.indicators_button = QToolButton()
                self.indicators_button.setText(INDICATORS_LABEL)
                self.indicators_button.clicked.connect(self._copy_indicators)
                row = QHBoxLayout()
                row.addWidget(value, 1)
                row.addWidget(self.copy_button)
                row.addWidget(self.indicators_button)
                form.addRow(label + ":", row)
            elif key == "code":
                # the file names and flags come from the archive: never read as markup
                value.setTextFormat(Qt.TextFormat.PlainText)
                self.code_button = QPushButton("Show code…")
                self.code_button.setToolTip("Read the code loading this archive would run")
                self.code_button.clicked.connect(self._show_code)
                row = QHBoxLayout()
                row.addWidget(value, 1)
                row.addWidget(self.code_button, 0, Qt.AlignmentFlag.AlignTop)
                self.code_row = row
                form.addRow(label + ":", row)
            else:
                form.addRow(label + ":", value)
        self.model_summary = ModelSummary(form, self.fields[Row.ARCHITECTURE])
        self.form = form

        self.findings = EvidenceBrowser()
        self.findings.setOpenExternalLinks(False)
        self.findings.opcode_requested.connect(self.opcode_requested)
        self.findings.action_requested.connect(self._action)
        self.findings.setAccessibleName("Findings and advice")

        layout = QVBoxLayout(self)
        badges = QHBoxLayout()
        badges.addWidget(self.banner, 1)
        badges.addWidget(self.health_banner, 1)
        layout.addLayout(badges)
        layout.addWidget(self.decision)
        layout.addLayout(form)
        layout.addWidget(self.findings, 1)
        self.set_document(None)

    def set_document(self, doc: FileDocument | None) -> None:
        """Show `doc` and follow its changes."""
        if self.doc is not None:
            self.doc.changed.disconnect(self.refresh)
        self.doc = doc
        if doc is not None:
            doc.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Redraw from the document."""
        doc = self.doc
        if doc is None:
            self.banner.show_verdict(None, "No file open.")
            self.health_banner.show_style(health_style(None), health_explanation(None, None),
                                          "No file open.")
            self.decision.hide()
            for value in self.fields.values():
                value.setText("—")
            self.model_summary.show(None)
            self.form.setRowVisible(self.code_row, False)
            self.findings.clear()
            return
        status = doc.health.status if doc.health is not None else None
        self.banner.show_style(code_safety_style(doc.scan, status),
                               code_safety_explanation(doc.scan, status),
                               self._banner_detail(doc))
        loaded = _loaded(doc)
        health_text = health_explanation(status, loaded)
        detail = _health_detail(doc.health) or (
            _not_judged(doc) if status is None and loaded is not None else health_text.meaning)
        if status is not None:  # judged from the worker's records: whose word they are
            detail = _whose(doc.result, detail)
        self.health_banner.show_style(weights_style(status, loaded), health_text, detail)
        self.fields[Row.PATH].setText(str(doc.path))
        self.fields[Row.FORMAT].setText(doc.scan.format if doc.scan else "—")
        self.fields[Row.SIZE].setText(human_size(doc.size))
        shards = coverage_text(doc.result)
        self.fields[Row.SHARDS].setText(shards or "—")
        self.form.setRowVisible(self.fields[Row.SHARDS], shards is not None)
        hashing = (doc.state in (DocumentState.QUEUED, DocumentState.LOADING,
                                 DocumentState.BLOCKED, DocumentState.DECLINED,
                                 DocumentState.ERROR)
                   and has_one_sha256(doc.path))
        self.fields[Row.SHA256].setText(doc.sha256 or ("computing…" if hashing else "—"))
        self.copy_button.setEnabled(bool(doc.sha256))
        flagged = doc.verdict in FLAGGED
        self.indicators_button.setEnabled(flagged)
        self.indicators_button.setToolTip(INDICATORS_TIP if flagged else INDICATORS_DISABLED_TIP)
        self.fields[Row.SANDBOX].setText(_sandbox_text(doc))
        self.fields[Row.WEIGHTS_ONLY].setText(_weights_only_text(doc))
        self.fields[Row.STATE].setText(
            doc.state_words() + (f": {doc.message}" if doc.message else "")
        )
        names = doc.globals_to_allow()
        # Without globals to allow there is no question to ask (a damaged record, say).
        needs = doc.state == DocumentState.NEEDS_DECISION and bool(names)
        self.decision.setVisible(needs)
        if needs:
            self.decision_text.setText(
                "<b>Load this file?</b> torch.load(weights_only=True) refuses it because it "
                f"imports {counted(len(names), 'global')} outside its "
                "allowlist:<ul>"
                + "".join(f"<li><code>{html.escape(n)}</code></li>" for n in names)
                + "</ul>Only these will be allowed, for this one load, inside the sandbox. "
                "Allow them only if you trust where the file came from."
            )
        result = doc.result  # the final, typed records: the rows streaming in are not yet
        # the loaded file's answer: what of it was checked here, and whose word the rest is
        checked = _checked_text(doc)
        self.fields[Row.CHECKED].setText(checked[:1].upper() + checked[1:])
        # an answer with an error (refused here, or cut short) has no contents to summarize
        contents = (summarize(result.tensors, result.objects, result.unique_storage)
                    if result is not None and result.loaded else None)
        self.fields[Row.CONTENTS].setText(contents_text(contents) if contents is not None
                                          and contents.tensors else "—")
        self.fields[Row.TRAINING].setText((contents and training_summary(contents)) or "—")
        self.model_summary.show(doc.result, whose=_whose(result, ""))
        for row in (Row.CONTENTS, Row.TRAINING, Row.ARCHITECTURE):
            self.fields[row].setText(_whose(result, self.fields[row].text()))
        code = code_summary(doc.result)
        self.fields[Row.CODE].setText(code or "—")
        self.form.setRowVisible(self.code_row, code is not None)
        self.findings.setHtml(_findings_html(doc))

    def _banner_detail(self, doc: FileDocument) -> str:
        verdict = doc.verdict
        if verdict is None:
            return verdict_explanation(None).meaning
        if verdict == Verdict.DANGEROUS:
            names = [import_label(g.module, g.name) for g in (doc.scan.globals if doc.scan else ())
                     if g.severity == Severity.DANGEROUS]
            if names:
                shown = ", ".join(names[:4]) + (" …" if len(names) > 4 else "")
                return f"Unpickling it would call {shown}. It was not loaded."
        damage = integrity_findings(doc.scan)
        if damage and verdict in (Verdict.SUSPICIOUS, Verdict.ERROR):
            first = damage[0]
            where = f" in {first.member}" if first.member else ""
            more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
            return f"{first.message}{where}{more}."
        if verdict == Verdict.ERROR:
            return (doc.scan.error if doc.scan else None) or verdict_explanation(verdict).meaning
        status = doc.health.status if doc.health is not None else None
        return code_safety_explanation(doc.scan, status).meaning

    def _action(self, name: str) -> None:
        if self.doc is not None and name == "inspect":
            self.full_check_requested.emit(self.doc)

    def _copy_sha(self) -> None:
        if self.doc and self.doc.sha256:
            QGuiApplication.clipboard().setText(self.doc.sha256)

    def _copy_indicators(self) -> None:
        doc = self.doc
        if doc is not None:
            QGuiApplication.clipboard().setText(
                indicators_text(doc.scan, name=doc.name, size=doc.size, sha256=doc.sha256))

    def _show_code(self) -> None:
        if self.doc is not None:
            result = self.doc.result
            self.code_dialog = CodeDialog(self.doc.name, (result.code if result else None) or [],
                                          self)
            self.code_dialog.show()

    def _allow(self) -> None:
        if self.doc is not None:
            self.load_allowed.emit(self.doc, tuple(self.doc.globals_to_allow()))

    def _decline(self) -> None:
        if self.doc is not None:
            self.load_declined.emit(self.doc)


def contents_text(c: Contents) -> str:
    """'128 tensors · 2,147,483,648 elements · 4.0 GiB · bfloat16 4.0 GiB'.

    Elements, not parameters: the count takes in buffers, integer tensors and optimizer state,
    and the Architecture line beside it counts the model's parameters."""
    parts = [counted(c.tensors, "tensor"), counted(c.parameters, "element")]
    if c.unique_parameters is not None and c.unique_parameters != c.parameters:
        parts[-1] += (f" ({c.unique_parameters:,} unique: tied or shared storage counted once, "
                      f"{c.unique_word})")
    parts.append(human_size(c.bytes))
    parts.append(", ".join(f"{dtype} {human_size(n)}" for dtype, n in c.dtypes[:4]))
    return " · ".join(parts)


def _not_judged(doc: FileDocument) -> str:
    """Why the weights were not judged: the check refused the answer, or the state's why."""
    refusal = doc.refusal_words() if doc.refused else None
    return f"Not judged: {refusal}." if refusal else not_judged_text(doc.state, doc.message)


def _checked_text(doc: FileDocument) -> str:
    """The "Checked here" row: what of the loaded answer was checked here, or that the check
    refused it (or the load gave none), so none of it is shown."""
    result = doc.result
    if result is None or not result.sandbox:
        return "—"
    return doc.refusal_words() or result.checked_words


def _loaded(doc: FileDocument) -> bool | None:
    """True once loaded, False when it will not be (refused, declined, failed, cancelled,
    skipped), None while a load may still come (scanning, queued, loading, a question open)."""
    if doc.state == DocumentState.LOADED:
        return True
    if doc.state in (DocumentState.SCANNING, DocumentState.QUEUED, DocumentState.LOADING,
                     DocumentState.NEEDS_DECISION):
        return None
    return False


def _health_detail(health: Health | None) -> str:
    """The first problem (or warning) finding and how many more there are."""
    findings = [f for f in (health.findings if health is not None else ())
                if f.severity in (HealthSeverity.PROBLEM, HealthSeverity.WARNING)]
    if not findings:
        return ""
    first = findings[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"{first.key}: {first.message}{more}"


def _sandbox_text(doc: FileDocument) -> str:
    if doc.sandbox:
        level = doc.sandbox.get("level", "unknown")
        active = ", ".join(str(a).split(":")[0] for a in doc.sandbox.get("active") or [])
        missing = doc.sandbox.get("missing") or {}
        text = f"{level} — {active}" if active else str(level)
        if worker := ((doc.result.timing or {}) if doc.result else {}).get("worker"):
            text += f" ({worker} worker)"  # forked from the warm server, or a cold start
        if missing:
            text += "; not available here: " + "; ".join(f"{k} ({v})" for k, v in missing.items())
        return text
    if doc.state in (DocumentState.BLOCKED, DocumentState.DECLINED):
        return "not started — the file was not loaded"
    if doc.state in (DocumentState.QUEUED, DocumentState.LOADING):
        return "starting…"
    return "—"


def _weights_only_text(doc: FileDocument) -> str:
    if not doc.scan:
        return "—"
    plain = read_without_pickle(doc.scan.format)
    if plain is not None:
        return f"not used: {plain.format} is read without torch.load or pickle"
    if doc.scan.weights_only_ok:
        return "accepts this file"
    if doc.scan.format in CODE_ARCHIVES:
        return "not used: the archive is never unpickled; its weights are read as records"
    names = doc.globals_to_allow()
    if names:
        # as a person writes the import (os.system), with the pickle's alias (posix.system)
        shown = [import_label(module, name)
                 for module, _, name in (n.rpartition(".") for n in names[:5])]
        return f"refuses it: needs {', '.join(shown)}{' …' if len(names) > 5 else ''}"
    return "refuses it"


def _findings_html(doc: FileDocument) -> str:
    scan = doc.scan
    verdict = doc.verdict
    # the worse verdict leads: damaged weights' advice, never "load it" above "do not use"
    expl = code_safety_explanation(doc.scan, doc.health.status if doc.health else None)
    parts = []
    if expl.action:
        parts.append(f"<h3>What to do</h3><p>{html.escape(expl.action)}</p>")
    parts.append(_health_html(doc.health, said=expl.action))
    flagged = flagged_globals(scan)
    if flagged:
        parts.append(f"<h3>Offending imports ({len(flagged)})</h3>")
    fmt = scan.format if scan else None
    parts.extend(import_html(g, verdict, fmt) for g in worst_first(flagged))
    parts.append(more_html(flagged))
    findings = scan.findings if scan else []
    if findings:
        parts.append(f"<h3>Findings ({len(findings)})</h3>")
    for f in worst_first(findings):
        severity = f.severity
        colour = verdict_style(severity).colour if severity in FLAGGED else None
        if f.code in INTEGRITY_CODES:  # corruption has its own word, not a code risk
            severity, colour = DAMAGED, CORRUPT.colour
        meaning, action = finding_explanation(f.code, severity)
        where = linked_location(f.member, f.offset)
        parts.append(
            f"<p>{_severity_label(severity, colour)} "
            f"<code>{html.escape(f.code)}</code> — "
            f"{actionable_message(f.message)}"
            + (f" <i>({where})</i>" if where else "")
            + (f"<br>{html.escape(meaning)}" if meaning else "")
            + (f"<br><b>What to do:</b> {html.escape(action)}" if action else "")
            + "</p>" + finding_call_html(f)
        )
    parts.append(more_html(findings))
    if verdict == Verdict.ERROR and not findings:
        reason = (scan.error if scan else None) or expl.meaning
        parts.append(f"<h3>Findings</h3><p>Not scanned: {html.escape(str(reason))}</p>")
    elif verdict and not findings and not flagged:
        what = ("no structural problem in the header or the tensor offsets"
                if fmt == "safetensors"
                else "no risky import and no structural problem")
        parts.append(f"<h3>Findings</h3><p>None: {what}.</p>")
    return "".join(parts)


def _severity_label(severity: str, colour: str | None) -> str:
    """A finding's severity in bold, in `colour`; with none (info), in the page's text colour,
    which the evidence page takes from the palette each time it reads the page."""
    style = f" style='color:{colour}'" if colour else ""
    return f"<b{style}>{html.escape(severity.upper())}</b>"


def _health_html(health: Health | None, said: str = "") -> str:
    """The weights-health findings, worst first; training state shown as information. Its
    advice is left out when the page's "What to do" (`said`) already gives it."""
    if health is None:
        return ""
    expl = health_explanation(health.status, True)
    if expl.action == said:
        expl = Explanation(expl.headline, expl.meaning, "")
    findings = sorted(health.findings,
                      key=lambda f: ("problem", "warning", "info").index(f.severity or "info"))
    parts = [f"<h3>{html.escape(health_style(health.status).word)}</h3>"  # the badge's word
             f"<p>{html.escape(expl.meaning)}"
             + (f"<br><b>What to do:</b> {html.escape(expl.action)}" if expl.action else "")
             + "</p>"]
    for f in findings[:50]:
        severity = str(f.severity)
        colour = health_style(severity).colour if severity != HealthSeverity.INFO else None
        parts.append(f"<p>{_severity_label(severity, colour)} "
                     f"<code>{html.escape(f.key)}</code> — {html.escape(f.message)}</p>")
    return "".join(parts)
