"""The report as PDF through Qt's own PDF writer (QTextDocument + QPdfWriter; works offscreen)."""

from __future__ import annotations

import os

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF, QUrl
from PySide6.QtGui import QImage, QPageLayout, QPageSize, QPdfWriter, QTextDocument

from inspector.core.atomic import write_bytes_atomic
from inspector.report import charts
from inspector.report.model import Report
from inspector.report.render_html import STYLE, report_body

RESOLUTION_DPI = 300


def render_pdf(report: Report) -> bytes:
    """Lay the report out on A4 pages and return the PDF bytes."""
    charts.ensure_gui()
    doc = QTextDocument()

    def register(name: str, png: bytes) -> str:
        url = f"report-image:{name}.png"
        doc.addResource(QTextDocument.ResourceType.ImageResource, QUrl(url), QImage.fromData(png))
        return url

    body = report_body(report, register)
    doc.setHtml(f"<html><head><style>{STYLE}</style></head><body>{body}</body></html>")
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setResolution(RESOLUTION_DPI)
    writer.setPageLayout(QPageLayout(QPageSize(QPageSize.PageSizeId.A4),
                                     QPageLayout.Orientation.Portrait,
                                     QMarginsF(15, 15, 15, 15), QPageLayout.Unit.Millimeter))
    writer.setTitle(f"Checkpoint verification report: {report.verdict}")
    writer.setCreator(f"{report.tool.name} {report.tool.version}")
    doc.print_(writer)
    del writer  # the PDF trailer is written when the writer goes away
    buffer.close()
    return bytes(data.data())


def write_pdf(report: Report, path: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Render and write atomically."""
    write_bytes_atomic(path, render_pdf(report), overwrite=overwrite)
