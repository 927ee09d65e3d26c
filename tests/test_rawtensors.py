"""The readers the user's process checks the worker with (`rawtensors`): what they compute
from a file's bytes, without torch, equals what torch computes from the loaded tensors, and
what they cannot read whole they refuse (then the worker's answer is only reported)."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from inspector.cli import main
from inspector.rawtensors.readers import NotReadable, open_raw
from inspector.rawtensors.values import measure
from inspector.tensors.describe import describe_tensors
from inspector.tensors.load import split_leaves


def _state() -> dict:
    g = torch.Generator().manual_seed(4)
    w = torch.randn(40, 30, generator=g)
    w[2, 3], w[5, 6], w[7, 8] = float("nan"), float("inf"), -float("inf")
    special = torch.tensor([float("nan"), float("inf"), 1.0, -2.0])
    return {
        "w": w, "view": w.t()[3:11], "tied": w,
        "f16": special.half(), "bf16": special.bfloat16(), "f64": special.double(),
        "c64": torch.tensor([complex(float("inf"), float("nan")), complex(float("nan"), 0), 1j]),
        "e4m3": special.to(torch.float8_e4m3fn), "e5m2": special.to(torch.float8_e5m2),
        "e4m3fnuz": special.to(torch.float8_e4m3fnuz), "i64": torch.arange(9),
        "flags": torch.tensor([True, False]), "empty": torch.zeros(0, 3),
    }


def _save(kind: str, path, state: dict) -> None:
    if kind == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items() if k not in ("view", "tied")},
                  path)
    else:
        if kind == "legacy":  # torch's legacy stream cannot load float8 back itself
            state = {k: v for k, v in state.items() if "float8" not in str(v.dtype)}
        plain = {"epoch": 3, "lr": 0.5, "name": "run", "none": None, "nested": [1.5, "x"],
                 # an optimizer's state is keyed by parameter index
                 "optimizer": {"state": {0: {"step": torch.tensor(4.0),
                                             "exp_avg": torch.full((3,), 0.5)}},
                               "param_groups": [{"params": [0], "lr": 0.1}]}}
        torch.save({**state, **plain}, path, _use_new_zipfile_serialization=kind == "zip")


@pytest.mark.parametrize("kind", ["zip", "legacy", "safetensors"])
def test_what_is_read_without_torch_equals_what_torch_loads(tmp_path, kind) -> None:
    path = tmp_path / "m.bin"
    _save(kind, path, _state())
    if kind == "safetensors":
        from safetensors.torch import load_file

        tensors = list(load_file(path).items())
    else:
        tensors = split_leaves(torch.load(path, weights_only=True))[0]
    records = {r["key"]: r for r in describe_tensors(tensors, lambda e: None, threads=1)}
    raw = open_raw(path)
    assert sorted(t.key for t in raw.tensors) == sorted(records)
    for t in raw.tensors:
        rec, m = records[t.key], measure(t)
        assert (t.dtype, list(t.shape), m.digest) == (rec["dtype"], rec["shape"], rec["digest"])
        assert (m.nan, m.inf) == (rec.get("nan"), rec.get("inf")), t.key
    assert measure(next(t for t in raw.tensors if t.key == "w")).nan == 1


def test_a_gguf_file_is_checked_end_to_end(tmp_path, capsys) -> None:
    gguf = pytest.importorskip("gguf", reason="gguf (llama.cpp's Python package) is dev extra")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    dense = np.arange(12, dtype=np.float32).reshape(3, 4)
    dense[1, 2] = np.nan
    w.add_tensor("dense", dense)
    w.add_tensor("half", np.array([np.inf, 1.0], dtype=np.float16))
    blocks = np.zeros((2, 34), dtype=np.uint8)  # two Q8_0 blocks: 32 values each
    w.add_tensor("q8", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and report["claims"]["checked"] is True
    assert report["claims"]["tensors"] == 3
    counts = {t["key"]: (t.get("nan"), t.get("inf")) for t in report["tensors"]}
    assert counts["dense"] == (1, 0) and counts["half"] == (0, 1)


def test_what_cannot_be_read_whole_is_refused_with_the_reason(tmp_path) -> None:
    quantized = tmp_path / "q.pt"
    torch.save({"q": torch.quantize_per_tensor(torch.ones(4), 0.5, 1, torch.qint8)}, quantized)
    sparse = tmp_path / "s.pt"
    torch.save({"s": torch.eye(3).to_sparse()}, sparse)
    legacy = tmp_path / "l.pt"
    torch.save({"w": torch.ones(4)}, legacy, _use_new_zipfile_serialization=False)
    longer = tmp_path / "longer.pt"
    longer.write_bytes(legacy.read_bytes() + b"\0")
    shorter = tmp_path / "shorter.pt"
    shorter.write_bytes(legacy.read_bytes()[:-1])
    for path, reason in ((quantized, "_rebuild_qtensor"), (sparse, "sparse"),
                         (longer, "follow the last storage"), (shorter, "size")):
        with pytest.raises(NotReadable, match=reason):
            open_raw(path)
    # what torch itself says of the two cut ones
    with pytest.raises(Exception):  # noqa: B017 - torch's own error type varies
        torch.load(shorter, weights_only=True)


def test_a_crafted_length_in_a_legacy_pickle_is_refused_before_anything_is_copied(
        tmp_path) -> None:
    path = tmp_path / "crafted.pt"
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    # BINUNICODE8 declaring 2**40 bytes: a reader that trusts it would copy the file (or fail
    # to allocate); this one refuses it at the window's edge
    huge = b"\x80\x02" + b"\x8d" + struct.pack("<Q", 1 << 40) + b"x" * 64 + b"."
    path.write_bytes(magic + huge)
    with pytest.raises(NotReadable, match="past the end"):
        open_raw(path)


def test_only_a_regular_file_is_opened(tmp_path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    with pytest.raises(NotReadable, match="regular file"):
        open_raw(fifo)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                   torch.float8_e5m2])
def test_binary_orders_counted_here_equal_the_workers_to_the_value(dtype) -> None:
    """Health judges a flipped exponent bit from these counts: the user's process counts them
    from the bytes exactly as the worker does, over every range and edge (zeros, NaN, Inf,
    subnormals, float32's last binade, values beyond float32 and below it)."""
    from inspector.rawtensors.orders import VALUES, Orders, order_of
    from inspector.tensors.stats import _ExponentCounts

    edges = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1e-320,
                          1e-45, 1.17e-38, 1e-39, 3.4028235e38, 3.40282356e38, 3.4028236e38,
                          2.0**128, -1e300], dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    limit = torch.finfo(dtype).max
    for scale in (1e-40, 1e-8, 1.0, 1e4, 1e30):
        values = torch.cat([torch.randn(4000, generator=gen, dtype=torch.float64) * scale, edges])
        t = values.clamp(-limit, limit).to(dtype) if dtype != torch.float64 else values
        finite = t[torch.isfinite(t)]
        worker = _ExponentCounts()
        worker.add(finite if dtype == torch.float64 else finite.to(torch.float32))
        here = Orders()
        here.add(VALUES[str(dtype).removeprefix("torch.")](
            memoryview(t.view(-1).view(torch.uint8).numpy().tobytes())))
        assert here.pairs() == worker.pairs(), (dtype, scale)
        nonzero = finite[finite != 0]
        if nonzero.numel() and dtype == torch.float32:
            assert order_of(float(nonzero.abs().max())) == here.pairs()[-1][0]


def test_the_top_orders_clear_a_clean_tensor_and_never_one_with_an_outlier() -> None:
    """One pass of two reductions a chunk proves a tensor free of outliers; a flipped exponent
    bit, in any chunk, leaves it to the exact count (a lower bound never clears it)."""
    from inspector.checkpoint.health import magnitude_outliers, outlier_tail
    from inspector.rawtensors.orders import Orders, Tops

    gen = torch.Generator().manual_seed(2)
    for flipped in (None, 0, 3):
        chunks = [torch.randn(50_000, generator=gen) * 0.02 for _ in range(4)]
        if flipped is not None:
            chunks[flipped][17] *= 2.0**64  # a set exponent bit
        tops, exact = Tops(20), Orders()
        for c in chunks:
            tops.add(c.numpy())
            exact.add(c.numpy())
        outliers = magnitude_outliers(exact.pairs(), 20)[0]
        assert outliers == (0 if flipped is None else 1)
        assert (tops.near > outlier_tail(tops.values)) == (flipped is None)
        assert tops.top == exact.pairs()[-1][0]
