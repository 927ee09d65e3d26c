"""Report renderers: self-contained HTML with every section, PDF pages that show the verdict."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from inspector.core import envinfo
from inspector.core.atomic import OutputExistsError
from inspector.gpu.alerts import ingest
from inspector.gpu.telemetry import GpuSample, TelemetryStore
from inspector.report import UnknownReportFormat, build_report, export, write_report
from inspector.report.model import FileEvidence, SessionEvidence
from inspector.report.render_html import VERDICT_COLORS, render_html

DANGER_RGB = tuple(int(VERDICT_COLORS["dangerous"][i:i + 2], 16) for i in (1, 3, 5))
"""The dangerous headline's colour: the app's dangerous badge (`core.badges`)."""

pytestmark = pytest.mark.usefixtures("qapp")  # charts and PDFs draw with Qt

FILE_SECTIONS = ("file", "checklist", "scan", "load", "tensors", "verification", "conversion",
                 "consistency")
HOSTILE = "<script>alert(1)</script><img src=http://evil.invalid/x>"


@pytest.fixture
def session(tmp_path: Path) -> SessionEvidence:
    """A dangerous pickle and a loaded benign checkpoint with every optional section filled."""
    evil, good = tmp_path / "evil.pt", tmp_path / "good.pt"
    evil.write_bytes(b"\x80\x02cos\nsystem\nq\x00.")
    good.write_bytes(b"benign bytes")
    evil_scan = {
        "path": str(evil), "format": "pickle", "verdict": "dangerous", "weights_only_ok": False,
        "globals": [{"module": "os", "name": "system", "count": 1, "severity": "dangerous",
                     "reason": "runs programs"}],
        "findings": [{"severity": "dangerous", "code": "dangerous-global",
                      "message": f"os.system runs a shell command {HOSTILE}",
                      "member": None, "offset": 2}],
        "error": None}
    tensors = [{"key": f"layer{i}.weight" if i else HOSTILE, "dtype": dt, "shape": [8, 8],
                "numel": 64, "nbytes": 64 * size, "digest": "cd" * 32, "min": -i, "max": i / 2,
                "mean": 0.0, "std": 1.0, "nan": 2 if i == 3 else 0, "inf": 0, "zeros": 0}
               for i, (dt, size) in enumerate([("float32", 4), ("bfloat16", 2), ("int64", 8),
                                               ("float32", 4)])]
    inspect = {"path": str(good), "size": 12, "sha256": "ef" * 32, "format": "pytorch-zip",
               "scan": {"path": str(good), "format": "pytorch-zip", "verdict": "safe",
                        "weights_only_ok": True, "globals": [], "findings": [], "error": None},
               "sandbox": {"level": "full"}, "digest_algorithm": "sha256", "tensors": tensors,
               "objects": [], "error": None}
    verify = {"ok": True, "files": [{"path": "good.pt", "status": "ok", "expected": "ef" * 32,
                                     "actual": "ef" * 32}], "tensors": [], "errors": []}
    conversion = {"output": str(tmp_path / "good.safetensors"), "sha256": "12" * 32,
                  "verified": True, "tensors_written": 4, "aliases": {}}
    consistency = {"consistent": True, "device": "cpu", "device_label": "CPU", "repeats": 8,
                   "mode": "probe", "tensors": [], "resident_mismatches": [],
                   "iterations": [{"type": "iteration", "max_abs_diff": 0.0} for _ in range(8)]}
    store = TelemetryStore(capacity=500)
    ingest(store, [GpuSample(timestamp=float(t), index=0, name="Test GPU",
                             temperature_gpu=50.0 + t % 7) for t in range(120)])
    return SessionEvidence(
        [FileEvidence(str(evil), scan=evil_scan),
         FileEvidence(str(good), inspect=inspect, verify=verify,
                      manifest=str(tmp_path / "SHA256SUMS"), conversion=conversion,
                      consistency=consistency)],
        telemetry=store, environment=envinfo.collect(probe_torch=False),
        command="ckpt-inspector report evil.pt good.pt -o r.pdf")


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.tags: list[str] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.verdicts: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "data-section" in attrs:
            self.sections.append(attrs["data-section"])
        if "data-verdict" in attrs:
            self.verdicts.append(attrs["data-verdict"])
        if tag == "img":
            self.images.append(attrs["src"])
        self.urls += [v for k, v in attrs.items() if k in ("href", "src") and v]

    def handle_data(self, data):
        self.text.append(data)


def test_html_is_self_contained_with_every_section(session, tmp_path):
    html = render_html(build_report(session))
    doc = _Collector()
    doc.feed(html)
    assert doc.sections[0] == "summary" and doc.verdicts == ["dangerous"]
    assert doc.sections.count("summary") == 1
    for kind in FILE_SECTIONS:
        assert doc.sections.count(kind) == 2, kind
    assert doc.sections[-2:] == ["telemetry", "environment"]
    # no scripts, no external stylesheets or images: everything is inline
    assert "script" not in doc.tags and "link" not in doc.tags
    assert all(u.startswith(("data:image/png;base64,", "#")) for u in doc.urls), doc.urls
    # dtype chart, consistency chart, temperature chart, each a real PNG
    assert len(doc.images) == 3
    for src in doc.images:
        image = QImage.fromData(base64.b64decode(src.split(",", 1)[1]), "PNG")
        assert image.width() >= 640 and image.height() >= 80
    text = "".join(doc.text)
    assert HOSTILE in text  # the hostile strings are shown as text, never parsed as markup
    assert "DANGEROUS — DO NOT LOAD" in text


def test_export_writes_each_format_atomically_and_refuses_to_overwrite(session, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("r.json", "r.html", "r.pdf"):
        export(session, out / name)
    assert sorted(p.name for p in out.iterdir()) == ["r.html", "r.json", "r.pdf"]
    assert json.loads((out / "r.json").read_text())["verdict"] == "dangerous"
    before = (out / "r.json").read_bytes()
    report = build_report(session)
    with pytest.raises(OutputExistsError):
        write_report(report, out / "r.json")
    assert (out / "r.json").read_bytes() == before
    write_report(report, out / "r.json", overwrite=True)
    assert json.loads((out / "r.json").read_text())["tool"]["generated_at"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left
    with pytest.raises(UnknownReportFormat, match=r"unknown report format \.txt"):
        export(session, out / "r.txt")
    assert not (out / "r.txt").exists()


@pytest.mark.skipif(shutil.which("pdftoppm") is None or shutil.which("pdftotext") is None,
                    reason="pdftoppm/pdftotext not installed (apt-get install poppler-utils)")
def test_pdf_pages_render_and_the_first_shows_the_dangerous_verdict(session, tmp_path,
                                                                      artifacts):
    pdf = tmp_path / "report.pdf"
    export(session, pdf)
    assert pdf.read_bytes().startswith(b"%PDF-")
    first = subprocess.run(["pdftotext", "-f", "1", "-l", "1", "-layout", str(pdf), "-"],
                           capture_output=True, text=True, check=True).stdout
    assert "DANGEROUS — DO NOT LOAD" in first
    assert "evil.pt: dangerous: imports os.system" in first
    pages_dir = artifacts / "report-pdf"
    shutil.rmtree(pages_dir, ignore_errors=True)
    pages_dir.mkdir()
    subprocess.run(["pdftoppm", "-r", "60", "-png", str(pdf), str(pages_dir / "page")],
                   check=True)
    pages = sorted(pages_dir.glob("page-*.png"))
    assert len(pages) >= 3
    page1 = QImage(str(pages[0]))
    red = sum(1 for y in range(0, page1.height(), 2) for x in range(0, page1.width(), 2)
              if _near(page1.pixelColor(x, y), DANGER_RGB))
    # the banner is a solid block of the dangerous colour across the page width
    assert red > page1.width() * page1.height() / 4 * 0.03
    text = unicodedata.normalize("NFKC", subprocess.run(  # NFKC undoes the "fi" ligature
        ["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout)
    for heading in ("Prevention checklist", "Static scan", "Jailed weights_only load", "Tensors",
                    "Manifest verification", "Conversion to safetensors",
                    "Repeat-inference consistency", "GPU telemetry", "Environment"):
        assert heading in text, heading


def _near(color, rgb, tolerance: int = 24) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(
        (color.red(), color.green(), color.blue()), rgb, strict=True))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_html_opens_in_headless_chromium_with_the_verdict_on_top(session, tmp_path, artifacts):
    page = tmp_path / "report.html"
    export(session, page)
    shot = artifacts / "report-html.png"
    shot.unlink(missing_ok=True)
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1000,700", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, cwd=tmp_path)
    image = QImage(str(shot))
    assert not image.isNull(), "chromium wrote no screenshot"
    # the first screenful carries the dangerous banner, as a solid block of its colour
    red = sum(1 for y in range(0, 300, 2) for x in range(0, image.width(), 2)
              if _near(image.pixelColor(x, y), DANGER_RGB))
    assert red > 2000
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path).stdout
    doc = _Collector()
    doc.feed(dom)
    assert doc.verdicts == ["dangerous"] and doc.sections.count("tensors") == 2
    assert "script" not in doc.tags  # the hostile key stayed text in the browser too


def test_the_summary_comes_first_and_every_file_table_in_the_appendix(session):
    html = render_html(build_report(session))
    summary, appendix = html.index('data-section="summary"'), html.index('id="appendix"')
    files = [html.index(f'id="file-{n}"') for n in (1, 2)]
    assert summary < appendix < min(files)
    # the appendix starts a page of its own; the files after it do not each take a new page
    assert 'id="appendix" style="page-break-before: always"' in html
    assert html.count("page-break-before") == 1
    # the summary names each file and links to its detail
    head = html[summary:appendix]
    assert 'href="#file-1"' in head and 'href="#file-2"' in head
    assert "evil.pt" in head and "good.pt" in head
    assert "Prevention checklist" not in head and "Tensors" not in head


def test_the_pdf_first_page_is_the_summary_alone(session, tmp_path, artifacts):
    from PySide6.QtCore import QSize
    from PySide6.QtPdf import QPdfDocument

    pdf = tmp_path / "report.pdf"
    export(session, pdf)
    doc = QPdfDocument()
    doc.load(str(pdf))
    assert doc.pageCount() >= 2
    first, second = (doc.getAllText(n).text() for n in (0, 1))
    assert "DANGEROUS" in first and "evil.pt" in first and "good.pt" in first
    assert "Prevention checklist" not in first and "Appendix" not in first
    assert second.lstrip().startswith("Appendix")
    size = doc.pagePointSize(0).toSize()
    assert doc.render(0, QSize(size.width(), size.height())).save(
        str(artifacts / "report-pdf-summary-page.png"))


def test_the_verification_section_shows_its_head_and_each_file_against_its_digest(session):
    html = render_html(build_report(session))
    start = html.index('id="file-2-verification"')  # good.pt's, the file given a manifest
    section = html[start:html.index("</section>", start)]
    doc = _Collector()
    doc.feed(section)
    words = [w.strip() for w in doc.text if w.strip()]
    assert words[words.index("Result"):words.index("Counts") + 2] == [
        "Result", "✔ pass", "Manifest", str(Path(session.files[1].manifest)), "Counts", "1 ok"]
    assert words[words.index("Files"):] == [
        "Files", "Path", "Status", "Expected", "Actual", "good.pt", "ok", "ef" * 32, "ef" * 32]


def test_a_check_head_takes_extra_rows_after_its_counts():
    from inspector.report import html_cells

    doc = _Collector()
    doc.feed(html_cells.outcome("fail", "Other copy", None, {"changed": 2, "ok": 5},
                                ("Single-bit flips", "3")))
    assert [w for w in doc.text if w.strip()] == [
        "Result", "✘ fail", "Other copy", "unknown", "Counts", "2 changed, 5 ok",
        "Single-bit flips", "3"]
