"""Fail-closed behaviour of the scan: exceptions become the file's result, bombs are not safe,
--fail-on gates, calls are shown with their arguments under their real import names, text from
a file cannot repaint the terminal, NumPy's descr grammar, every compression member, folders."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import zlib

import pytest
from factories import call, p_global, p_unicode, touch_cmd

from inspector import formats
from inspector.core.termtext import escape, html_escape
from inspector.formats import numpy_files, pickle_stream
from inspector.formats.archives import decompress
from inspector.sandbox.host.client import dry_run_reader
from inspector.scan import discover, readings
from inspector.scan import engine as scan
from inspector.scan.engine import scan_bytes, scan_file, scan_paths


def _cli(python_exe, *args):
    return subprocess.run([python_exe, "-m", "inspector", "scan", *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_an_exception_in_a_reader_is_the_files_one_line_result(tmp_path, monkeypatch, canary):
    def boom(*_args, **_kwargs):
        raise RuntimeError("reader bug\nwith a second line")

    monkeypatch.setattr(numpy_files, "scan_npy", boom)
    npy = tmp_path / "a.npy"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + bytes(20))
    res = scan_file(npy)
    assert res.verdict == "error" and "RuntimeError" in res.error and "\n" not in res.error
    monkeypatch.setattr(pickle_stream, "fold_pickles", boom)
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(call("os", "system", touch_cmd(canary)))
    with readings.using(None):
        assert scan_file(evil).verdict == "error"  # the walk alone, not fully read: never safe
    with readings.using(dry_run_reader):  # the loaders' own reading still sees the call
        res = scan_file(evil)
    assert res.verdict == "dangerous" and "RuntimeError" in res.error
    assert not canary.exists()


def test_a_folder_reports_every_file_even_when_one_breaks_the_scanner(tmp_path, monkeypatch,
                                                                      canary):
    real = scan.scan_file

    def flaky(path, *args):
        if path.name == "broken.pt":
            raise MemoryError("out of memory")
        return real(path, *args)

    monkeypatch.setattr(scan, "scan_file", flaky)
    (tmp_path / "broken.pt").write_bytes(b"\x80\x02}.")
    (tmp_path / "evil.bin").write_bytes(call("os", "system", touch_cmd(canary)))
    verdicts = {os.path.basename(r.path): r.verdict for r in scan_paths([tmp_path])}
    assert verdicts == {"broken.pt": "error", "evil.bin": "dangerous"}


@pytest.mark.parametrize("data", [
    b"\x80\x02" + b"(" * 300_000 + b".",  # MARK nesting past the bound
    b"\x80\x02\x8b\xff\xff\xff\x7f",  # LONG4 claiming 2 GB
    b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f.",  # FRAME claiming 2**63 bytes
    b"\x80\x02X\xff\xff\xff\xff",  # truncated text
])
def test_bombs_and_broken_pickles_are_not_safe_and_not_errors(data):
    res = scan_bytes(data)
    assert res.verdict == "suspicious" and res.error is None, res.to_json()


def test_a_million_back_to_back_pickles_are_all_walked():
    res = scan_bytes(b"\x80\x02N." * 200_000 + call("os", "system", "id"))
    assert res.verdict == "dangerous"
    assert len(res.pickles) == scan.MAX_LISTED_PICKLES


def test_fail_on_gates_the_exit_status(tmp_path, python_exe, canary):
    (tmp_path / "ok.pkl").write_bytes(b"\x80\x02}.")
    (tmp_path / "custom.pkl").write_bytes(b"\x80\x02c__main__\nNet\nq\x00)\x81q\x01.")
    (tmp_path / "notes.md").write_text("# notes\n")
    assert _cli(python_exe, tmp_path).returncode == 1
    assert _cli(python_exe, "--fail-on", "dangerous", tmp_path).returncode == 0
    assert _cli(python_exe, "--fail-on", "suspicious", tmp_path).returncode == 1
    (tmp_path / "evil.pkl").write_bytes(call("os", "system", touch_cmd(canary)))
    assert _cli(python_exe, "--fail-on", "dangerous", tmp_path).returncode == 2
    assert _cli(python_exe, "--fail-on", "error", tmp_path).returncode == 0
    assert _cli(python_exe, "--fail-on", "error", tmp_path / "notes.md").returncode == 3


def test_findings_name_the_real_import_and_the_call(tmp_path, python_exe, canary):
    path = tmp_path / "evil.pkl"
    path.write_bytes(call("posix", "system", touch_cmd(canary)))
    (use,) = scan_file(path).globals
    assert (use.module, use.import_name) == ("posix", "os.system")
    assert use.calls == [f"os.system({touch_cmd(canary)!r})"]
    line = json.loads(_cli(python_exe, "--json", path).stdout)
    assert line["globals"][0]["import"] == "os.system"
    assert line["globals"][0]["calls"] == use.calls
    text = _cli(python_exe, path).stdout
    assert "os.system (as posix.system)" in text and use.calls[0] in text


@pytest.mark.parametrize(("module", "name"), [
    ("typing", "_eval_type"), ("numpy", "ndarray.tofile"), ("torch", "UntypedStorage.from_file"),
    ("sqlite3", "connect"), ("importlib", "import_module"), ("sys", "modules"),
    ("pathlib", "Path.write_text"),
])
def test_capabilities_are_dangerous_with_their_reason(module, name):
    from inspector.scan.pickles.policy import classify

    verdict = classify(module, name)
    assert verdict.severity == "dangerous" and " can " in verdict.reason


def test_old_benign_object_pickles_are_not_alarms():
    import pickle

    # protocol 0/1 pickles of plain objects go through copyreg._reconstructor
    res = scan_bytes(pickle.dumps(_Plain(), protocol=1))
    assert res.verdict == "suspicious", res.to_json()


class _Plain:
    """A plain class, pickled by reference."""


def test_escape_codes_cannot_repaint_the_verdict(tmp_path, python_exe, canary):
    trick = "\x1b[2K\x1b[1G\x1b[32mSAFE\x1b[0m \u202etxt.exe"
    data = (b"\x80\x02" + p_global("os", "system") + b"(" + p_unicode(touch_cmd(canary) + trick)
            + b"tR" + p_global("x\x1b[8m", "y\u202e") + b".")
    path = tmp_path / f"evil{trick}.pkl"
    path.write_bytes(data)
    proc = _cli(python_exe, path)
    assert proc.returncode == 2
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
    assert "\\x1b[32mSAFE" in proc.stdout and "\\u202e" in proc.stdout
    assert proc.stdout.startswith("DANGEROUS")


def test_termtext_escapes():
    assert escape("layer.0.weight") == "layer.0.weight"
    assert escape("a\x1b[0m\x85\u2066\n") == "a\\x1b[0m\\x85\\u2066\\x0a"
    assert html_escape("<a>\x1b") == '&lt;a&gt;<mark class="ctl">\\x1b</mark>'


@pytest.mark.parametrize(("descr", "objects"), [
    ("<f4", False), ("|b1", False), ("<U8", False), ("<M8[ns]", False), ("|V16", False),
    (("<f4", (2, 3)), False), ([("a", "<i4"), ("b", "<f8", (2,))], False),
    ("|O", True), ("O8", True), ("object", True), ("i4,O", True), ("(2,)O", True),
    (("|O", (2,)), True), ([("a", [("b", "|O")])], True), ([(("t", "n"), "|O")], True),
    ([("a", ("|O", (3,)))], True), ({"names": ["a"]}, True), ([("a",)], True),
])
def test_npy_descr_grammar(descr, objects):
    assert formats.npy_has_objects(descr) is objects


def test_every_member_of_a_compressed_stream_is_read():
    payload = call("os", "system", "id")
    for compress in (gzip.compress, zlib.compress):
        res = scan_bytes(compress(payload[:9]) + compress(payload[9:]))
        assert res.verdict == "dangerous" and res.format == "compressed-pickle"
    padded = gzip.compress(b"\x80\x02}.") + bytes(64) + gzip.compress(b"tail")
    assert decompress.decompress(padded, "gzip", 1 << 20).members == 2


def test_missing_codec_and_oversized_content_are_not_safe(monkeypatch):
    res = scan_bytes(b"\x04\x22\x4d\x18" + bytes(16))
    assert res.verdict == "suspicious" and "compressed-unreadable" in {f.code for f in
                                                                       res.findings}
    from inspector.scan.budget import ScanBudget

    monkeypatch.setattr(ScanBudget, "for_size", classmethod(lambda cls, size: cls(1000, 10**6)))
    res = scan_bytes(gzip.compress(b"\x80\x02]" + b"N" * 5000 + b"."))
    assert res.verdict == "suspicious" and not res.weights_only_ok
    assert "scan-budget" in {f.code for f in res.findings}


def test_tensor_record_holding_a_protocol_0_pickle_is_scanned(tmp_path, canary):
    import zipfile

    from factories import _torch_zip_bytes

    src = zipfile.ZipFile(__import__("io").BytesIO(_torch_zip_bytes(tmp_path)))
    record = next(n for n in src.namelist() if "/data/" in n and n[-1].isdigit())
    path = tmp_path / "r.pt"
    with zipfile.ZipFile(path, "w") as out:
        for name in src.namelist():
            data = src.read(name)
            if name == record:
                data = (p_global("os", "system") + b"(S'" + touch_cmd(canary).encode()
                        + b"'\ntR.").ljust(len(data), b"\x00")
            out.writestr(zipfile.ZipInfo(name), data)
    assert scan_file(path).verdict == "dangerous"


def test_discover_lists_hidden_files_and_each_real_file_once(tmp_path):
    (tmp_path / ".hidden").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a").write_bytes(b"a")
    os.symlink("sub/a", tmp_path / "link")
    os.symlink("sub", tmp_path / "dirlink")
    os.symlink("missing", tmp_path / "broken")
    os.mkfifo(tmp_path / "pipe")
    found = [f.path.relative_to(tmp_path).as_posix() for f in discover.discover([tmp_path])]
    assert found == [".hidden", "broken", "link", "pipe"]
    verdicts = {os.path.basename(r.path): r.verdict for r in scan_paths([tmp_path])}
    # a named pipe must not hang the scan; what no loader can read is skipped in a folder
    # the folder link leads to a folder the walk covers: a line that says so
    assert verdicts == {".hidden": "skipped", "broken": "skipped", "link": "skipped",
                        "pipe": "skipped", "dirlink": "skipped"}


def test_every_deny_entry_is_reachable_and_has_a_reason():
    from inspector.scan.pickles import policy

    for entry, reason in policy._DENY.items():
        parts = entry.split(".")
        shadows = [".".join(parts[:i]) for i in range(1, len(parts))
                   if ".".join(parts[:i]) in policy._DENY]
        assert not shadows, f"{entry} is hidden behind {shadows} (its reason is never shown)"
        assert reason.startswith("can ")
