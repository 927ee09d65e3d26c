"""A folder named through a link is the folder: its own manifest or signature, reached through
the link, is never reported as an unlisted extra, and `--strict` passes as on the real path."""

from __future__ import annotations

from pathlib import Path

import pytest
from signing_keys import write_key

from inspector.cli import main


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    real = tmp_path / "model"
    real.mkdir()
    (real / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (real / "config.json").write_text('{"hidden": 8}')
    link = tmp_path / "linked"
    link.symlink_to(real, target_is_directory=True)
    return real, link


@pytest.mark.parametrize("named, through", [("link", "real"), ("real", "link")])
def test_a_signature_reached_through_a_link_is_not_an_extra(linked, tmp_path, capsys, named,
                                                            through) -> None:
    real, link = linked
    pem, pub = write_key(tmp_path, "alice")
    assert main(["sign", str(real), "--private-key", str(pem)]) == 0
    capsys.readouterr()
    folder = link if named == "link" else real
    signature = (real if through == "real" else link) / "model.sig"
    code = main(["verify", str(folder), "--signature", str(signature), "--public-key", str(pub),
                 "--strict"])
    out = capsys.readouterr().out
    assert "NOT IN MANIFEST" not in out
    assert out.rstrip().endswith("2 files: 2 ok") and code == 0


def test_a_manifest_reached_through_a_link_is_not_an_extra(linked, capsys) -> None:
    real, link = linked
    assert main(["manifest", "create", str(real), "-o", str(real / "SHA256SUMS")]) == 0
    capsys.readouterr()
    code = main(["verify", str(link), "-m", str(real / "SHA256SUMS"), "--strict",
                 "--no-tensors"])
    out = capsys.readouterr().out
    assert "NOT IN MANIFEST" not in out and code == 0, out
