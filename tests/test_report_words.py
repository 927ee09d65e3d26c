"""Reports a person would send (issue 37): human labels and words in the conversion table (no
`digest_algorithm`, no `verified: True`), a headline that counts the files of a multi-file
report, file names that wrap at their separators, and no heading left alone at the foot of a
PDF page.

The conversion is real (`sandbox.host.client.convert_file` on a torch.save file); the samples
are the built-in ones (`core.samples`); the orphan-heading case is found by laying a document
out on the PDF's own pages, not assumed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtGui import QTextDocument

from inspector.core.samples import write_samples
from inspector.report import build_report
from inspector.report.labels import LABELS, plain
from inspector.report.model import FileEvidence, SessionEvidence
from inspector.report.render_html import render_html
from inspector.report.render_pdf import (
    keep_headings_with_text,
    keep_together,
    orphan_headings,
    page_size,
    split_tables,
)
from inspector.scan.engine import scan_file
from tests import factories

pytestmark = pytest.mark.usefixtures("qapp")


def _section(page: str, name: str) -> str:
    return page.split(f'data-section="{name}"', 1)[1].split("</section>", 1)[0]


def test_the_conversion_table_speaks_words_not_keys(tmp_path: Path):
    from inspector.sandbox.host.client import convert_file

    src = factories.save_state_dict(tmp_path / "m.pt")
    conversion = convert_file(src, tmp_path / "m.safetensors")
    report = build_report(SessionEvidence([FileEvidence(str(src), scan=scan_file(src),
                                                        conversion=conversion)]))
    table = _section(render_html(report), "conversion")
    text = re.sub(r"<[^>]+>", " ", table)
    names = re.findall(r"<th>(.*?)</th>", table)
    assert not set(names) & set(conversion), names  # no raw key of the result is a label
    assert all("_" not in name for name in names), names
    assert {LABELS["verified"], LABELS["digest_algorithm"], LABELS["made_contiguous"]} <= set(
        names)
    assert "digest_algorithm" not in text and "made_contiguous" not in text
    assert not re.search(r"\b(True|False|None)\b", text), text
    assert "Verified by the jailed loader" in text and "SHA-256 of each tensor" in text
    assert plain(True) == "yes" and plain([]) == "none"


def test_a_multi_file_headline_counts_its_files(tmp_path: Path):
    samples = write_samples(tmp_path)
    files = [samples.benign, samples.malicious]
    for n in range(3):
        files.append(factories.save_state_dict(tmp_path / f"extra-{n}.pt"))
    report = build_report(SessionEvidence([FileEvidence(str(p), scan=scan_file(p))
                                           for p in files]))
    banner = _section(render_html(report), "summary").split("</table>", 1)[0]
    assert "DANGEROUS" in banner and "1 of 5 files import functions" in banner
    assert "The file imports" not in banner
    one = build_report(SessionEvidence([FileEvidence(str(samples.malicious),
                                                     scan=scan_file(samples.malicious))]))
    assert "The file imports functions" in _section(render_html(one), "summary")


def test_file_names_wrap_at_their_separators(tmp_path: Path):
    path = factories.save_state_dict(tmp_path / "model-00001-of-00010_final.checkpoint.pt")
    page = render_html(build_report(SessionEvidence([FileEvidence(str(path),
                                                                  scan=scan_file(path))])))
    heading = re.search(r"<h2 id=\"file-1\">(.*?)</h2>", page).group(1)
    assert heading == "1. model-<wbr>00001-<wbr>of-<wbr>00010_<wbr>final.<wbr>checkpoint." \
                      "<wbr>pt"
    assert "word-break: break-all" not in page.split(".hash", 1)[0]  # only digests break anywhere


def test_no_heading_ends_a_pdf_page():
    doc = QTextDocument()
    doc.setPageSize(page_size())
    # find a filler length that leaves the heading alone at the foot of page 1
    for lines in range(20, 200):
        body = "".join(f"<p>line {i}</p>" for i in range(lines))
        doc.setHtml(f"<html><body>{body}<h2>Weights health</h2><p>its text</p></body></html>")
        if orphan_headings(doc):
            break
    else:
        pytest.fail("no filler length left the heading alone at a page's foot")
    [heading] = orphan_headings(doc)
    assert heading.text() == "Weights health"
    assert keep_headings_with_text(doc) == 1
    assert orphan_headings(doc) == []
    layout, height = doc.documentLayout(), doc.pageSize().height()
    top = layout.blockBoundingRect(doc.findBlockByNumber(heading.blockNumber())).top()
    assert top % height < 40  # it now starts the next page, with its text below it


def test_a_tables_column_names_and_a_run_of_headings_keep_with_their_text():
    doc = QTextDocument()
    doc.setPageSize(page_size())
    layout, height = doc.documentLayout(), doc.pageSize().height()
    table = ("<table><thead><tr><th>Key</th><th>max |x|</th></tr></thead>"
             + "".join(f"<tr><td>w{i}</td><td>{i}</td></tr>" for i in range(5)) + "</table>")

    def page(words: str) -> int:
        return int(layout.blockBoundingRect(doc.find(words).block()).top() // height)

    # a file's heading, its first section's heading, then that section's table
    for lines in range(20, 200):
        body = "".join(f"<p>line {i}</p>" for i in range(lines))
        doc.setHtml(f"<html><body>{body}<h2>3. tiny-gpt</h2><h3>Largest magnitudes</h3>"
                    f"{table}</body></html>")
        if page("3. tiny-gpt") < page("w0"):
            break
    else:
        pytest.fail("no filler length split the headings from the table")
    assert page("Key") == page("w0")  # Qt keeps a <thead> with its first row
    assert orphan_headings(doc)[0].text() == "3. tiny-gpt"
    keep_headings_with_text(doc)
    assert orphan_headings(doc) == []
    assert page("3. tiny-gpt") == page("Largest magnitudes") == page("w0")
    assert page("line 0") < page("3. tiny-gpt")  # not a page holding a heading alone


def test_a_short_table_whose_row_would_straddle_a_page_moves_whole_with_its_heading():
    doc = QTextDocument()
    doc.setPageSize(page_size())
    layout, height = doc.documentLayout(), doc.pageSize().height()
    rows = "".join(f"<tr><td>row {i}<br>its second line<br>its third</td><td>{i}</td></tr>"
                   for i in range(6))
    for lines in range(20, 200):  # a filler length that splits a row between two pages
        body = "".join(f"<p>line {i}</p>" for i in range(lines))
        doc.setHtml(f"<html><body>{body}<h3>Prevention checklist</h3><table>{rows}</table>"
                    "<p>after</p></body></html>")
        if split_tables(doc) and not orphan_headings(doc):
            break
    else:
        pytest.fail("no filler length split a row of the table")

    def page(words: str) -> int:
        return int(layout.blockBoundingRect(doc.find(words).block()).top() // height)

    assert keep_together(doc) >= 1
    assert split_tables(doc) == [] and orphan_headings(doc) == []
    pages = {page("Prevention checklist"), *(page(f"row {i}") for i in range(6)),
             page("its third")}
    assert pages == {page(f"line {lines - 1}") + 1}  # heading and table on the next page


def _sharded_folder(folder: Path) -> Path:
    """Two torch.save shards and the transformers index that names them."""
    import json

    import torch

    folder.mkdir()
    shards = {"pytorch_model-00001-of-00002.bin": {"a.weight": torch.ones(3, 2)},
              "pytorch_model-00002-of-00002.bin": {"b.weight": torch.zeros(4)}}
    for name, state in shards.items():
        torch.save(state, folder / name)
    weight_map = {key: name for name, state in shards.items() for key in state}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 40}, "weight_map": weight_map}))
    return folder


def test_a_folder_conversion_is_in_the_report_in_words(tmp_path: Path, capsys):
    import json

    from inspector.cli import main

    folder = _sharded_folder(tmp_path / "tiny")
    assert main(["convert", str(folder), "--json"]) == 0
    conversion = json.loads(capsys.readouterr().out)  # the contract a pipeline keeps
    assert len(conversion["shards"]) == 2
    report = build_report(SessionEvidence([FileEvidence(str(folder), conversion=conversion)]))
    (conv,) = [f.conversion for f in report.files]
    assert conv.status == "pass" and conv.output == str(folder / "model.safetensors.index.json")
    table = _section(render_html(report), "conversion")
    text = re.sub(r"<[^>]+>", "", table.replace("<wbr>", ""))
    names = re.findall(r"<th>(.*?)</th>", table)
    assert not {n for n in names if "_" in n or n in conversion}, names
    assert "Index written" in names and "Shard written" in names
    for n in (1, 2):
        assert f"model-0000{n}-of-00002.safetensors" in text
        assert f"pytorch_model-0000{n}-of-00002.bin" in text
    assert text.count("yes, checked here") == 2
    assert not re.search(r"\b(True|False|None)\b", text), text
    assert not re.search(r"[a-z]+_[a-z]+", text.replace(str(tmp_path), "")
                         .replace("pytorch_model", "")), text  # no raw key reaches the page
