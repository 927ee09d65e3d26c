"""`manifest create DIR --signature SIG` of a signature over one file alone (its item is `.`,
as `model_signing sign key FILE` and the ledger write it) wrote a manifest naming the folder
itself with that file's digest, which `verify -m` then failed ('a folder, not a regular
file'); now refused with nothing written, as `verify DIR` refuses it. Beside its twin: a
folder's signature exports a manifest that verifies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from signing_keys import write_key

from inspector.cli import main


def _reference_sign(target: Path, private: Path, signature: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "model_signing", "sign", "key", str(target),
                           "--private_key", str(private), "--signature", str(signature)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_one_file_signature_exports_no_folder_manifest(tmp_path, capsys) -> None:
    (tmp_path / "keys").mkdir()
    private, public = write_key(tmp_path / "keys", "signer")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"weights" * 100)
    one_file, whole = tmp_path / "weights.bin.sig", tmp_path / "model.sig"
    _reference_sign(folder / "weights.bin", private, one_file)
    _reference_sign(folder, private, whole)

    twin = tmp_path / "twin.sha256"
    assert main(["manifest", "create", str(folder), "--signature", str(whole),
                 "--public-key", str(public), "-o", str(twin)]) == 0
    assert main(["verify", "-m", str(twin), str(folder)]) == 0
    capsys.readouterr()

    out = tmp_path / "one.sha256"
    assert main(["manifest", "create", str(folder), "--signature", str(one_file),
                 "--public-key", str(public), "-o", str(out)]) == 2
    assert "signs one file, not a folder" in capsys.readouterr().err
    assert not out.exists()
