"""The worker's torch-free reader of safetensors and GGUF files (`tensors.plain`) gives the
records the torch path gives, or leaves the file to it.

Each file is described both ways in this process (the `inspect` op's two paths, no jail):
`describe_file` must equal `inspect_op._with_torch` record for record, or answer None.
"""

from __future__ import annotations

import subprocess
import sys

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from inspector.core.progress import CancelToken
from inspector.sandbox.worker.inspect_op import _with_torch
from inspector.tensors.plain.reader import describe_file


def _torch_path(path, fmt: str) -> dict:
    """Records, objects and unique_storage as the torch path reports them."""
    events: list[dict] = []
    result = _with_torch({"path": str(path), "format": fmt, "_threads": 1, "_maps_fd": None},
                         events.append, CancelToken())
    records = [r for e in events if e["type"] == "tensors" for r in e["records"]]
    place = {k: n for n, k in enumerate(result["tensor_keys"])}
    return {"records": sorted(records, key=lambda r: place[r["key"]]),
            "objects": result["objects"], "unique_storage": result["unique_storage"]}


def _plain(path, fmt: str) -> dict | None:
    found = describe_file(str(path), fmt)
    return None if found is None else {"records": found.records, "objects": found.objects,
                                       "unique_storage": found.unique_storage}


def _mixed() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    base = torch.randn(8, 5, generator=g)
    return {
        "w32": base, "w16": base.half(), "wbf": base.bfloat16(), "flat": torch.full((7,), 2.0),
        "i8": torch.randint(-100, 100, (3, 4), dtype=torch.int8, generator=g),
        "u8": torch.randint(0, 255, (9,), dtype=torch.uint8, generator=g),
        "i16": torch.randint(-3000, 3000, (2, 2, 3), dtype=torch.int16, generator=g),
        "u16": torch.arange(6, dtype=torch.int32).to(torch.uint16), "scalar": torch.tensor(1.5),
        "ones": torch.ones(1, 4, 1),
    }


def test_a_safetensors_file_of_small_tensors_reads_as_with_torch(tmp_path) -> None:
    path = tmp_path / "m.safetensors"
    save_file(_mixed(), path)
    found = _plain(path, "safetensors")
    assert found is not None
    assert found == _torch_path(path, "safetensors")


@pytest.mark.parametrize("change", ["nan", "large", "float64", "empty", "bool"])
def test_what_only_torch_describes_is_left_to_it(tmp_path, change) -> None:
    state = _mixed()
    if change == "nan":
        state["w32"][1, 1] = float("nan")
    elif change == "large":
        state["big"] = torch.zeros(70_000)
    elif change == "float64":
        state["d"] = torch.zeros(3, dtype=torch.float64)
    elif change == "empty":
        state["e"] = torch.zeros(0)
    else:
        state["flags"] = torch.tensor([True, False])
    path = tmp_path / "m.safetensors"
    save_file(state, path)
    assert _plain(path, "safetensors") is None
    assert _torch_path(path, "safetensors")["records"]  # the torch path still reads it


def test_a_gguf_file_reads_as_with_torch(tmp_path) -> None:
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("blk.0.attn_q.weight", np.arange(18 * 2, dtype=np.uint8).reshape(2, 18),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("blk.0.norm.weight", np.linspace(-1, 1, 32, dtype=np.float32))
    w.add_tensor("blk.0.ffn.weight", np.linspace(-2, 2, 24, dtype=np.float16).reshape(4, 6))
    w.add_tensor("blk.0.idx", np.arange(5, dtype=np.int8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    found = _plain(path, "gguf")
    assert found is not None and len(found["objects"]) == 1
    assert found == _torch_path(path, "gguf")


def test_reading_a_plain_file_imports_no_torch(tmp_path) -> None:
    path = tmp_path / "m.safetensors"
    save_file(_mixed(), path)
    code = ("import sys; from inspector.sandbox.worker.inspect_op import inspect;"
            "from inspector.core.progress import CancelToken;"
            f"inspect({{'path': {str(path)!r}, 'format': 'safetensors', '_threads': 1,"
            "'_maps_fd': None}, lambda e: None, CancelToken());"
            "print('torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip() == "False"
