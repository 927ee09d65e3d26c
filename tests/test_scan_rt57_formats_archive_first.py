"""Content an archive reader takes is read as that archive, whatever a pickle walk makes of it
(round 57).

`tar czf model.tar.gz -C folder .` names its first member './'; a '.' is pickle's STOP, so the
walk of the decoded content "reached STOP" and the scan read the whole `.tar.gz` as a
compressed pickle (suspicious: stack underflow) and never as a tar: a member that writes
outside the folder when unpacked, or a member pickle that runs a program when loaded, went
unseen. The same held for a tar inside a tar or a zip. Each hostile archive is proven under
the real loaders (`shutil.unpack_archive`, then `pickle.load`: the canary appears) and scanned
(dangerous; nothing of ours unpacks or loads it), beside a benign twin that stays safe.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from inspector.core.vocabulary import Verdict
from inspector.scan.engine import scan_file


class _Touch:
    """A pickle that creates `path` when loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _tar_bytes(members: list[tuple[str, bytes | None]]) -> bytes:
    """A tar as GNU `tar cf x.tar -C dir .` writes it: a './' folder first, then the files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        top = tarfile.TarInfo("./")
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
    return out.getvalue()


def _compressed_tar(path: Path, members: list[tuple[str, bytes | None]], mode: str) -> Path:
    with tarfile.open(fileobj=io.BytesIO(_tar_bytes(members))) as src, \
            tarfile.open(path, mode) as tar:
        for info in src.getmembers():
            tar.addfile(info, src.extractfile(info) if info.isreg() else None)
    return path


def _escaping_tar(first: str) -> bytes:
    """A GNU tar of one file named `first` (latin-1: any byte a magic needs) and one named
    `../escaped.txt`, which unpacking writes beside the folder."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT,
                      encoding="latin-1") as tar:
        for name in (first, "../escaped.txt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return out.getvalue()


def _dangerous_and_escapes_under_unpack(sample: Path, tmp_path: Path) -> None:
    """The scan calls `sample` dangerous (writes outside) and unpacks nothing; the real loader
    (shutil.unpack_archive) writes `escaped.txt` beside the folder it was given."""
    res = scan_file(sample)
    assert not (tmp_path / "escaped.txt").exists()  # the scan unpacks nothing
    assert res.verdict == Verdict.DANGEROUS
    assert any(f.code == "writes-outside" for f in res.findings)
    shutil.unpack_archive(sample, tmp_path / "unpacked")
    assert (tmp_path / "escaped.txt").exists()


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
def test_a_dot_slash_tar_that_writes_outside_is_read_as_a_tar(tmp_path: Path, mode: str) -> None:
    sample = _compressed_tar(tmp_path / f"model.tar.{mode[2:]}",
                             [("./weights.txt", b"w"), ("./../escaped.txt", b"x")], mode)
    _dangerous_and_escapes_under_unpack(sample, tmp_path)


def test_a_dot_slash_tar_gz_holding_a_hostile_pickle_is_dangerous(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    payload = pickle.dumps(_Touch(canary), protocol=2)
    sample = _compressed_tar(tmp_path / "model.tar.gz", [("./model.pkl", payload)], "w:gz")
    res = scan_file(sample)
    assert not canary.exists()
    assert res.verdict == Verdict.DANGEROUS
    assert any(u.module in ("os", "posix") and u.name == "system" for u in res.globals)
    shutil.unpack_archive(sample, tmp_path / "unpacked")
    with open(tmp_path / "unpacked" / "model.pkl", "rb") as fh:
        pickle.load(fh)  # the real loader runs it
    assert canary.exists()


def test_the_benign_dot_slash_twin_is_safe(tmp_path: Path) -> None:
    benign = pickle.dumps({"lr": 0.1, "steps": [1, 2]}, protocol=2)
    sample = _compressed_tar(tmp_path / "model.tar.gz", [("./model.pkl", benign)], "w:gz")
    assert scan_file(sample).verdict == Verdict.SAFE


@pytest.mark.parametrize("outer", ["tar", "zip"])
def test_a_dot_slash_tar_inside_an_archive_is_opened(tmp_path: Path, outer: str) -> None:
    canary = tmp_path / "canary"
    # protocol 0: no PROTO opcode, so no carving of the raw bytes finds it either
    inner = _tar_bytes([("./model.pkl", pickle.dumps(_Touch(canary), protocol=0))])
    sample = tmp_path / f"bundle.{outer}"
    if outer == "zip":
        with zipfile.ZipFile(sample, "w") as z:
            z.writestr("inner.tar", inner)
    else:
        with tarfile.open(sample, "w") as t:
            info = tarfile.TarInfo("./inner.tar")  # as `tar cf` writes it, './' first
            info.size = len(inner)
            t.addfile(info, io.BytesIO(inner))
    res = scan_file(sample)
    assert not canary.exists()
    assert res.verdict == Verdict.DANGEROUS
    shutil.unpack_archive(sample, tmp_path / "outer", outer)
    shutil.unpack_archive(tmp_path / "outer" / "inner.tar", tmp_path / "inner")
    with open(tmp_path / "inner" / "model.pkl", "rb") as fh:
        pickle.load(fh)
    assert canary.exists()


def _weak_checksum_tar(members: list[tuple[str, bytes]]) -> bytes:
    """A tar whose first header writes its checksum '0_NNNNN': `int(s, 8)` reads the
    underscore, so tarfile takes the header; a strict octal check refuses it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = bytearray(out.getvalue())
    raw[148:156] = b" " * 8
    raw[148:156] = b"0_%05o\x00" % sum(raw[:512])  # tarfile sums the field as spaces
    tarfile.TarInfo.frombuf(bytes(raw[:512]), "utf-8", "surrogateescape")
    return bytes(raw)


def test_a_tar_gz_whose_header_only_tarfile_takes_is_read_as_a_tar(tmp_path: Path) -> None:
    sample = tmp_path / "model.tar.gz"
    sample.write_bytes(gzip.compress(_weak_checksum_tar(
        [("weights.txt", b"w"), ("../escaped.txt", b"x")])))
    _dangerous_and_escapes_under_unpack(sample, tmp_path)


_OTHER_MAGIC = {"zip": "PK\x03\x04notes", "npy": "\x93NUMPYx", "bz2": "BZh91AY&SYx",
                "xz": "\xfd7zXZ\x00x", "zstd": "(\xb5/\xfdx", "lz4": "\x04\"M\x18x"}


@pytest.mark.parametrize("magic", sorted(_OTHER_MAGIC))
@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_a_tar_whose_first_name_opens_with_another_magic_is_read_as_a_tar(
        tmp_path: Path, magic: str, mode: str) -> None:
    # the other format's parse fails on the tar; tarfile unpacks it all the same
    sample = tmp_path / ("model.tar" if mode == "w" else "model.tar.gz")
    data = _escaping_tar(_OTHER_MAGIC[magic])
    sample.write_bytes(gzip.compress(data) if mode == "w:gz" else data)
    _dangerous_and_escapes_under_unpack(sample, tmp_path)


def test_a_tar_that_is_also_a_zip_is_read_as_a_tar_too(tmp_path: Path) -> None:
    # its first name opens 'PK\x03\x04' and a zip ends it: zip readers find the zip, tarfile the tar
    tar_part = io.BytesIO(_escaping_tar("PK\x03\x04notes"))
    zip_part = io.BytesIO()
    with zipfile.ZipFile(zip_part, "w") as z:
        z.writestr("readme.txt", "hello")
    sample = tmp_path / "model.tar"
    sample.write_bytes(tar_part.getvalue() + zip_part.getvalue())
    _dangerous_and_escapes_under_unpack(sample, tmp_path)


def test_a_plain_zip_and_torch_save_stay_safe(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, tmp_path / "model.pt")
    res = scan_file(tmp_path / "model.pt")
    assert res.verdict == Verdict.SAFE
    assert not any(f.code == "polyglot" for f in res.findings)
