"""The dtype registry against the installed torch and safetensors, and every dtype's round trip."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.checkpoint import bitflip
from inspector.cli import main
from inspector.core import dtypes
from inspector.layout import torch_save as torch_layout
from inspector.tensors.load import SAFETENSORS_DTYPES


def _torch_dtypes() -> list[torch.dtype]:
    found = {getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    return sorted(found, key=str)


def _sample(dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(5, 8, generator=g) > 0.5
    raw = torch.randint(0, 256, (5, 8 * dtype.itemsize), generator=g, dtype=torch.uint8)
    return raw.view(dtype)


def _safetensors_code(dtype: torch.dtype) -> str | None:
    """The code the installed safetensors writes for dtype, if it round-trips at all."""
    t = _sample(dtype, 0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "t.safetensors")
        try:
            save_file({"t": t}, path)
            back = load_file(path)["t"]
        except (KeyError, RuntimeError, ValueError, TypeError):
            return None
        if back.dtype != dtype or back.shape != t.shape:
            return None
        blob = path.read_bytes()
    length = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8 : 8 + length])["t"]["dtype"]


KNOWN_TO_BOTH = [d for d in _torch_dtypes() if _safetensors_code(d) is not None]


def test_registry_covers_every_torch_dtype_and_agrees_with_safetensors() -> None:
    for dtype in _torch_dtypes():
        name = str(dtype).removeprefix("torch.")
        if re.fullmatch(r"bits\w*|u?int[1-7]", name):
            continue  # sub-byte placeholders (bits8, int4, uint3...) with no storage of their own
        record = dtypes.BY_NAME.get(name)
        assert record is not None, f"registry lacks {name}"
        assert record.itemsize == dtype.itemsize, name
        code = _safetensors_code(dtype)
        if code is not None and record.safetensors is not None:
            assert record.safetensors == code, name
        if record.fields and record.kind == "float":
            sign, exp, man = record.fields
            assert sign + exp + man == dtype.itemsize * 8, name
    assert len(KNOWN_TO_BOTH) >= 18
    for dtype in KNOWN_TO_BOTH:
        name = str(dtype).removeprefix("torch.")
        if dtypes.BY_NAME[name].safetensors is None:
            # torch's packed float4 holds two values per element; safetensors' F4 counts them
            assert name == "float4_e2m1fn_x2"
            continue
        assert SAFETENSORS_DTYPES[dtype] == dtypes.BY_NAME[name].safetensors
        assert dtypes.BY_SAFETENSORS[dtypes.BY_NAME[name].safetensors].bits == dtype.itemsize * 8
        assert bitflip.layout_for(name).itemsize == dtype.itemsize
        assert dtypes.canonical_dtype(dtypes.BY_NAME[name].safetensors) == name
    assert torch_layout.STORAGE_DTYPES["torch.FloatStorage"] == ("float32", 4)
    assert torch_layout.V3_DTYPES["float8_e4m3fnuz"] == 1


def _round_trip(tmp_path: Path, state: dict[str, torch.Tensor], capsys) -> None:
    pt, st = tmp_path / "m.pt", tmp_path / "m.safetensors"
    torch.save(state, pt)
    assert main(["convert", str(pt)]) == 0
    assert main(["scan", str(st), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["verdict"] == "safe"
    assert main(["diff", str(pt), str(st)]) == 0
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(pt), "-o", str(manifest)]) == 0
    assert main(["verify", str(st), "--manifest", str(manifest), "--tensors-only"]) == 0
    capsys.readouterr()


def test_float8_e4m3fnuz_converts_scans_safe_diffs_identical_and_verifies(tmp_path, capsys):
    """The case of issue 11: convert said verified, scan said suspicious, diff refused."""
    _round_trip(tmp_path, {"w": torch.randn(4, 4).to(torch.float8_e4m3fnuz)}, capsys)


def test_every_dtype_both_know_round_trips(tmp_path: Path, capsys) -> None:
    state = {str(d).removeprefix("torch."): _sample(d, i) for i, d in enumerate(KNOWN_TO_BOTH)
             if dtypes.BY_NAME[str(d).removeprefix("torch.")].safetensors}
    assert "float8_e8m0fnu" in state and "uint64" in state
    _round_trip(tmp_path, state, capsys)


@pytest.mark.parametrize("spelling", ["F8_E4M3FNUZ", "torch.float8_e4m3fnuz", "float8_e4m3fnuz"])
def test_canonical_names(spelling: str) -> None:
    assert dtypes.canonical_dtype(spelling) == "float8_e4m3fnuz"
    assert dtypes.lookup(spelling).safetensors == "F8_E4M3FNUZ"
