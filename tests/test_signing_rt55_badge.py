"""The app's signature badge speaks of the open checkpoint: a file in a signed folder that the
folder's `model.sig` does not sign (added after signing, of a format no loader rule flags) is
"Not signed", beside a signed twin file in the same folder that is "Signed · intact"; switching
between the two under the same signature (no second hashing) repaints for each."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from gui_support import shown_badge
from signing_keys import write_key

from inspector.cli import main
from inspector.core.vocabulary import SignatureState
from inspector.gui.jobs import JobRunner
from inspector.gui.signing.badge import TRUSTED_KEYS_ENV, SignatureBadge, check_path, trusted_keys


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.pkl").write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    pem, pub = write_key(tmp_path, "key")
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    (model / "optimizer.pkl").write_bytes(pickle.dumps({"lr": 0.1}))  # after signing
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(pub))
    return model


def test_a_file_the_folder_signature_does_not_sign_is_not_signed(qtbot, folder) -> None:
    assert shown_badge(qtbot, folder / "weights.pkl").state == SignatureState.INTACT
    added = check_path(folder / "optimizer.pkl", trusted_keys())
    assert added.check.verdict.state == SignatureState.INTACT  # the signed files are intact
    badge = shown_badge(qtbot, folder / "optimizer.pkl")
    assert badge.state == SignatureState.UNSIGNED
    assert "optimizer.pkl is not among the 1 file" in badge.text()


def test_switching_files_under_one_signature_repaints_for_each(qtbot, folder) -> None:
    runner = JobRunner()
    badge = SignatureBadge(runner)
    qtbot.addWidget(badge)
    badge.show_path(folder / "weights.pkl")
    qtbot.waitUntil(lambda: badge.state is not None, timeout=30_000)
    assert badge.state == SignatureState.INTACT
    badge.show_path(folder / "optimizer.pkl")
    assert badge.state == SignatureState.UNSIGNED and badge.text().startswith("Not signed")
    badge.show_path(folder / "weights.pkl")
    assert badge.state == SignatureState.INTACT
    runner.shutdown()


def test_a_file_with_its_own_signature_in_a_signed_folder_is_checked_by_it(qtbot, folder,
                                                                          tmp_path) -> None:
    import subprocess
    import sys

    checkpoint = folder / "step-1.bin"
    checkpoint.write_bytes(b"weights" * 100)
    done = subprocess.run([sys.executable, "-m", "model_signing", "sign", "key",
                           str(checkpoint), "--private_key", str(tmp_path / "key.pem"),
                           "--signature", f"{checkpoint}.sig"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert shown_badge(qtbot, checkpoint).state == SignatureState.INTACT
    checkpoint.write_bytes(b"weights" * 99)
    assert shown_badge(qtbot, checkpoint).state == SignatureState.CHANGED


def test_a_bundle_naming_no_key_is_checked_with_the_trusted_key_that_holds(qtbot, folder,
                                                                          tmp_path,
                                                                          monkeypatch) -> None:
    import json

    # older signers wrote no hint: `verify --public-key` and the reference accept it
    document = json.loads((folder / "model.sig").read_text())
    del document["verificationMaterial"]["publicKey"]["hint"]
    (folder / "model.sig").write_text(json.dumps(document))
    other = write_key(tmp_path, "other")[1]
    (tmp_path / "unreadable.pub").write_text("not a key")
    trusted = [tmp_path / "unreadable.pub", other, tmp_path / "key.pub"]
    monkeypatch.setenv(TRUSTED_KEYS_ENV, ":".join(map(str, trusted)))
    assert main(["verify", str(folder), "--public-key", str(tmp_path / "key.pub")]) == 0
    assert shown_badge(qtbot, folder / "weights.pkl").state == SignatureState.INTACT
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(other))
    assert shown_badge(qtbot, folder / "weights.pkl").state == SignatureState.UNVERIFIED
