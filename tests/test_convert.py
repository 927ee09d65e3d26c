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
from inspector.sandbox.client import SandboxError, convert_file, sidecar_path
from inspector.sandbox.convert import (
    Writeback,
    header_bytes,
    plan_tensors,
    verify_output,
    write_stream,
)
from inspector.sandbox.load import LoadError

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
        assert handle.metadata() == {"format": "pt", "lm_head.weight": "embed.weight"}
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
    assert {s["key"] for s in report["tensors_skipped"]} == {"quantized", "sparse"}
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
