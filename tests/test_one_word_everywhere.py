"""One truth in every view (issue 37): for the same file, `inspect`'s verdict lines, the app's
two badges and the report's summary cells say the same words, and those words are the shared
vocabulary's (`core.badges.LOOKS`), never a view's own.

The files are real: torch.save's bytes (one plain, one with a NaN weight), a pickle whose
payload runs under the real loader (proved here, in a child process) and random bytes. Each view
gets them through its own path: the CLI's `inspect` and `report` commands, and the app's
pipeline and sandbox worker."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import factories
import pytest
import torch
from gui_support import LOAD_TIMEOUT_MS

from inspector.cli import main
from inspector.core.badges import LOOKS, Badge

pytest_plugins = ("gui_fixtures",)  # fixtures: window

EXPECTED = {
    "safe.pt": (Badge.SAFE, Badge.WEIGHTS_OK),
    "nan.pt": (Badge.NO_CODE, Badge.WEIGHTS_CORRUPTED),
    "evil.pt": (Badge.DANGEROUS, Badge.WEIGHTS_NOT_JUDGED),
    "random.pt": (Badge.UNREADABLE, Badge.WEIGHTS_NOT_JUDGED),
}
"""What each file is, in the shared vocabulary's states."""


@pytest.fixture
def files(tmp_path: Path, canary: Path) -> list[Path]:
    folder = tmp_path / "files"
    folder.mkdir()
    torch.save({"w": torch.linspace(-1, 1, 16).reshape(4, 4)}, folder / "safe.pt")
    nan = torch.linspace(-1, 1, 16).reshape(4, 4)
    nan[1, 2] = float("nan")
    torch.save({"w": nan}, folder / "nan.pt")
    factories.mal_os_system(folder / "evil.pt", canary)
    (folder / "random.pt").write_bytes(bytes(range(256)) * 16)
    # the payload is real: the plain loader runs it (on a copy with its own canary)
    proof = factories.mal_os_system(tmp_path / "proof.pt", tmp_path / "ran")
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], "
                    "'rb'))", str(proof)], capture_output=True, timeout=60, check=False)
    assert (tmp_path / "ran").exists()
    return [folder / name for name in EXPECTED]


def cli_words(path: Path, capsys) -> tuple[str, str]:
    """`inspect`'s code-safety and weights-health words (its `scan:` and `health:` lines)."""
    main(["inspect", str(path)])
    out = capsys.readouterr().out
    code = re.search(r"^scan: +([^;(\n]+)", out, re.M).group(1).strip()
    weights = re.search(r"^health: +([^;(\n]+)", out, re.M).group(1).strip()
    return code, weights


def scan_words(paths: list[Path], capsys) -> dict[str, str]:
    """`scan`'s word of each file (its lines lead with the word in capitals)."""
    main(["scan", *map(str, paths)])
    lines = capsys.readouterr().out.splitlines()
    return {p.name: next(line for line in lines if str(p) in line).split(f" {p}")[0].strip()
            for p in paths}


def report_words(path: Path) -> dict[str, tuple[str, str]]:
    """Each file's two badge words in a report's summary table, by file name."""
    html = path.read_text()
    summary = html.split('data-section="summary"', 1)[1].split("</section>", 1)[0]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", summary, re.S):
        words = re.findall(r'<b style="color: #[0-9a-f]{6}">([^<]+)</b>', row)
        if len(words) == 2:
            name = unescape(re.sub(r"<[^>]+>", "", row.split("</td>", 1)[0])).strip()
            rows[name] = (unescape(words[0]), unescape(words[1]))
    return rows


def app_words(window, qtbot, paths: list[Path]) -> dict[str, tuple[str, str]]:
    """The Overview's two badges of each file once both are final, by file name."""
    docs = window.open_paths(paths)
    pending = {LOOKS[Badge.SCANNING].word, LOOKS[Badge.WEIGHTS_PENDING].word}
    shown = {}
    for row, doc in enumerate(docs):
        window.file_list.setCurrentRow(row)
        banners = (window.overview.banner, window.overview.health_banner)

        def final(banners=banners) -> bool:
            return not {b.accessibleName().split(": ", 1)[1] for b in banners} & pending

        qtbot.waitUntil(final, timeout=LOAD_TIMEOUT_MS)
        shown[doc.name] = tuple(b.accessibleName().split(": ", 1)[1] for b in banners)
        if doc.health is not None:  # the findings' heading says the weights badge's word
            assert shown[doc.name][1] in window.overview.findings.toPlainText().splitlines()
    return shown


def test_the_cli_the_app_and_the_report_say_the_same_word_for_each_file(
        files, window, qtbot, tmp_path, capsys):
    expected = {p.name: (LOOKS[EXPECTED[p.name][0]].word, LOOKS[EXPECTED[p.name][1]].word)
                for p in files}
    cli = {p.name: cli_words(p, capsys) for p in files}
    scan = scan_words(files, capsys)
    out = tmp_path / "report.html"
    main(["report", *map(str, files), "-o", str(out), "-q"])
    capsys.readouterr()
    report = report_words(out)
    app = app_words(window, qtbot, files)
    assert cli == expected
    # the scan alone cannot see the weights: the NaN file's code is as safe as its bytes say
    assert scan == {name: code.upper() for name, (code, _) in expected.items()} | {
        "nan.pt": LOOKS[Badge.SAFE].word.upper()}
    assert report == expected
    assert app == expected
