"""Ask which node's GPU history to load from a Prometheus server, and over which range."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from inspector.core.errors import CodedError
from inspector.gpu.prom_reader import RangeQuery, make_query


class PrometheusDialog(QDialog):
    """A form for `prom_reader.make_query`; `query` holds the accepted RangeQuery."""

    def __init__(self, parent: QWidget | None = None, url: str = "http://127.0.0.1:9090") -> None:
        super().__init__(parent)
        self.setWindowTitle("GPU history from Prometheus")
        self.query: RangeQuery | None = None
        self.url = QLineEdit(url)
        self.node = QLineEdit()
        self.node.setPlaceholderText("the Hostname label; empty when the server has one node")
        self.start = QLineEdit("1h")
        self.end = QLineEdit("now")
        for edit, name in ((self.url, "Prometheus URL"), (self.node, "Node"),
                           (self.start, "From"), (self.end, "To")):
            edit.setAccessibleName(name)
        form = QFormLayout()
        form.addRow("Prometheus URL", self.url)
        form.addRow("Node", self.node)
        form.addRow("From", self.start)
        form.addRow("To", self.end)
        hint = QLabel("Times: now, an age (30m, 2h, 7d), Unix seconds or an ISO time. Reads "
                      "dcgm-exporter's series or ckpt-inspector telemetry --serve's.")
        hint.setWordWrap(True)
        self.error = QLabel("")
        self.error.setObjectName("prometheusError")
        self.error.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Load")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def accept(self) -> None:
        """Close only when the fields make a query; otherwise say why in one line."""
        try:
            self.query = make_query(self.url.text().strip(), self.node.text().strip() or None,
                                    self.start.text(), self.end.text())
        except CodedError as exc:
            self.error.setText(exc.message)
            return
        super().accept()
