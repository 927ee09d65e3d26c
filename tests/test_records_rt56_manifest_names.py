"""A manifest (or a save record's `files`) whose path holds a lone surrogate no byte stands
for (JSON's "\\ud800") names no file: a manifest error, never a UnicodeEncodeError traceback
from the first system call given it. Beside the clean twin naming the same file."""

from __future__ import annotations

import hashlib
import json

import pytest

from inspector.cli import main
from inspector.integrity.manifest import SCHEMA, SCHEMA_VERSION, ManifestError, file_entry


@pytest.mark.parametrize(("name", "code"), [("\ud800.bin", 2), ("a.bin", 0)],
                         ids=["lone surrogate", "twin"])
def test_verify_refuses_a_manifest_path_no_file_name_holds(tmp_path, capsys, name, code):
    (tmp_path / "a.bin").write_bytes(b"hi\n")
    sha = hashlib.sha256(b"hi\n").hexdigest()
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
                                    "files": [{"path": name, "size": 3, "sha256": sha}]}))
    assert main(["verify", str(tmp_path), "--manifest", str(manifest)]) == code
    if code:
        assert "which no file name can" in capsys.readouterr().err


def test_an_undecodable_byte_is_a_file_name_still():
    """A surrogate that stands for a byte (a name that is no UTF-8) is kept."""
    entry = file_entry({"path": "a\udcff.bin", "sha256": "0" * 64}, "files[0]")
    assert entry.path == "a\udcff.bin"
    with pytest.raises(ManifestError):
        file_entry({"path": "a\ud800.bin", "sha256": "0" * 64}, "files[0]")
