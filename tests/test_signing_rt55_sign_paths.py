"""Where a signature lies against what it signs: `sign --force` through a linked path into the
folder it signs leaves its old signature out (else it signed it, then replaced it, and the
fresh signature failed), beside a twin signed through the folder's own path; a signature of one
file checked against a folder says so in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from signing_keys import write_key

from inspector.cli import main


def _model(folder: Path) -> Path:
    folder.mkdir()
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 16)
    return folder


def test_sign_force_through_a_linked_path_leaves_the_old_signature_out(tmp_path,
                                                                       capsys) -> None:
    pem, pub = write_key(tmp_path, "key")
    direct, linked = _model(tmp_path / "direct"), _model(tmp_path / "linked")
    (tmp_path / "link").symlink_to(linked)
    for folder, via in ((direct, direct), (linked, tmp_path / "link")):
        for extra in ([], ["--force"]):
            assert main(["sign", str(folder), "--private-key", str(pem), "--signature",
                         str(via / "own.sig"), *extra]) == 0
    capsys.readouterr()
    for folder in (direct, linked):
        assert main(["verify", str(folder), "--signature", str(folder / "own.sig"),
                     "--public-key", str(pub)]) == 0, capsys.readouterr().out
        assert "1 file signed" in capsys.readouterr().out


def test_a_one_file_signature_against_a_folder_is_one_clear_line(tmp_path, capsys) -> None:
    pem, pub = write_key(tmp_path, "key")
    folder = _model(tmp_path / "model")
    signature = tmp_path / "weights.bin.sig"
    done = subprocess.run([sys.executable, "-m", "model_signing", "sign", "key",
                           str(folder / "weights.bin"), "--private_key", str(pem),
                           "--signature", str(signature)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert main(["verify", str(folder / "weights.bin"), "--signature", str(signature),
                 "--public-key", str(pub)]) == 0
    capsys.readouterr()
    assert main(["verify", str(folder), "--signature", str(signature),
                 "--public-key", str(pub)]) == 2
    err = capsys.readouterr().err
    assert "signs one file, not a folder" in err and len(err.strip().splitlines()) == 1


def test_sign_force_never_replaces_a_file_that_is_no_signature(tmp_path, capsys) -> None:
    pem, pub = write_key(tmp_path, "key")
    folder = _model(tmp_path / "model")
    weights = (folder / "weights.bin").read_bytes()
    assert main(["sign", str(folder), "--private-key", str(pem), "--signature",
                 str(folder / "weights.bin"), "--force"]) == 4
    assert "is not a signature" in capsys.readouterr().err
    assert (folder / "weights.bin").read_bytes() == weights
    assert main(["sign", str(folder), "--private-key", str(pem)]) == 0
    whole = (folder / "model.sig").read_bytes()
    (folder / "model.sig").write_bytes(whole[:len(whole) // 2])  # cut short by a crash
    for _ in range(2):  # a damaged signature, then a whole one, are replaced
        assert main(["sign", str(folder), "--private-key", str(pem), "--force"]) == 0
    assert main(["verify", str(folder), "--public-key", str(pub)]) == 0
