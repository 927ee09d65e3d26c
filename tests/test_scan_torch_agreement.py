"""`weights_only_ok` agrees with the installed torch where readers disagree: duplicate and
case-variant `data.pkl` members (torch's miniz reader sorts the directory and searches it
case-insensitively), back-to-back archives (.distcp), safetensors, DCP metadata and torch's
legacy tar format."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from factories import (
    _legacy_tar,
    _torch_zip_bytes,
    call,
    save_safetensors,
    save_state_dict,
    small_state_dict,
    touch_cmd,
)
from test_scan_weights_only import _compare, torch_verdicts


def _with_second_data_pkl(src: bytes, payload: bytes, before: bool, rename: str = "") -> bytes:
    """Copy a torch zip adding `payload` as another data.pkl, before or after the real one."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            name = info.filename
            extra = name.endswith("/data.pkl")
            if extra and before:
                zout.writestr(zipfile.ZipInfo(rename or name), payload)
            zout.writestr(zipfile.ZipInfo(name), zin.read(name))
            if extra and not before:
                zout.writestr(zipfile.ZipInfo(rename or name), payload)
    return out.getvalue()


def _variants(folder: Path, canary: Path) -> list[Path]:
    import torch

    paths = []
    payload = call("os", "system", touch_cmd(canary))
    for n in (1, 3, 8, 20):
        src_path = save_state_dict(folder / f"base{n}.pt", {f"t{i}": torch.ones(i + 1)
                                                             for i in range(n)})
        src = src_path.read_bytes()
        prefix = next(i.filename for i in zipfile.ZipFile(src_path).infolist()).split("/")[0]
        for before in (True, False):
            for rename in ("", f"{prefix}/DATA.pkl"):
                path = folder / f"dup{n}-{before}-{bool(rename)}.pt"
                path.write_bytes(_with_second_data_pkl(src, payload, before, rename))
                paths.append(path)
    case = folder / "upper.pt"
    with zipfile.ZipFile(io.BytesIO(_torch_zip_bytes(folder))) as zin, \
            zipfile.ZipFile(case, "w") as zout:
        for info in zin.infolist():
            name = info.filename.replace("/data.pkl", "/DATA.PKL")
            zout.writestr(zipfile.ZipInfo(name), zin.read(info.filename))
    paths.append(case)
    paths.append(save_safetensors(folder / "model.safetensors"))
    tar = folder / "legacy.tar.pt"
    tar.write_bytes(_legacy_tar(b"\x80\x02K\x00.\x80\x02].", b"\x80\x02K\x00.", b"\x80\x02}."))
    paths.append(tar)
    return paths


def _dcp(folder: Path) -> list[Path]:
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(small_state_dict(), checkpoint_id=str(folder))
    return sorted(p for p in folder.iterdir() if p.is_file())


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_weights_only_ok_agrees_with_torch(tmp_path, canary, python_exe):
    samples = tmp_path / "samples"
    samples.mkdir()
    paths = _variants(samples, canary) + _dcp(tmp_path / "dcp")
    results = torch_verdicts(python_exe, [str(p) for p in paths], tmp_path)
    assert _compare(results) == []
    loaded = {Path(p).name for p, e in results.items() if e is None}
    # teeth: torch reads the payload copy in some duplicate layouts and the real one in others
    dups = {p.name for p in paths if p.name.startswith("dup")}
    assert loaded & dups and dups - loaded
    assert "upper.pt" in loaded  # DATA.PKL is data.pkl to torch's reader
    assert "model.safetensors" in loaded  # by its name, through safetensors
    assert not {"legacy.tar.pt", ".metadata"} & loaded


def test_weights_only_ok_agrees_with_torch_on_adversarial_and_fuzz_seeds(tmp_path, canary,
                                                                         python_exe):
    from factories import ADVERSARIAL_BUILDERS, fuzz_seeds

    folder = tmp_path / "adv"
    folder.mkdir()
    paths = [build(folder / f"{name}.bin", canary)
             for name, (_, build) in sorted(ADVERSARIAL_BUILDERS.items())]
    paths += fuzz_seeds(tmp_path / "seeds")
    results = torch_verdicts(python_exe, [str(p) for p in paths], tmp_path)
    assert _compare(results) == []
    assert not (tmp_path / "seeds" / "CANARY_EXECUTED").exists()
