"""Conversion to safetensors: round trips verified bit for bit, aliases, clones, sidecar."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path

import factories
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from inspector.cli import main
from inspector.core.progress import CancelToken
from inspector.sandbox.host.client import SandboxError, convert_file, sidecar_path
from inspector.sandbox.worker.convert import (
    Writeback,
    header_bytes,
    plan_tensors,
    verify_output,
    write_stream,
)
from inspector.tensors.load import LoadError
from inspector.tensors.mapped import PageReleaser, open_maps

pytest_plugins = ("sandbox_fixtures",)  # fixture: unchanged


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _model_state() -> dict:
    g = torch.Generator().manual_seed(1)
    embed = torch.randn(10, 4, generator=g)
    layer = torch.randn(6, 5, generator=g)
    return {
        "embed.weight": embed,
        "lm_head.weight": embed,  # tied
        "layer.weight": layer,
        "layer.rows": layer[2:5],  # partial view
        "layer.t": layer.t(),  # non-contiguous view of the same storage
        "bf16": torch.randn(7, 3, generator=g).to(torch.bfloat16),
        "f16": torch.randn(3, generator=g).half(),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
        "mask": torch.tensor([True, False, True]),
    }


def test_state_dict_round_trip_with_tied_weights_views_and_bfloat16(tmp_path, capsys, unchanged):
    state = _model_state()
    source = unchanged(factories.save_state_dict(tmp_path / "model.pt", state))
    out = tmp_path / "model.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] is True and report["mismatches"] == []
    assert report["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert report["aliases"] == {"lm_head.weight": "embed.weight"}
    assert sorted(report["cloned_views"]) == ["layer.rows", "layer.t"]
    assert report["sidecar"] is None and not sidecar_path(out).exists()
    loaded = load_file(out)
    assert set(loaded) == set(state) - {"lm_head.weight"}
    for key, tensor in loaded.items():
        assert tensor.dtype == state[key].dtype and tensor.shape == state[key].shape, key
        assert _bits(tensor) == _bits(state[key]), key
    with safe_open(out, framework="pt") as handle:
        assert handle.metadata() == {"format": "pt", "lm_head.weight": "embed.weight",
                                     "ckpt-inspector.aliases": '{"lm_head.weight": "embed.weight"}'}
    assert report["tensors_written"] == len(loaded)
    assert not list(tmp_path.glob(".*.tmp")), "temp file left behind"


def test_training_checkpoint_tensors_and_sidecar(tmp_path, unchanged):
    ckpt = factories.training_checkpoint()
    ckpt["hparams"] = {"lr": 1e-3, "betas": (0.9, 0.999), "name": "adam", "size": torch.Size([2]),
                       "dtype": torch.float16, "bad": float("nan"), "raw": b"\x00\x01"}
    ckpt["quantized"] = torch.quantize_per_tensor(torch.ones(4), 0.5, 1, torch.qint8)
    ckpt["sparse"] = torch.eye(3).to_sparse()
    source = unchanged(factories.save_state_dict(tmp_path / "train.pt", ckpt))
    events = []
    report = convert_file(source, tmp_path / "train.safetensors", on_event=events.append)
    assert report["verified"] is True
    loaded = load_file(tmp_path / "train.safetensors")
    assert "optimizer.state.0.exp_avg_sq" in loaded and "model.0.weight" in loaded
    assert _bits(loaded["optimizer.state.0.exp_avg"]) == _bits(
        ckpt["optimizer"]["state"][0]["exp_avg"])
    assert report["tensors_skipped"] == [] and set(report["encoded"]) == {"quantized", "sparse"}
    assert {"quantized::int_repr", "sparse::indices", "sparse::values"} <= set(loaded)
    sidecar = json.loads(Path(report["sidecar"]).read_text())
    assert sidecar["values"]["epoch"] == 3 and sidecar["values"]["hparams.lr"] == 1e-3
    assert sidecar["values"]["hparams.betas.1"] == 0.999
    assert sidecar["values"]["hparams.size"] == [2]
    assert sidecar["types"]["hparams.size"] == "torch.Size"
    assert sidecar["values"]["optimizer.param_groups.0.lr"] == 1e-3
    assert {o["key"] for o in sidecar["not_serializable"]} == {"hparams.bad", "hparams.raw"}
    assert {o["key"] for o in report["not_serializable"]} == {"hparams.bad", "hparams.raw"}
    stages = {e.get("stage") for e in events if e["type"] == "progress"}
    assert {"load", "write", "verify"} <= stages


def test_existing_output_and_the_input_itself_are_refused(tmp_path, capsys, unchanged):
    source = unchanged(factories.save_state_dict(tmp_path / "m.pt"))
    existing = tmp_path / "exists.safetensors"
    existing.write_bytes(b"keep me")
    unchanged(existing)
    with pytest.raises(SandboxError) as info:
        convert_file(source, existing)
    assert info.value.code == "output_exists"
    with pytest.raises(SandboxError) as info:
        convert_file(source, source, overwrite=True)
    assert info.value.code == "output_is_input"
    assert main(["convert", str(source), "-o", str(existing)]) == 4
    assert "exists" in capsys.readouterr().err
    assert main(["convert", str(source), "-o", str(tmp_path / "missing" / "o.safetensors")]) == 4
    assert "cannot write" in capsys.readouterr().err


def test_dangerous_input_is_not_converted(tmp_path, canary, unchanged):
    source = unchanged(factories.mal_zip_data_pkl(tmp_path / "evil.pt", canary))
    assert main(["convert", str(source)]) == 2
    assert not (tmp_path / "evil.safetensors").exists()


def _plan_and_write(tmp_path: Path, state: dict) -> tuple[Path, object, dict, dict]:
    plan = plan_tensors(list(state.items()))
    metadata = {"format": "pt", **plan.aliases}
    out = tmp_path / "direct.safetensors"
    fd = os.open(out, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        digests, file_sha = write_stream(fd, plan, metadata, None, CancelToken(), lambda e: None)
    finally:
        os.close(fd)
    assert file_sha == hashlib.sha256(out.read_bytes()).hexdigest()
    return out, plan, digests, metadata


def test_verification_catches_a_flipped_bit(tmp_path):
    out, plan, digests, metadata = _plan_and_write(tmp_path, _model_state())
    assert verify_output(str(out), plan, digests, metadata, None, lambda e: None) == []
    data = bytearray(out.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    with safe_open(out, framework="pt") as handle:
        begin = json.loads(data[8 : 8 + header_len])["layer.weight"]["data_offsets"][0]
        assert "layer.weight" in handle.keys()  # noqa: SIM118 - safe_open is not a dict
    data[8 + header_len + begin + 5] ^= 0x10
    out.write_bytes(bytes(data))
    assert verify_output(str(out), plan, digests, metadata, None, lambda e: None) == [
        "layer.weight"]


def _mapped_resident(path: Path) -> int:
    """Bytes of this process's mappings of path that are resident now."""
    resident, current = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                current = len(fields) >= 6 and fields[5] == str(path)
            elif current and fields[0] == "Rss:":
                resident += int(fields[1]) * 1024
    return resident


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc/self/smaps")
def test_verification_gives_back_the_output_pages_it_has_hashed(tmp_path, monkeypatch):
    # a 32 MiB tensor verified in 1 MiB parts: without the release every page read stays
    # resident until the window's handle closes (a 475 MiB shard held 475 MiB of it)
    monkeypatch.setattr("inspector.sandbox.worker.convert.CHUNK_BYTES", 1 << 20)
    out, plan, digests, metadata = _plan_and_write(
        tmp_path, {"big": torch.randn(8 << 20, generator=torch.Generator().manual_seed(2))})
    path = Path(os.path.realpath(out))
    peaks = []

    class Watched(PageReleaser):
        def __call__(self, address: int, nbytes: int) -> None:
            peaks.append(_mapped_resident(path))  # the part just hashed is still resident
            super().__call__(address, nbytes)

    maps_fd = open_maps()
    fd = os.open(out, os.O_RDONLY)
    try:
        assert verify_output(str(out), plan, digests, metadata, None, lambda e: None,
                             Watched(maps_fd, fd)) == []
    finally:
        os.close(fd)
        os.close(maps_fd)
    assert len(peaks) == 32
    assert max(peaks) <= 8 << 20


def test_header_is_aligned_and_offsets_are_contiguous():
    plan = plan_tensors(list(_model_state().items()))
    header = header_bytes(plan.entries, {"format": "pt"})
    assert len(header) % 8 == 0
    parsed = json.loads(header[8:])
    spans = [parsed[k]["data_offsets"] for k, _ in plan.entries]
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_plan_keeps_the_complete_tensor_and_clones_partial_views():
    base = torch.arange(12.0)
    plan = plan_tensors([("b.view", base[:4]), ("a.full", base), ("c.same", base),
                         ("d.alone", torch.ones(2).expand(3, 2))])
    assert plan.aliases == {"c.same": "a.full"}
    assert plan.cloned == ["b.view"]
    assert plan.made_contiguous == ["d.alone"]
    assert [k for k, _ in plan.entries] == ["b.view", "a.full", "d.alone"]


def test_writeback_in_small_stretches_writes_the_same_file(tmp_path, monkeypatch):
    plain, plan, digests, metadata = _plan_and_write(tmp_path, _model_state())
    monkeypatch.setattr(Writeback, "STRETCH", 64)  # a flush after nearly every chunk
    out = tmp_path / "flushed.safetensors"
    fd = os.open(out, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with Writeback(fd) as writeback:
            flushed = write_stream(fd, plan, metadata, None, CancelToken(), lambda e: None,
                                   writeback)
    finally:
        os.close(fd)
    assert out.read_bytes() == plain.read_bytes()
    assert flushed == (digests, hashlib.sha256(plain.read_bytes()).hexdigest())


def test_a_failed_background_flush_fails_the_conversion():
    # A pipe cannot be flushed to disk (EINVAL): the failure must surface, not be swallowed.
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(LoadError) as info, Writeback(write_end) as writeback:
            os.write(write_end, b"x")
            writeback.advance(1, final=True)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert info.value.code == "output_unwritable"


def _quantized_and_sparse() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 4, generator=g)
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 2, 0, 5], [1, 3, 1, 0]]),
                                  torch.randn(4, generator=g), (6, 4))  # uncoalesced: 0,1 twice
    hybrid = torch.sparse_coo_tensor(torch.tensor([[1, 4]]), torch.randn(2, 3, generator=g),
                                     (6, 3)).coalesce()
    dense = torch.where(x > 0.5, x, 0.0)
    return {
        "q.per_tensor.qint8": torch.quantize_per_tensor(x, 0.037, 3, torch.qint8),
        "q.per_tensor.quint8": torch.quantize_per_tensor(x, 0.05, 128, torch.quint8),
        "q.per_tensor.qint32": torch.quantize_per_tensor(x, 1e-4, -7, torch.qint32),
        "q.per_channel.axis0": torch.quantize_per_channel(
            x, torch.rand(6, generator=g, dtype=torch.float64) / 10 + 0.01,
            torch.arange(6) - 3, 0, torch.qint8),
        "q.per_channel.axis1": torch.quantize_per_channel(
            x, torch.rand(4, generator=g, dtype=torch.float64) / 10 + 0.01,
            torch.tensor([0, 1, 2, 3]), 1, torch.quint8),
        "q.symmetric": torch.quantize_per_tensor(x, 0.02, 0, torch.qint8),
        "sparse.coo": coo,
        "sparse.hybrid": hybrid,
        "sparse.csr": dense.to_sparse_csr(),
        "sparse.csc": dense.to_sparse_csc(),
        "sparse.bsr": dense.to_sparse_bsr((2, 2)),
        "dense": x,
    }


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and a.layout == b.layout
    if a.is_quantized:
        assert _bits(a.int_repr()) == _bits(b.int_repr())
        assert a.qscheme() in (b.qscheme(), torch.per_tensor_symmetric)
        if a.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            assert (a.q_scale(), a.q_zero_point()) == (b.q_scale(), b.q_zero_point())
        else:
            assert _bits(a.q_per_channel_scales()) == _bits(b.q_per_channel_scales())
            assert _bits(a.q_per_channel_zero_points()) == _bits(b.q_per_channel_zero_points())
            assert a.q_per_channel_axis() == b.q_per_channel_axis()
    elif a.layout == torch.sparse_coo:
        assert a.is_coalesced() == b.is_coalesced()
        assert _bits(a._indices()) == _bits(b._indices())
        assert _bits(a._values()) == _bits(b._values())
    elif a.layout != torch.strided:
        for part in ("crow_indices", "col_indices") if a.layout in (
                torch.sparse_csr, torch.sparse_bsr) else ("ccol_indices", "row_indices"):
            assert _bits(getattr(a, part)()) == _bits(getattr(b, part)())
        assert _bits(a.values()) == _bits(b.values())
    else:
        assert _bits(a) == _bits(b)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_quantized_and_sparse_round_trip_bit_for_bit(tmp_path, capsys, unchanged):
    from inspector.tensors.encoded import METADATA_KEY, decode_file

    state = _quantized_and_sparse()
    source = unchanged(factories.save_state_dict(tmp_path / "qs.pt", state))
    out = tmp_path / "qs.safetensors"
    report = convert_file(source, out)
    assert report["verified"] is True and report["tensors_skipped"] == []
    assert report["tensors_in_input"] == len(state)
    assert set(report["encoded"]) == set(state) - {"dense"}
    with safe_open(out, framework="pt") as handle:
        metadata = handle.metadata()
    assert json.loads(metadata[METADATA_KEY])["q.per_channel.axis1"]["axis"] == 1
    rebuilt = decode_file(load_file(out), metadata)
    assert set(rebuilt) == set(state)
    for key, original in state.items():
        _same_bits(original, rebuilt[key])
    assert main(["diff", str(source), str(out)]) == 0
    manifest = tmp_path / "qs.json"
    assert main(["manifest", "create", str(source), "-o", str(manifest)]) == 0
    assert main(["verify", str(out), "--manifest", str(manifest), "--tensors-only"]) == 0
    capsys.readouterr()


def test_unconvertible_tensors_fail_unless_skipped_and_then_are_listed(tmp_path, capsys,
                                                                       unchanged):
    packed = torch.randint(0, 255, (3, 2), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    state = {"w": torch.randn(3, 3), "packed": packed, "z": torch.randn(2, dtype=torch.complex128)}
    source = unchanged(factories.save_state_dict(tmp_path / "m.pt", state))
    out = tmp_path / "m.safetensors"
    with pytest.raises(SandboxError) as info:
        convert_file(source, out)
    assert info.value.code == "unsupported_tensors"
    assert "packed" in info.value.message and "z (" in info.value.message
    assert not out.exists() and not sidecar_path(out).exists()
    assert not list(tmp_path.glob(".*.tmp"))
    assert main(["convert", str(source), "-o", str(out)]) == 8
    assert "--skip-unsupported" in capsys.readouterr().err
    assert main(["convert", str(source), "-o", str(out), "--skip-unsupported"]) == 0
    text = capsys.readouterr().out
    assert "1 of the input's 3 tensors (2 skipped, listed)" in text
    assert "skipped   packed:" in text and "skipped   z:" in text
    sidecar = json.loads(sidecar_path(out).read_text())
    assert {s["key"] for s in sidecar["tensors_skipped"]} == {"packed", "z"}
    assert set(load_file(out)) == {"w"}


def test_outputs_are_readable_under_umask_022(tmp_path, unchanged):
    previous = os.umask(0o022)
    try:
        ckpt = factories.training_checkpoint()
        source = unchanged(factories.save_state_dict(tmp_path / "t.pt", ckpt))
        report = convert_file(source, tmp_path / "t.safetensors")
    finally:
        os.umask(previous)
    for path in (tmp_path / "t.safetensors", Path(report["sidecar"])):
        assert path.stat().st_mode & 0o777 == 0o644
