"""One rule for which signature covers a checkpoint, shared by `verify`, `report` and the app
(`signing.locate`): a folder save signed as the ledger signs it (`step-3.sig` beside the
folder) was 'changed' in the app's badge, a usage error to `verify DIR --public-key` ('no
model.sig found') and 'unsigned' in the report; a file signed alone (`NAME.sig`, the ledger's
and `model_signing sign key FILE`'s form) with a changed byte was 'changed' to `verify` and the
badge, and SAFE with no signature state at all in the report, key given. Each beside its
intact twin; a file its folder's `model.sig` leaves out is unsigned in the report as in the
badge."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from signing_keys import write_key

from inspector.cli import main
from inspector.core.vocabulary import SignatureState
from inspector.gui.signing.badge import badge_for, check_path


def _safetensors(path: Path, data: bytes = bytes(16)) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [len(data) // 4],
                               "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def _reference_sign(target: Path, private: Path, signature: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "model_signing", "sign", "key", str(target),
                           "--private_key", str(private), "--signature", str(signature)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """A P-256 key pair (private, public)."""
    (tmp_path / "keys").mkdir()
    return write_key(tmp_path / "keys", "signer")


def _report_states(path: Path, public: Path, capsys) -> list[str]:
    capsys.readouterr()
    main(["report", str(path), "--public-key", str(public), "-o", "-", "--quiet"])
    return [v["state"] for v in json.loads(capsys.readouterr().out)["signatures"]]


def _badge(path: Path, public: Path) -> SignatureState:
    return badge_for(check_path(path, [public]), path)[0]


def _all_three(target: Path, public: Path, capsys) -> tuple[int, list[str], SignatureState]:
    status = main(["verify", str(target), "--public-key", str(public), "--quiet"])
    return status, _report_states(target, public, capsys), _badge(target, public)


@pytest.mark.parametrize("form", ["folder save", "file alone"])
def test_verify_report_and_badge_find_the_same_signature(tmp_path, keys, capsys,
                                                         form) -> None:
    private, public = keys
    run = tmp_path / "run"
    if form == "folder save":
        target = run / "step-3"
        target.mkdir(parents=True)
        weights = target / "model.safetensors"
    else:
        run.mkdir()
        target = weights = run / "model.safetensors"
    _safetensors(weights)
    _reference_sign(target, private, target.with_name(target.name + ".sig"))

    assert _all_three(target, public, capsys) == (0, ["intact"], SignatureState.INTACT)
    _safetensors(weights, bytes.fromhex("0000803f") + bytes(12))  # one weight changed
    assert _all_three(target, public, capsys) == (1, ["changed"], SignatureState.CHANGED)


def test_a_file_its_folder_signature_leaves_out_is_unsigned_in_the_report(tmp_path, keys,
                                                                          capsys) -> None:
    private, public = keys
    folder = tmp_path / "model"
    folder.mkdir()
    _safetensors(folder / "model.safetensors")
    _reference_sign(folder, private, folder / "model.sig")
    assert _report_states(folder / "model.safetensors", public, capsys) == ["intact"]
    _safetensors(folder / "model-extra.safetensors")  # added after signing

    # the folder is changed by an unsigned checkpoint beside a signed one; that one is unsigned
    assert _report_states(folder / "model.safetensors", public, capsys) == ["changed"]
    assert _report_states(folder / "model-extra.safetensors", public, capsys) == ["unsigned"]
    assert _badge(folder / "model-extra.safetensors", public) == SignatureState.UNSIGNED
