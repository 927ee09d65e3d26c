"""`verify` reads a manifest as a claim: names resolve inside one folder and never outside it,
an entry that compares nothing is refused, only a regular manifest file of sane size is read,
and a manifest kept in a parent folder checks the model folder the user names."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from inspector.cli import main
from inspector.integrity.manifest import SCHEMA


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "hf"
    model.mkdir()
    for i in (1, 2):
        (model / f"pytorch_model-0000{i}.bin").write_bytes(os.urandom(4096))
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"not yours")
    return {"root": tmp_path, "model": model, "secret": secret}


DIALECTS = {
    "sha256sum": lambda name, digest: f"{digest}  {name}\n",
    "bsd": lambda name, digest: f"SHA256 ({name}) = {digest}\n",
    "tsv": lambda name, digest: f"path\tsha256\n{name}\t{digest}\n",
    "json": lambda name, digest: json.dumps({"schema": SCHEMA, "schema_version": 1, "files": [
        {"path": name, "sha256": digest}]}),
}


@pytest.mark.parametrize("dialect", list(DIALECTS))
@pytest.mark.parametrize("name", ["../secret.key", "sub/../../secret.key", "link/secret.key"])
def test_a_name_that_leaves_the_folder_is_refused_and_never_read(layout, capsys, dialect, name):
    model, secret = layout["model"], layout["secret"]
    (model / "link").symlink_to(layout["root"], target_is_directory=True)
    suffix = {"json": ".json", "tsv": ".tsv"}.get(dialect, ".sha256")
    manifest = model / f"sums{suffix}"
    manifest.write_text(DIALECTS[dialect](name, _sha(secret)))
    code = main(["verify", "-m", str(manifest)])
    err = capsys.readouterr().err
    assert code == 2 and "outside" in err and "Traceback" not in err, err


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_a_name_holding_a_nul_byte_is_one_clear_error(layout, capsys, dialect):
    model = layout["model"]
    suffix = {"json": ".json", "tsv": ".tsv"}.get(dialect, ".sha256")
    manifest = model / f"sums{suffix}"
    manifest.write_text(DIALECTS[dialect]("pytorch_model-\0.bin", "0" * 64))
    code = main(["verify", "-m", str(manifest)])
    err = capsys.readouterr().err
    assert code == 2 and "holds a NUL byte, which no file name can" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("dialect", ["sha256sum", "bsd", "tsv"])
@pytest.mark.parametrize("spelling", ["sub/../{}", "./././{}", ".//{}", "{}/", "{}/."])
def test_a_file_listed_again_under_another_spelling_is_never_dropped(layout, capsys, dialect,
                                                                    spelling):
    """A second entry for a file, with a wrong digest, under a spelling the system reads as the
    same file: a folder's files are matched to one entry each, so it went unchecked (exit 0)."""
    model = layout["model"]
    name = "pytorch_model-00001.bin"
    good, wrong = DIALECTS[dialect](name, _sha(model / name)), DIALECTS[dialect](
        spelling.format(name), "0" * 64)
    if dialect == "tsv":
        wrong = wrong.split("\n", 1)[1]
    suffix = {"tsv": ".tsv"}.get(dialect, ".sha256")
    manifest = model / f"sums{suffix}"
    manifest.write_text(good + wrong)
    code = main(["verify", str(model), "-m", str(manifest), "--strict"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "listed twice" in err or "names a folder" in err, err


def test_a_json_tensor_listed_twice_is_refused(layout, capsys):
    model = layout["model"]
    name = "pytorch_model-00001.bin"
    tensor = {"key": "w", "digest": "1" * 64, "digest_algorithm": "sha256"}
    manifest = model / "sums.json"
    manifest.write_text(json.dumps({"schema": SCHEMA, "schema_version": 1, "files": [
        {"path": name, "sha256": _sha(model / name),
         "tensors": [tensor, {**tensor, "digest": "0" * 64}]}]}))
    assert main(["verify", str(model), "-m", str(manifest)]) == 2
    assert "files[0]: tensor 'w' is listed twice" in capsys.readouterr().err


def test_a_json_key_given_twice_is_refused(layout, capsys):
    """Python keeps the last of two values, another reader the first: neither is believed."""
    model = layout["model"]
    name = "pytorch_model-00001.bin"
    manifest = model / "sums.json"
    manifest.write_text(f'{{"schema": "{SCHEMA}", "schema_version": 1, "files": [{{"path": '
                        f'"{name}", "sha256": "{"0" * 64}", "sha256": "{_sha(model / name)}"}}]}}')
    assert main(["verify", str(model), "-m", str(manifest)]) == 2
    assert "the key 'sha256' is given twice" in capsys.readouterr().err


def test_a_json_entry_with_nothing_to_compare_is_refused(layout, capsys):
    manifest = layout["model"] / "m.json"
    manifest.write_text(json.dumps({"schema": SCHEMA, "schema_version": 1,
                                    "files": [{"path": "pytorch_model-00001.bin"}]}))
    assert main(["verify", "-m", str(manifest)]) == 2
    assert "nothing could be compared" in capsys.readouterr().err


def test_a_fifo_or_a_link_to_a_device_is_refused_at_once(layout, capsys):
    fifo = layout["root"] / "sums.sha256"
    os.mkfifo(fifo)
    done = threading.Event()
    result: list[int] = []
    worker = threading.Thread(target=lambda: (result.append(main(["verify", "-m", str(fifo)])),
                                              done.set()), daemon=True)
    worker.start()
    assert done.wait(20), "verify waited on a FIFO"
    assert result == [2] and "regular file" in capsys.readouterr().err
    zero = layout["root"] / "zero.sha256"
    zero.symlink_to("/dev/zero")
    assert main(["verify", "-m", str(zero)]) == 2
    assert "not a character device" in capsys.readouterr().err


def test_deeply_nested_json_is_one_clear_error(layout, capsys):
    manifest = layout["model"] / "deep.json"
    manifest.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    assert main(["verify", "-m", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err


def test_a_manifest_in_the_parent_folder_checks_the_model_folder_named(layout, capsys,
                                                                       monkeypatch):
    root, model = layout["root"], layout["model"]
    # cd hf && sha256sum pytorch_model-*.bin > ../SHA256SUMS
    lines = [f"{_sha(p)}  {p.name}\n" for p in sorted(model.glob("*.bin"))]
    (root / "SHA256SUMS").write_text("".join(lines))
    monkeypatch.chdir(root)
    assert main(["verify", "hf", "-m", "SHA256SUMS"]) == 0
    assert "2 files: 2 ok" in capsys.readouterr().out
    (model / "pytorch_model-00002.bin").write_bytes(b"changed")
    assert main(["verify", "hf", "-m", "SHA256SUMS"]) == 1


def test_a_linked_folder_or_file_is_reported_never_read_through(layout, capsys):
    """A folder link in the model folder is neither followed nor silently dropped: verify
    names it beside every linked file the manifest does not list, and --strict fails on it."""
    root, model = layout["root"], layout["model"]
    outside = root / "elsewhere"
    outside.mkdir()
    (outside / "evil.pkl").write_bytes(b"\x80\x02N.")
    lines = [f"{_sha(p)}  {p.name}\n" for p in sorted(model.glob("*.bin"))]
    (model / "SHA256SUMS").write_text("".join(lines))
    (model / "extra").symlink_to(outside, target_is_directory=True)
    (model / "key.bin").symlink_to(layout["secret"])
    assert main(["verify", str(model), "-m", str(model / "SHA256SUMS")]) == 0
    out = capsys.readouterr().out
    assert f"extra  (a link to a folder ({outside}): not followed" in out, out
    assert f"key.bin  (a link to {layout['secret']})" in out, out
    assert "evil.pkl" not in out
    assert main(["verify", str(model), "-m", str(model / "SHA256SUMS"), "--strict"]) == 1


@pytest.mark.parametrize("link", ["folder", "file", "dangling", "dangling named"])
def test_manifest_create_refuses_a_link_verify_could_not_check(layout, capsys, link):
    root, model = layout["root"], layout["model"]
    elsewhere = root.parent / f"{root.name}-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "w.bin").write_bytes(b"weights kept elsewhere")
    if link == "folder":
        (model / "sub").symlink_to(elsewhere, target_is_directory=True)
    elif link == "file":
        (model / "w.bin").symlink_to(elsewhere / "w.bin")
    else:
        (model / "w.bin").symlink_to(model / "gone.bin")
    out = model / "SHA256SUMS"
    named = [str(model / "w.bin")] if link == "dangling named" else [str(model)]
    assert main(["manifest", "create", *named, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "remove the link" in err, err
    if link.startswith("dangling"):
        assert f"a link to {model / 'gone.bin'}, which does not exist" in err
    assert not out.exists()


def test_manifest_create_records_a_link_inside_the_folder(layout, capsys):
    model = layout["model"]
    (model / "alias.bin").symlink_to("pytorch_model-00001.bin")
    out = model / "SHA256SUMS"
    assert main(["manifest", "create", str(model), "-o", str(out)]) == 0
    assert "alias.bin" in out.read_text()
    assert main(["verify", "-m", str(out), "--strict"]) == 0, capsys.readouterr()
