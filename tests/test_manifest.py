"""Manifest dialects: parsed from real tool output and real-looking samples, written back."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from inspector.core.atomic import OutputExistsError
from inspector.integrity.manifest import (
    FileEntry,
    ManifestError,
    TensorEntry,
    parse_manifest,
    read_manifest,
    relative_path,
    write_manifest,
)

H1 = hashlib.sha256(b"one").hexdigest()
H2 = hashlib.sha256(b"two").hexdigest()


def _files(tmp_path: Path) -> dict[str, bytes]:
    """A checkpoint folder whose names need care: spaces, a backslash, a subfolder."""
    contents = {
        "model.safetensors": b"weights" * 100,
        "pytorch model (copy).bin": b"copy",
        "back\\slash.pt": b"slash",
        "shards/model-00001-of-00002.safetensors": b"shard1",
    }
    for name, data in contents.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return contents


def _expected(contents: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="coreutils sha256sum not installed")
@pytest.mark.parametrize("flags", [[], ["-b"], ["--tag"]], ids=["text", "binary", "tag"])
def test_reads_real_sha256sum_output(tmp_path: Path, flags: list[str]) -> None:
    contents = _files(tmp_path)
    out = subprocess.run(
        ["sha256sum", *flags, *contents], cwd=tmp_path, capture_output=True, check=True
    ).stdout
    (tmp_path / "SHA256SUMS").write_bytes(out)
    manifest = read_manifest(tmp_path / "SHA256SUMS")
    assert manifest.dialect == ("bsd" if flags == ["--tag"] else "sha256sum")
    assert {f.path: f.sha256 for f in manifest.files} == _expected(contents)
    assert manifest.resolve(manifest.files[0]) == tmp_path / "model.safetensors"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_reads_real_openssl_dgst_output(tmp_path: Path) -> None:
    contents = _files(tmp_path)
    names = [n for n in contents if "\\" not in n]
    out = subprocess.run(
        ["openssl", "dgst", "-sha256", *names], cwd=tmp_path, capture_output=True, check=True
    ).stdout
    manifest = parse_manifest(out.decode())
    assert manifest.dialect == "bsd"
    assert {f.path: f.sha256 for f in manifest.files} == {
        n: h for n, h in _expected(contents).items() if n in names
    }


def test_escaped_names_round_trip_through_real_sha256sum_check(tmp_path: Path) -> None:
    contents = {"new\nline.bin": b"a", "back\\slash.bin": b"b", "cr\rname.bin": b"c"}
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    entries = [FileEntry(path=n, sha256=h) for n, h in _expected(contents).items()]
    write_manifest(tmp_path / "sums.sha256", entries)
    text = (tmp_path / "sums.sha256").read_text()
    assert text.count("\n") == 3 and all(line.startswith("\\") for line in text.splitlines())
    assert {f.path: f.sha256 for f in read_manifest(tmp_path / "sums.sha256").files} == (
        _expected(contents)
    )
    if shutil.which("sha256sum"):
        check = subprocess.run(
            ["sha256sum", "-c", "sums.sha256"], cwd=tmp_path, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr


def test_crlf_and_spaces_and_binary_marker() -> None:
    text = f"{H1} *model weights.bin\r\n{H2}  tokenizer config.json\r\n\r\n"
    manifest = parse_manifest(text)
    assert [(f.path, f.sha256) for f in manifest.files] == [
        ("model weights.bin", H1),
        ("tokenizer config.json", H2),
    ]


def test_bsd_names_with_parentheses_and_uppercase_hex() -> None:
    text = f"SHA256 (ckpt (epoch 3).pt) = {H1.upper()}\nSHA2-256(b.bin)= {H2}\n"
    manifest = parse_manifest(text)
    assert manifest.dialect == "bsd"
    assert [(f.path, f.sha256) for f in manifest.files] == [
        ("ckpt (epoch 3).pt", H1),
        ("b.bin", H2),
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"{H1}  a.bin\n{H2[:-1]}  b.bin\n", 2),
        (f"{H1}  a.bin\n\n{H2}\n", 3),
        (f"{H1}  a.bin\nMD5 (b.bin) = {H2[:32]}\n", 2),
        (f"\\{H1}  bad\\qescape\n", 1),
        (f"{H1}  a.bin\n{H2}  a.bin\n", 2),
    ],
    ids=["short-hash", "no-name", "md5", "bad-escape", "duplicate"],
)
def test_malformed_checksum_lines_name_the_line(text: str, line: int) -> None:
    with pytest.raises(ManifestError, match=rf"^SHA256SUMS:{line}: "):
        parse_manifest(text, name="SHA256SUMS")


def test_tsv_with_extra_columns_bom_and_crlf() -> None:
    text = (
        "\ufeffpath\tsize\tsha256\tepoch\tnote\r\n"
        f"checkpoints/step 1000.pt\t1234\t{H1}\t1\tfirst save\r\n"
        f"checkpoints/step 2000.pt\t\t{H2}\t2\t\r\n"
    )
    manifest = parse_manifest(text, name="checksum_manifest.tsv")
    assert manifest.dialect == "tsv"
    assert [(f.path, f.size, f.sha256) for f in manifest.files] == [
        ("checkpoints/step 1000.pt", 1234, H1),
        ("checkpoints/step 2000.pt", None, H2),
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (f"a.pt\t12\t{H1}\textra", "expected 3 tab-separated columns, found 4"),
        (f"a.pt\ttwelve\t{H1}", "size 'twelve' is not a non-negative integer"),
        ("a.pt\t12\tnot-a-hash", "is not 64 hex digits"),
    ],
)
def test_malformed_tsv_rows_name_the_line(row: str, message: str) -> None:
    text = f"path\tsize\tsha256\nok.pt\t1\t{H2}\n{row}\n"
    with pytest.raises(ManifestError, match=rf"^m.tsv:3: .*{message}"):
        parse_manifest(text, name="m.tsv")


def test_git_lfs_pointer() -> None:
    text = f"version https://git-lfs.github.com/spec/v1\noid sha256:{H1}\nsize 4933\n"
    manifest = parse_manifest(text, name="repo/model.safetensors")
    assert manifest.dialect == "git-lfs"
    assert [(f.path, f.sha256, f.size) for f in manifest.files] == [("model.safetensors", H1, 4933)]
    with pytest.raises(ManifestError, match="no 'oid sha256"):
        parse_manifest("version https://git-lfs.github.com/spec/v1\nsize 3\n", name="p")


def test_sharded_index_maps_keys_to_shards() -> None:
    index = {
        "metadata": {"total_size": 123},
        "weight_map": {
            "embed.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
            "layers.0.weight": "model-00001-of-00002.safetensors",
        },
    }
    manifest = parse_manifest(json.dumps(index, indent=2))
    assert manifest.dialect == "index" and manifest.has_tensors
    assert {f.path: [t.key for t in f.tensors] for f in manifest.files} == {
        "model-00001-of-00002.safetensors": ["embed.weight", "layers.0.weight"],
        "model-00002-of-00002.safetensors": ["lm_head.weight"],
    }


def test_json_manifest_round_trip_with_tensors(tmp_path: Path) -> None:
    tensors = [TensorEntry("fc.weight", "float32", (4, 3), H1, "sha256"), TensorEntry("step")]
    entries = [
        FileEntry("model (final).pt", H2, 99, "pytorch-zip", tensors),
        FileEntry("notes.txt", H1, 3),
    ]
    target = tmp_path / "manifest.json"
    assert write_manifest(target, entries, created_by="test") == "json"
    assert json.loads(target.read_text())["schema_version"] == 1
    manifest = read_manifest(target)
    assert manifest.dialect == "json" and manifest.files == entries
    with pytest.raises(OutputExistsError):
        write_manifest(target, entries)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schema": "ckpt-inspector-manifest", "schema_version": 99, "files": []}, "99"),
        ({"files": []}, "neither"),
        (
            {"schema": "ckpt-inspector-manifest", "schema_version": 1, "files": [{"size": 1}]},
            r"files\[0\]: file record needs a 'path'",
        ),
    ],
)
def test_json_manifest_errors(doc: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(json.dumps(doc))


def test_invalid_json_names_the_line() -> None:
    with pytest.raises(ManifestError, match=r"^m.json:3: invalid JSON"):
        parse_manifest('{\n "schema": 1,\n "files": [,]\n}', name="m.json")


@pytest.mark.parametrize("suffix", [".tsv", ".sha256", ".txt"])
def test_written_text_dialects_read_back(tmp_path: Path, suffix: str) -> None:
    entries = [FileEntry("a b/model 1.pt", H1, 10), FileEntry("c.bin", H2, 0)]
    target = tmp_path / f"sums{suffix}"
    write_manifest(target, entries)
    back = read_manifest(target).files
    assert [(f.path, f.sha256) for f in back] == [(e.path, e.sha256) for e in entries]
    if suffix == ".tsv":
        assert [f.size for f in back] == [10, 0]


def test_refuses_absolute_paths_and_unknown_extensions(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="must be relative"):
        parse_manifest(f"{H1}  /etc/passwd\n")
    with pytest.raises(ManifestError, match="cannot tell the manifest format"):
        write_manifest(tmp_path / "m.yaml", [FileEntry("a", H1)])
    with pytest.raises(ManifestError, match="cannot read manifest"):
        read_manifest(tmp_path / "absent.sha256")
    with pytest.raises(ManifestError, match="empty"):
        parse_manifest("\n\n")


def test_relative_path_uses_forward_slashes(tmp_path: Path) -> None:
    assert relative_path(tmp_path / "a" / "b c.pt", tmp_path) == "a/b c.pt"
    assert relative_path(tmp_path / "x.pt", tmp_path / "sub") == "../x.pt"
