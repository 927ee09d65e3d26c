"""The report a person would send, looked at (issue 37): a four-part report (a NaN-damaged
file, a dangerous pickle, a sharded folder converted to safetensors, the shipped telemetry log)
is rendered as the app and `report` write it, and its pages are saved as pictures at 1280x720
and 1920x1080 under tests/artifacts/screens (report-html-*, report-pdf-*) for a person to look
at. What a picture can hide is checked in the PDF's own text: the conversion, the files and
the GPUs are there, in words (no raw key, no Python value), every page is numbered, the
summary still links to each file's appendix, no heading ends a page and no table shorter than
a page has a row running from one page onto the next.

The HTML is drawn by Qt's rich-text engine from the report's own body (the PDF's path;
there is no browser engine here); the PDF is the real `render_pdf` output, read back and drawn
page by page by Qt's PDF module. The files are real: torch.save's bytes, a pickle whose payload
runs under the real loader (proved in a child process), a folder converted by `convert DIR`
in the jailed worker, and the project's own sample log."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import factories
import pytest
import torch
from PySide6.QtCore import QPoint, QRectF, QSize, Qt, QUrl
from PySide6.QtGui import QColor, QImage, QPainter, QTextDocument
from PySide6.QtPdf import QPdfDocument
from test_report_words import _sharded_folder

from inspector.cli import main
from inspector.gpu import sample_log
from inspector.gpu.alerts import ingest
from inspector.gpu.smi_csv import read_log
from inspector.gpu.telemetry import TelemetryStore
from inspector.report import build_report
from inspector.report.html_cells import WBR
from inspector.report.model import FileEvidence, SessionEvidence
from inspector.report.render_html import report_body
from inspector.report.render_pdf import (
    keep_together,
    orphan_headings,
    page_size,
    qt_html,
    render_pdf,
    split_tables,
)

pytestmark = pytest.mark.usefixtures("qapp")

SIZES = ((1280, 720), (1920, 1080))
RAW = re.compile(r"\b(True|False|None|[a-z]+_[a-z_]+)\b")
"""A Python value or a snake_case key on a page (file names are taken out first)."""


@pytest.fixture
def report(tmp_path: Path, canary: Path, capsys):
    """The four-part report: NaN file, dangerous file, converted folder, telemetry log."""
    from inspector.sandbox.host.client import inspect_file

    nan = torch.linspace(-1, 1, 64).reshape(8, 8)
    nan[2, 3] = float("nan")
    torch.save({"encoder.weight": nan, "encoder.bias": torch.zeros(8)}, tmp_path / "nan.pt")
    evil = factories.mal_os_system(tmp_path / "evil.pt", canary)
    proof = factories.mal_os_system(tmp_path / "proof.pt", tmp_path / "ran")
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], "
                    "'rb'))", str(proof)], capture_output=True, timeout=60, check=False)
    assert (tmp_path / "ran").exists()  # the payload is real under the plain loader
    folder = _sharded_folder(tmp_path / "tiny-gpt")
    evidence = [FileEvidence(str(p), inspect=inspect_file(p))
                for p in (tmp_path / "nan.pt", evil, folder)]  # the folder as it came
    assert main(["convert", str(folder), "--json"]) == 0
    evidence[-1].conversion = json.loads(capsys.readouterr().out)
    store = TelemetryStore(capacity=2000)
    ingest(store, read_log(sample_log.path()).samples)
    return build_report(SessionEvidence(evidence, telemetry=store,
                                        telemetry_source=sample_log.path().name))


def data_links(pdf: Path) -> int:
    """How many link annotations the PDF holds."""
    return pdf.read_bytes().count(b"/Link")


def _save(image: QImage, path: Path) -> None:
    assert image.save(str(path)), path


def _ink(image: QImage) -> bool:
    """Whether anything but the background was drawn."""
    small = image.scaled(64, 36, Qt.AspectRatioMode.IgnoreAspectRatio,
                         Qt.TransformationMode.SmoothTransformation)  # thin text averaged in
    first = small.pixelColor(0, 0)
    return any(small.pixelColor(x, y) != first for x in range(64) for y in range(36))


def html_screens(report, shots: Path) -> list[Path]:
    """The report's body laid out as one long page at each width, cut into screens: the
    first, and the one where the conversion and the telemetry begin."""
    saved = []
    for width, height in SIZES:
        doc = QTextDocument()

        def register(name: str, png: bytes, doc=doc) -> str:
            url = f"report-image:{name}.png"
            doc.addResource(QTextDocument.ResourceType.ImageResource, QUrl(url),
                            QImage.fromData(png))
            return url

        body = report_body(report, register).replace(WBR, "\u200b")
        doc.setHtml(qt_html(body))
        doc.setTextWidth(width - 48)
        tops = {"top": 0.0}
        for name, words in (("conversion", "Conversion to safetensors"),
                            ("telemetry", "GPU telemetry")):
            found = _find_all(doc, words)
            tops[name] = max(0.0, found[-1] - 24) if found else None
        assert tops["conversion"] is not None and tops["telemetry"] is not None, tops
        for name, top in tops.items():
            image = QImage(width, height, QImage.Format.Format_RGB32)
            image.fill(QColor("white"))
            painter = QPainter(image)
            painter.translate(24, -top)
            doc.drawContents(painter, QRectF(0, top, width, height))
            painter.end()
            assert _ink(image)
            path = shots / f"report-html-{name}-{width}x{height}.png"
            _save(image, path)
            saved.append(path)
    return saved


def _find_all(doc: QTextDocument, words: str) -> list[float]:
    """The top of each block holding `words`, in layout pixels."""
    layout, tops, cursor = doc.documentLayout(), [], doc.find(words)
    while not cursor.isNull():
        tops.append(layout.blockBoundingRect(cursor.block()).top())
        cursor = doc.find(words, cursor)
    return tops


def pdf_screens(pdf: QPdfDocument, shots: Path) -> list[Path]:
    """Two pages side by side per screen, each page as tall as the screen."""
    saved = []
    pages = pdf.pageCount()
    for old in shots.glob("report-pdf-pages-*.png"):  # an earlier, longer report's pages
        old.unlink()
    for width, height in SIZES:
        point = pdf.pagePointSize(0)
        page_w = int(height * point.width() / point.height())
        for first in range(0, pages, 2):
            image = QImage(width, height, QImage.Format.Format_RGB32)
            image.fill(QColor("#5f6368"))
            painter = QPainter(image)
            for n in range(first, min(first + 2, pages)):
                page = pdf.render(n, QSize(page_w, height))
                assert _ink(page), n
                x = width // 2 - page_w - 4 if n == first else width // 2 + 4
                painter.fillRect(x, 0, page_w, height, QColor("white"))  # pages are drawn
                painter.drawImage(QPoint(x, 0), page)  # on a transparent background
            painter.end()
            path = shots / f"report-pdf-pages-{first + 1}-{width}x{height}.png"
            _save(image, path)
            saved.append(path)
    return saved


def test_the_four_part_report_renders_in_words_on_pages_a_person_can_read(report, artifacts,
                                                                          tmp_path):
    shots = artifacts / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    written = shots / "report-four-parts.pdf"
    written.write_bytes(render_pdf(report))
    pdf = QPdfDocument()
    assert pdf.load(str(written)) == QPdfDocument.Error.None_
    assert pdf.status() == QPdfDocument.Status.Ready and pdf.pageCount() >= 2
    text = "\n".join(pdf.getAllText(n).text() for n in range(pdf.pageCount()))
    # a name that wraps after a hyphen reads back as U+FFFE and a line break
    flat = re.sub(r"\s*\n\s*", " ", text.replace("\ufffe", "-").replace("\r", ""))
    unwrapped = flat.replace("- ", "-").replace(". safetensors", ".safetensors")
    for words in ("nan.pt", "evil.pt", "tiny-gpt", "Index written", "GPU telemetry",
                  "model-00001-of-00002.safetensors", "1 of 3 files",
                  "Weights corrupted", "Dangerous", "yes, checked here"):
        assert words in unwrapped, words
    pages = pdf.pageCount()
    assert all(f"{n} / {pages}" in text for n in range(1, pages + 1))  # every page numbered
    assert data_links(written) >= len(report.files)  # the summary's links to each appendix
    conversion = flat.rsplit("Conversion to safetensors", 1)[1].split("Repeat-inference")[0]
    assert "Index written" in conversion
    shown = re.sub(r"\S*(pytorch_model|/tmp|test_the)\S*", "", conversion)
    assert not RAW.findall(shown), sorted(set(RAW.findall(shown)))
    # the PDF's own layout keeps every heading with its text
    doc = QTextDocument()
    doc.setHtml(qt_html(report_body(report, lambda name, png: "")))
    doc.setPageSize(page_size())
    keep_together(doc)
    assert orphan_headings(doc) == [] and split_tables(doc) == []
    # headings start where the tables under them start (Qt indented them by the body's margin)
    block, indented = doc.begin(), []
    while block.isValid():
        if block.blockFormat().headingLevel() and block.blockFormat().leftMargin():
            indented.append(block.text())
        block = block.next()
    assert indented == []
    saved = html_screens(report, shots) + pdf_screens(pdf, shots)
    assert len(saved) >= 2 * 3 + 2
