"""A manifest's numbers are what their own format writes: a TSV or Git LFS size of ASCII
digits (not "３", which `str.isdigit` takes and no other reader would, nor "²", which `int`
then refused with a traceback), and in a JSON manifest a size, a tensor's dimension and the
schema version that are integers, not JSON's true (which Python counts as 1). Each is shown
beside its clean twin."""

from __future__ import annotations

import hashlib
import json

import pytest

from inspector.cli import main
from inspector.integrity.manifest import SCHEMA, ManifestError, parse_manifest

DATA = b"abc"
DIGEST = hashlib.sha256(DATA).hexdigest()


def tsv(size: str) -> str:
    return f"path\tsha256\tsize\na.bin\t{DIGEST}\t{size}\n"


def lfs(size: str) -> str:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{DIGEST}\nsize {size}\n"


def doc(size: object = 3, version: object = 1, shape: object = (3,)) -> str:
    return json.dumps({"schema": SCHEMA, "schema_version": version, "files": [
        {"path": "a.bin", "sha256": DIGEST, "size": size,
         "tensors": [{"key": "w", "shape": list(shape), "digest": DIGEST}]}]})


@pytest.mark.parametrize("text", [tsv, lfs])
@pytest.mark.parametrize("size", ["\uff13", "\u00b3", "\u0663"])
def test_a_size_is_ascii_digits(text, size):
    assert parse_manifest(text("3"), "m").files[0].size == 3
    with pytest.raises(ManifestError, match="not a non-negative integer"):
        parse_manifest(text(size), "m")


@pytest.mark.parametrize(("field", "bad"), [("size", True), ("version", True),
                                           ("shape", (True,))])
def test_json_true_is_no_number(field, bad):
    assert parse_manifest(doc(), "m").files[0].size == 3
    with pytest.raises(ManifestError):
        parse_manifest(doc(**{field: bad}), "m")


def test_verify_refuses_a_superscript_size(tmp_path, capsys):
    (tmp_path / "a.bin").write_bytes(DATA)
    (tmp_path / "good.tsv").write_text(tsv("3"), encoding="utf-8")
    (tmp_path / "bad.tsv").write_text(tsv("\u00b3"), encoding="utf-8")
    good = main(["verify", "--manifest", str(tmp_path / "good.tsv"), str(tmp_path / "a.bin")])
    assert good == 0
    capsys.readouterr()
    bad = main(["verify", "--manifest", str(tmp_path / "bad.tsv"), str(tmp_path / "a.bin")])
    err = capsys.readouterr().err
    assert bad != 0 and "size" in err and "Traceback" not in err
