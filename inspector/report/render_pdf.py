"""The report as PDF through Qt's own PDF writer (QTextDocument + QPdfWriter; works offscreen).

Qt's HTML reader knows no `page-break-after: avoid` nor `break-inside: avoid`, so a heading can
end a page with its text on the next and a table row can start on one page and end on the next;
`keep_together` lays the document out on the PDF's pages and moves every such heading
and every table shorter than a page that such a row belongs to (`split_tables`) to the top of
the next page, the first in the document first."""

from __future__ import annotations

import os

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF, QRectF, QSizeF, Qt, QUrl
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QFont,
    QImage,
    QPageLayout,
    QPageSize,
    QPainter,
    QPdfWriter,
    QTextBlock,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextTable,
)

from inspector.core.atomic import write_bytes_atomic
from inspector.report import charts
from inspector.report.html_cells import WBR
from inspector.report.model import Report
from inspector.report.render_html import STYLE, report_body

RESOLUTION_DPI = 300
LAYOUT_DPI = 96
"""The resolution QTextDocument lays pages out at; printing scales to the writer's."""
PAGE = QPageLayout(QPageSize(QPageSize.PageSizeId.A4), QPageLayout.Orientation.Portrait,
                   QMarginsF(15, 15, 15, 15), QPageLayout.Unit.Millimeter)
MAX_MOVES = 500


FOOTER = 24
"""Layout pixels at the foot of each page kept for its number."""


def page_size() -> QSizeF:
    """The part of an A4 page the text is laid out on, in the document's layout pixels: the
    printable part less the footer that holds the page number."""
    rect = PAGE.paintRect(QPageLayout.Unit.Inch)
    return QSizeF(rect.width() * LAYOUT_DPI, rect.height() * LAYOUT_DPI - FOOTER)


def orphan_headings(doc: QTextDocument) -> list[QTextBlock]:
    """Headings that are the last thing on their page: the text after them (`_text_after`)
    starts a later one."""
    layout, height = doc.documentLayout(), doc.pageSize().height()
    found = []
    block = doc.begin()
    while block.isValid():
        after = block.next()
        if block.blockFormat().headingLevel() and after.isValid():
            page = int(layout.blockBoundingRect(block).top() // height)
            if int(layout.blockBoundingRect(_text_after(after)).top() // height) > page:
                found.append(block)
        block = after
    return found


def _text_after(block: QTextBlock) -> QTextBlock:
    """The first block of text after a heading: past any heading that follows at once, so a
    file's heading and its first section's heading go to the next page together. (A table's
    column names are a `<thead>`, which Qt keeps with the first row under them.)"""
    while block.blockFormat().headingLevel() and block.next().isValid():
        block = block.next()
    return block


def keep_headings_with_text(doc: QTextDocument) -> int:
    """Start each heading that would end a page on the next one; how many were moved."""
    moved = 0
    while moved < MAX_MOVES and (orphans := orphan_headings(doc)):
        _break_before(orphans[0])  # the pages after it are laid out again
        moved += 1
    return moved


def split_tables(doc: QTextDocument) -> list[QTextTable]:
    """Tables shorter than a page with a row that starts on one page and ends on the next
    (Qt splits a row between pages line by line)."""
    layout, height = doc.documentLayout(), doc.pageSize().height()
    found, seen = [], set()
    block = doc.begin()
    while block.isValid():
        table = QTextCursor(block).currentTable()
        block = block.next()
        if table is None or table.firstPosition() in seen:
            continue
        seen.add(table.firstPosition())
        box = layout.frameBoundingRect(table)
        if box.height() < height and any(_row_split(layout, height, table, row)
                                          for row in range(table.rows())):
            found.append(table)
    return found


def _row_split(layout: QAbstractTextDocumentLayout, height: float, table: QTextTable,
               row: int) -> bool:
    """Whether a table row's text starts on one page and ends on another."""
    cells = [table.cellAt(row, column) for column in range(table.columns())]
    top = min(layout.blockBoundingRect(c.firstCursorPosition().block()).top() for c in cells)
    bottom = max(layout.blockBoundingRect(c.lastCursorPosition().block()).bottom() for c in cells)
    return int(top // height) != int((bottom - 1) // height)


def _break_before(block: QTextBlock) -> None:
    """Start `block` on a new page."""
    fmt = block.blockFormat()
    fmt.setPageBreakPolicy(QTextFormat.PageBreakFlag.PageBreak_AlwaysBefore)
    QTextCursor(block).setBlockFormat(fmt)


def _move_table(doc: QTextDocument, table: QTextTable) -> None:
    """Start a table on a new page, with the headings right above it (a break set on both
    would leave the headings alone; a break on a row's own cells makes Qt skip a page)."""
    before, heading = doc.findBlock(table.firstPosition() - 1), None
    while before.isValid() and before.blockFormat().headingLevel():
        heading, before = before, before.previous()
    if heading is not None:
        _break_before(heading)
        return
    fmt = table.format()
    fmt.setPageBreakPolicy(QTextFormat.PageBreakFlag.PageBreak_AlwaysBefore)
    table.setFormat(fmt)


def keep_together(doc: QTextDocument) -> int:
    """Headings with their text and short tables whole: the first problem in the document is
    moved first, so no later move is made on a layout an earlier one then changes (that left
    near-empty pages); how many moves."""
    moved = 0
    while moved < MAX_MOVES:
        heading = next(iter(orphan_headings(doc)), None)
        table = next(iter(split_tables(doc)), None)
        if heading is None and table is None:
            break
        if table is None or (heading is not None and heading.position() < table.firstPosition()):
            _break_before(heading)
        else:
            _move_table(doc, table)
        moved += 1
    return moved


QT_STYLE = STYLE + "body { margin: 0; padding: 0; max-width: none; }\n"
"""The report's style for Qt's rich-text engine, which applies the body's margin and padding
(a browser's centred column) to headings and paragraphs but not to tables: the PDF's headings
stood 37 px right of the tables under them. The page's own margins frame it instead."""


def qt_html(body: str) -> str:
    """A report body as the document Qt lays out: the PDF's pages and their pictures."""
    return f"<html><head><style>{QT_STYLE}</style></head><body>{body}</body></html>"


def render_pdf(report: Report) -> bytes:
    """Lay the report out on A4 pages and return the PDF bytes."""
    charts.ensure_gui()
    doc = QTextDocument()

    def register(name: str, png: bytes) -> str:
        url = f"report-image:{name}.png"
        doc.addResource(QTextDocument.ResourceType.ImageResource, QUrl(url), QImage.fromData(png))
        return url

    # Qt's HTML reader drops <wbr>; a zero-width space is the same break opportunity there
    body = report_body(report, register).replace(WBR, "\u200b")
    doc.setHtml(qt_html(body))
    doc.setPageSize(page_size())
    keep_together(doc)
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setResolution(RESOLUTION_DPI)
    writer.setPageLayout(PAGE)
    writer.setTitle(f"Checkpoint verification report: {report.verdict}")
    writer.setCreator(f"{report.tool.name} {report.tool.version}")
    print_pages(doc, writer)
    del writer  # the PDF trailer is written when the writer goes away
    buffer.close()
    return bytes(data.data())


def print_pages(doc: QTextDocument, writer: QPdfWriter) -> None:
    """Each page of the laid-out document, then its number at its foot. (`QTextDocument.print_`
    numbers pages only when it lays the document out again itself, which would undo
    `keep_headings_with_text`.)"""
    size, pages = doc.pageSize(), doc.pageCount()
    painter = QPainter(writer)
    painter.scale(writer.resolution() / LAYOUT_DPI, writer.resolution() / LAYOUT_DPI)
    context = QAbstractTextDocumentLayout.PaintContext()
    footer_font = QFont(doc.defaultFont())
    footer_font.setPixelSize(11)  # layout pixels, as the painter is scaled to them
    for n in range(pages):
        if n:
            writer.newPage()
        top = n * size.height()
        painter.save()
        painter.translate(0, -top)
        context.clip = QRectF(0, top, size.width(), size.height())
        painter.setClipRect(context.clip)
        doc.documentLayout().draw(painter, context)
        painter.restore()
        painter.setFont(footer_font)
        painter.drawText(QRectF(0, size.height(), size.width(), FOOTER),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
                         f"{n + 1} / {pages}")
    painter.end()


def write_pdf(report: Report, path: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Render and write atomically."""
    write_bytes_atomic(path, render_pdf(report), overwrite=overwrite)
