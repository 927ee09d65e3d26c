"""Nothing in a folder goes unreported (issue 34): folder links are followed with loop and
outside-the-root protection, or get a line with the reason; every entry gets a line; an entry
that lies outside the scanned folder says so."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from factories import call, touch_cmd

from inspector.scan import discover as discover_mod
from inspector.scan.discover import discover, discover_entries
from inspector.scan.engine import scan_paths


def _evil(path: Path, canary: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(call("os", "system", touch_cmd(canary)))
    return path


@pytest.fixture
def tree(tmp_path):
    """root/ with a real folder, a link to it, a link to its own parent (a loop) and a link to
    a folder outside it, which itself links further out."""
    canary = tmp_path / "canary"
    root = tmp_path / "root"
    _evil(root / "real" / "a.pkl", canary)
    _evil(tmp_path / "outside" / "inner" / "b.pkl", canary)
    _evil(tmp_path / "further" / "c.pkl", canary)
    (root / "alias").symlink_to("real")
    (root / "loop").symlink_to("..")
    (root / "ext").symlink_to(tmp_path / "outside")
    (tmp_path / "outside" / "inner" / "far").symlink_to(tmp_path / "further")
    return root, canary


def _lines(root):
    return {os.path.relpath(r.path, root): r for r in scan_paths([root])}


def test_a_linked_folder_outside_is_followed_and_its_files_say_where_they_lie(tree):
    root, canary = tree
    lines = _lines(root)
    res = lines[os.path.join("ext", "inner", "b.pkl")]
    assert res.verdict == "dangerous"
    outside = [f for f in res.findings if f.code == "outside-folder"]
    assert outside and str(root.parent / "outside" / "inner" / "b.pkl") in outside[0].message
    with open(root / "ext" / "inner" / "b.pkl", "rb") as fh:  # the loader reads through it
        pickle.load(fh)
    assert canary.exists()
    canary.unlink()


def test_loops_and_second_links_out_get_a_line_with_their_reason(tree):
    root, _canary = tree
    lines = _lines(root)
    assert lines["alias"].verdict == "skipped" and "walks already" in lines["alias"].error
    assert lines["loop"].verdict == "skipped" and "holds the scanned folder" in lines["loop"].error
    far = lines[os.path.join("ext", "inner", "far")]
    assert far.verdict == "suspicious"
    assert any(f.code == "folder-not-walked" for f in far.findings)
    assert lines[os.path.join("real", "a.pkl")].verdict == "dangerous"
    assert not any(name.startswith(("alias" + os.sep, "loop" + os.sep)) for name in lines)


def test_every_entry_gets_a_line(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "model.pkl").write_bytes(pickle.dumps({"a": 1}))
    (root / "empty").write_bytes(b"")
    (root / "notes.txt").write_text("hello")
    (root / "dangling").symlink_to(tmp_path / "gone")
    (root / "sub" / "self").symlink_to("..")
    os.mkfifo(root / "pipe")
    entries = {os.path.relpath(f.path, root) for f in discover_entries([root])}
    assert entries == {"model.pkl", "empty", "notes.txt", "dangling", "pipe",
                       os.path.join("sub", "self")}
    assert set(_lines(root)) == entries
    assert os.path.join("sub", "self") not in {os.path.relpath(f.path, root)
                                               for f in discover([root])}


def test_a_folder_that_cannot_be_read_is_an_error_line(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "locked").mkdir(parents=True)
    (root / "locked" / "x.pkl").write_bytes(b"\x80\x02}.")
    real = os.scandir

    def scandir(path):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(discover_mod.os, "scandir", scandir)
    lines = _lines(root)
    assert lines["locked"].verdict == "error" and "Permission denied" in lines["locked"].error


def test_a_link_to_a_walked_folder_keeps_the_real_name(tmp_path):
    """The real folders are walked first, so the link is the entry refused, whatever the sort
    order of their names."""
    root = tmp_path / "root"
    (root / "z_real").mkdir(parents=True)
    (root / "z_real" / "w.pkl").write_bytes(b"\x80\x02}.")
    (root / "a_link").symlink_to("z_real")
    lines = _lines(root)
    assert lines[os.path.join("z_real", "w.pkl")].verdict == "safe"
    assert lines["a_link"].verdict == "skipped"


_REMOTE_CONFIG = """\
import os
from transformers import PretrainedConfig

with open(os.environ["CANARY"], "w") as fh:  # runs when the loader imports the module
    fh.write("ran")


class EvilConfig(PretrainedConfig):
    model_type = "evil"
"""


@pytest.mark.parametrize("how", ["hard link", "symlink"])
def test_every_name_of_a_file_is_judged_as_the_loader_opens_it(tmp_path, how):
    """config.json (its auto_map naming configuration_evil.py) and that .py share their inodes
    with names that read as notes (`0_notes.txt`, `0_readme.txt`): a walk that kept one name per
    file judged only the notes. transformers opens config.json and the .py by name and runs it;
    the scan judges every name and fails."""
    import json
    import subprocess
    import sys

    folder = tmp_path / "model"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text(json.dumps({"model_type": "evil", "auto_map": {
        "AutoConfig": "configuration_evil.EvilConfig"}}))
    (folder / "configuration_evil.py").write_text(_REMOTE_CONFIG)
    for other, name in (("0_notes.txt", "config.json"), ("0_readme.txt", "configuration_evil.py")):
        if how == "hard link":
            os.link(folder / name, folder / other)
        else:
            (folder / other).symlink_to(name)
    canary = tmp_path / "canary"

    scan = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(folder)],
                          capture_output=True, text=True, timeout=600)
    assert not canary.exists()  # the scan imported nothing
    records = {os.path.basename(r["path"]): r for r in map(json.loads, scan.stdout.splitlines())}
    assert scan.returncode == 2, (scan.stdout, scan.stderr)
    assert {r["verdict"] for r in records.values()} == {"dangerous"}, records
    remote = [f["message"] for r in records.values() for f in r["findings"]
              if f["code"] == "remote-code"]
    assert remote and all("config.json" in m and "configuration_evil.py" in m for m in remote)
    code = [f["message"] for r in records.values() for f in r["findings"]
            if f["code"] == "python-code"]
    assert code and all("configuration_evil.py" in m for m in code)
    named = json.dumps(list(records.values()))
    assert all(name in named for name in ("config.json", "configuration_evil.py",
                                          "0_notes.txt", "0_readme.txt"))  # no name left out

    env = {**os.environ, "CANARY": str(canary), "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    load = subprocess.run([sys.executable, "-c", "import sys, transformers; transformers."
                           "AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True)",
                           str(folder)], env=env, capture_output=True, text=True, timeout=300)
    assert load.returncode == 0, load.stderr
    assert canary.read_text() == "ran"  # the real loader ran the payload
