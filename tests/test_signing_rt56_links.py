"""A signed name reached through a symbolic link, where the signer allowed none (the reference
tool signs with `allow_symlinks: false` and refuses any link when it verifies): a folder on
the way to a signed file, or a signed file itself, replaced by a link to an identical copy
was 'intact' here (only the last part of a folder's name was looked at, and a file signed
alone not at all), while `model_signing verify key` refuses both. Each case beside its twin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from signing_keys import write_key

from inspector.cli import main
from inspector.signing.folder import LINK_NOTE


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """A P-256 key pair (private, public)."""
    (tmp_path / "keys").mkdir()
    return write_key(tmp_path / "keys", "signer")


def _reference(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "model_signing", *map(str, args)],
                          capture_output=True, text=True, check=False)


def _reference_verifies(target: Path, signature: Path, public: Path) -> bool:
    return _reference("verify", "key", target, "--signature", signature,
                      "--public_key", public).returncode == 0


def _signed_folder(tmp_path: Path, private: Path) -> tuple[Path, Path]:
    """A model folder with a weights file in a sub-folder, signed by the reference tool."""
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 8)
    (folder / "config.json").write_text('{"hidden_size": 8}\n')
    signature = tmp_path / "model.sig"
    done = _reference("sign", "key", folder, "--private_key", private, "--signature", signature)
    assert done.returncode == 0, done.stderr
    return folder, signature


def test_a_folder_on_the_way_to_a_signed_file_replaced_by_a_link_is_not_intact(
        tmp_path, keys, capsys) -> None:
    private, public = keys
    folder, signature = _signed_folder(tmp_path, private)
    args = ["verify", str(folder), "--signature", str(signature), "--public-key", str(public)]
    assert _reference_verifies(folder, signature, public)
    assert main(args) == 0  # the twin: no link, intact for both
    capsys.readouterr()

    # the signed `sub/weights.bin` now read through `sub -> real`: the same bytes
    (folder / "sub").rename(folder / "real")
    (folder / "sub").symlink_to("real")
    assert (folder / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 8
    assert not _reference_verifies(folder, signature, public)
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "changed" in out.splitlines()[0]
    line = next(x for x in out.splitlines() if "sub/weights.bin" in x)
    assert line.startswith("MISMATCH") and "link" in line


def test_a_file_signed_alone_replaced_by_a_link_is_not_intact(tmp_path, keys,
                                                             capsys) -> None:
    private, public = keys
    weights = tmp_path / "ckpt" / "step-1.pt"
    weights.parent.mkdir()
    weights.write_bytes(b"\x80\x02weights" * 64)
    signature = weights.with_name("step-1.pt.sig")
    assert _reference("sign", "key", weights, "--private_key", private, "--signature",
                      signature).returncode == 0
    args = ["verify", str(weights), "--public-key", str(public)]
    assert _reference_verifies(weights, signature, public)
    assert main(args) == 0
    capsys.readouterr()

    copy = tmp_path / "elsewhere.pt"
    shutil.copyfile(weights, copy)
    weights.unlink()
    weights.symlink_to(copy)
    assert not _reference_verifies(weights, signature, public)
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "changed" in out.splitlines()[0]
    assert any(x.startswith("MISMATCH") and LINK_NOTE in x for x in out.splitlines())
