"""The app's "Signed" badge: checked in a background job with the trusted keys, in each state
(intact, changed naming the file, not verified, not signed, invalid), for a folder's model.sig
(a key's, and a Sigstore keyless one checked against a trust root the test makes)
and for a file the reference tool signed alone; opening a signed checkpoint shows it in the
Integrity pane."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from gui_support import shown_badge, wait_loaded
from signing_keys import write_key
from sigstore_local import LocalSigstore, sign_keylessly

from inspector.cli import main
from inspector.core.vocabulary import SignatureState
from inspector.gui.signing.badge import (
    TRUST_ROOT_ENV,
    TRUSTED_KEYS_ENV,
    TRUSTED_SIGNERS_ENV,
    statement_html,
)

pytest_plugins = ("gui_fixtures",)  # fixtures: window, small, worker_requests


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (folder / "config.json").write_text("{}")
    pem, pub = write_key(tmp_path, "key")
    assert main(["sign", str(folder), "--private-key", str(pem)]) == 0
    return folder, pub


def test_each_state_of_the_badge(qtbot, signed, monkeypatch, tmp_path) -> None:
    folder, pub = signed
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(pub))
    badge = shown_badge(qtbot, folder / "weights.bin")
    assert badge.state == SignatureState.INTACT
    assert badge.text().startswith("Signed · intact: ECDSA P-256 key sha256:")
    assert "weights.bin" in statement_html(badge.shown)

    data = bytearray((folder / "weights.bin").read_bytes())
    data[100] ^= 0x01
    (folder / "weights.bin").write_bytes(bytes(data))
    badge = shown_badge(qtbot, folder / "weights.bin")
    assert badge.state == SignatureState.CHANGED and "weights.bin" in badge.text()

    monkeypatch.setenv(TRUSTED_KEYS_ENV, "")
    assert shown_badge(qtbot, folder / "config.json").state == SignatureState.UNVERIFIED

    (folder / "model.sig").write_text('{"mediaType": "application/vnd.dev.sigstore.bundle')
    assert shown_badge(qtbot, folder / "config.json").state == SignatureState.INVALID

    (folder / "model.sig").unlink()
    badge = shown_badge(qtbot, folder / "config.json")
    assert badge.state == SignatureState.UNSIGNED and badge.text().startswith("Not signed")


def test_a_file_the_reference_signed_alone(qtbot, tmp_path, monkeypatch) -> None:
    pem, pub = write_key(tmp_path, "key")
    target = tmp_path / "step-1.bin"
    target.write_bytes(b"weights" * 100)
    done = subprocess.run([sys.executable, "-m", "model_signing", "sign", "key", str(target),
                           "--private_key", str(pem), "--signature", f"{target}.sig"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(pub))
    assert shown_badge(qtbot, target).state == SignatureState.INTACT
    assert main(["verify", str(target), "--public-key", str(pub)]) == 0
    target.write_bytes(b"weights" * 99)
    assert shown_badge(qtbot, target).state == SignatureState.CHANGED
    assert main(["verify", str(target), "--public-key", str(pub)]) == 1


def test_opening_a_signed_checkpoint_shows_the_badge(window, qtbot, small, tmp_path,
                                                     monkeypatch, artifacts) -> None:
    folder = tmp_path / "signed"
    folder.mkdir()
    checkpoint = folder / "benign.pt"
    checkpoint.write_bytes((small[0] / "benign.pt").read_bytes())
    pem, pub = write_key(tmp_path, "key")
    assert main(["sign", str(folder), "--private-key", str(pem)]) == 0
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(pub))
    (doc,) = window.open_paths([checkpoint])
    wait_loaded(qtbot, doc)
    badge = window.integrity.badge
    qtbot.waitUntil(lambda: badge.state == SignatureState.INTACT, timeout=30_000)
    assert badge.isVisibleTo(window.integrity)
    # the line shows the key's first 16 digits, so it fits the pane; the tooltip holds all 64
    assert re.search(r"sha256:[0-9a-f]{16}…$", badge.text())
    assert re.search(r"sha256:[0-9a-f]{64}", badge.toolTip())
    window.integrity.grab().save(str(artifacts / "gui" / "integrity-signed.png"))


def test_a_keyless_signature_in_the_badge(qtbot, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    _instance, root = sign_keylessly(folder, tmp_path, "bot@example.org",
                                     "https://issuer.example")
    monkeypatch.delenv(TRUST_ROOT_ENV, raising=False)
    badge = shown_badge(qtbot, folder / "weights.bin")
    assert badge.state == SignatureState.UNVERIFIED  # no trust root: never passed

    monkeypatch.setenv(TRUST_ROOT_ENV, str(root))
    monkeypatch.setenv(TRUSTED_SIGNERS_ENV, "bot@example.org=https://issuer.example")
    badge = shown_badge(qtbot, folder / "weights.bin")
    assert badge.state == SignatureState.INTACT and "sigstore bot@example.org" in badge.text()

    monkeypatch.setenv(TRUSTED_SIGNERS_ENV, "someone@example.org=https://issuer.example")
    assert shown_badge(qtbot, folder / "weights.bin").state == SignatureState.UNVERIFIED

    other = LocalSigstore().write_trusted_root(tmp_path / "other_root.json")
    monkeypatch.setenv(TRUST_ROOT_ENV, str(other))
    monkeypatch.setenv(TRUSTED_SIGNERS_ENV, "bot@example.org=https://issuer.example")
    assert shown_badge(qtbot, folder / "weights.bin").state == SignatureState.INVALID
