"""Consistency engine on the CPU (and on cuda:0 where present): clean runs pass, flips are found."""

from __future__ import annotations

import hashlib
from pathlib import Path

import consistency_models
import pytest
import torch

from inspector.core.progress import Cancelled, CancelToken
from inspector.sandbox.worker.consistency.bitcheck import (
    ASSERT_CLOSE_TOLERANCES,
    ConsistencyError,
    Fault,
    choose_device,
    compare,
)
from inspector.sandbox.worker.consistency.model_run import model_run
from inspector.sandbox.worker.consistency.weights_probe import weights_probe

TESTS = str(Path(__file__).parent)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def _checkpoint(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = consistency_models.tiny_mlp(width=48)
    return {
        "state_dict": model.state_dict(),
        "conv.weight": torch.randn(16, 3, 3, 3),
        "half.weight": torch.randn(64, 256).half(),
        "bf16.weight": torch.randn(32, 4096).bfloat16(),
        "steps": torch.tensor(1000),
        "ids": torch.arange(12).reshape(3, 4),
        "epoch": 7,
    }


def _iterations(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "iteration"]


def _probe(device: str, **kwargs):
    events: list[dict] = []
    dev, label = choose_device(device)
    result = weights_probe(_checkpoint(), dev, emit=events.append, **kwargs)
    return result, events, label


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=[pytest.mark.gpu, CUDA])])
def test_clean_probe_passes_every_tensor(device):
    ckpt = _checkpoint()
    result, events, label = _probe(device, repeats=4)
    assert result["consistent"] and result["resident_mismatches"] == []
    by_key = {t["key"]: t for t in result["tensors"]}
    assert set(by_key) == {"state_dict.0.weight", "state_dict.0.bias", "state_dict.2.weight",
                           "state_dict.2.bias", "state_dict.4.weight", "state_dict.4.bias",
                           "state_dict.5.weight", "state_dict.5.bias", "conv.weight",
                           "half.weight", "bf16.weight", "steps", "ids"}
    assert result["probed_tensors"] == 6  # floating, 2+ dims: 3 linears, conv, half, bf16
    for key, entry in by_key.items():
        assert entry["status"] == "pass" and entry["roundtrip_ok"], key
    raw = ckpt["half.weight"].contiguous().view(torch.uint8).numpy().tobytes()
    assert by_key["half.weight"]["sha256"] == hashlib.sha256(raw).hexdigest()
    for key in ("conv.weight", "half.weight", "bf16.weight"):
        assert 0 < by_key[key]["reference_error_ratio"] <= 1, key  # rounding seen, within bound
        assert by_key[key]["repeat_mismatches"] == 0
    assert "probe" in by_key["ids"] and "reference_error_ratio" not in by_key["state_dict.0.bias"]
    assert [e["iteration"] for e in _iterations(events)] == [1, 2, 3, 4]
    assert all(e["mismatched"] == 0 and e["seconds"] > 0 for e in _iterations(events))
    assert result["weights_gb_per_s"] > 0
    assert label.startswith("CPU" if device == "cpu" else "cuda:0")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=[pytest.mark.gpu, CUDA])])
def test_probe_finds_and_localises_a_flip_injected_mid_run(device):
    fault = Fault("conv.weight", index=100, bit=22, iteration=3)
    result, events, _ = _probe(device, repeats=5, inject=fault)
    assert not result["consistent"]
    [resident] = result["resident_mismatches"]
    assert resident["key"] == "conv.weight" and resident["changed_elements"] == 1
    [element] = resident["elements"]
    assert (element["index"], element["bits"], element["kinds"]) == (100, [22], ["mantissa"])
    assert element["position"] == [3, 2, 0, 1]  # 100 = 3*27 + 2*9 + 0*3 + 1 in [16, 3, 3, 3]
    original = _checkpoint()["conv.weight"].reshape(-1)[100].item()
    assert element["expected"] == original and element["actual"] != original
    conv = next(t for t in result["tensors"] if t["key"] == "conv.weight")
    assert conv["status"] == "fail" and conv["repeat_mismatches"] == 3
    assert conv["first_mismatch"]["iteration"] == 3 and conv["first_mismatch"]["position"][0] == 3
    others = [t for t in result["tensors"] if t["key"] != "conv.weight"]
    assert all(t["status"] == "pass" for t in others)
    assert [e["mismatched"] > 0 for e in _iterations(events)] == [False, False, True, True, True]
    assert {"type": "injected", "key": "conv.weight", "index": 100, "bit": 22,
            "iteration": 3} in events


def test_flip_before_the_first_run_fails_the_float64_reference():
    result, _, _ = _probe("cpu", repeats=3, inject=Fault("half.weight", 5, 14, iteration=1))
    half = next(t for t in result["tensors"] if t["key"] == "half.weight")
    assert half["repeat_mismatches"] == 0  # every repeat agrees with the (corrupt) first
    assert not half["reference_ok"] and half["reference_error_ratio"] > 1
    assert result["resident_mismatches"][0]["elements"][0]["kinds"] == ["exponent"]


def test_large_bf16_reduction_stays_within_tolerance():
    torch.manual_seed(1)
    result = weights_probe({"w": torch.randn(8, 65536).bfloat16() * 30}, torch.device("cpu"),
                           repeats=2)
    [entry] = result["tensors"]
    assert entry["reference_ok"] and entry["reference_error_ratio"] > 0.01


def _run(device: str, **kwargs):
    state = consistency_models.tiny_mlp(width=32).state_dict()
    state["extra.bias"] = torch.zeros(3)
    del state["4.bias"]
    loads = []

    def load():
        loads.append(1)
        return {"state_dict": {k: v.clone() for k, v in state.items()}, "epoch": 3}

    events: list[dict] = []
    dev, _ = choose_device(device)
    result = model_run(load, "consistency_models:tiny_mlp", {"width": 32}, [4, 16], "float32",
                       dev, python_path=[TESTS], emit=events.append, **kwargs)
    return result, events, loads


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=[pytest.mark.gpu, CUDA])])
def test_clean_model_run_reports_keys_and_passes(device):
    result, events, loads = _run(device, repeats=4)
    assert result["consistent"]
    assert result["missing_keys"] == ["4.bias"] and result["unexpected_keys"] == ["extra.bias"]
    [output] = result["outputs"]
    assert (output["key"], output["shape"], output["status"]) == ("output", [4, 10], "pass")
    assert result["reload"]["consistent"] and len(loads) == 2
    assert [e["phase"] for e in _iterations(events)] == ["model"] * 4 + ["reload"]
    assert not torch.are_deterministic_algorithms_enabled()  # settings restored afterwards


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=[pytest.mark.gpu, CUDA])])
def test_model_run_detects_and_localises_an_injected_flip(device):
    result, events, _ = _run(device, repeats=5, inject=Fault("2.weight", 40, 23, 3))
    assert not result["consistent"]
    [output] = result["outputs"]
    assert output["status"] == "fail" and output["runs_mismatched"] == 3
    mismatch = output["first_mismatch"]
    assert mismatch["iteration"] == 3 and mismatch["bits"]
    assert mismatch["expected"] != mismatch["actual"]
    [resident] = result["resident_mismatches"]
    assert resident["key"] == "2.weight"
    assert [(e["index"], e["position"], e["bits"]) for e in resident["elements"]] == [
        (40, [1, 8], [23])]
    assert result["reload"]["consistent"]  # fresh weights give the first answer back
    assert [e["mismatched"] > 0 for e in _iterations(events)] == [False, False, True, True, True,
                                                                 False]


def test_dict_outputs_are_compared_one_by_one():
    torch.manual_seed(0)
    state = consistency_models.TinyConvNet().state_dict()
    result = model_run(lambda: state, "consistency_models:TinyConvNet", {}, [2, 3, 8, 8],
                       "float32", torch.device("cpu"), repeats=3, python_path=[TESTS],
                       reload=False)
    assert result["consistent"] and result["reload"] is None
    assert [o["key"] for o in result["outputs"]] == ["output.logits", "output.features"]


def test_cancel_stops_the_run():
    token = CancelToken()
    seen = []

    def emit(event):
        seen.append(event)
        if event["type"] == "iteration" and event["iteration"] == 2:
            token.cancel()

    with pytest.raises(Cancelled):
        weights_probe(_checkpoint(), torch.device("cpu"), repeats=50, emit=emit, cancel=token)
    assert max(e["iteration"] for e in _iterations(seen)) == 2
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize(
    ("call", "code", "words"),
    [
        (lambda: weights_probe({"w": torch.ones(2, 2)}, torch.device("cpu"), repeats=1),
         "bad_request", "at least 2"),
        (lambda: weights_probe({"w": torch.ones(2, 2)}, torch.device("cpu"),
                               inject=Fault("nope", 0, 0)), "bad_request", "not a probed weight"),
        (lambda: weights_probe({"w": torch.ones(2, 2)}, torch.device("cpu"),
                               inject=Fault("w", 9, 0)), "bad_request", "element 9 outside"),
        (lambda: weights_probe({"w": torch.ones(2, 2)}, torch.device("cpu"),
                               inject=Fault("w", 0, 32)), "bad_request", "bit 32 outside"),
        (lambda: model_run(dict, "no_such_module_xyz:f", {}, [1], "float32",
                           torch.device("cpu")), "bad_factory", "cannot import"),
        (lambda: model_run(dict, "consistency_models", {}, [1], "float32", torch.device("cpu")),
         "bad_request", "package.module:callable"),
        (lambda: model_run(dict, "consistency_models:tiny_mlp", {"bogus": 1}, [1, 16], "float32",
                           torch.device("cpu"), python_path=[TESTS]), "bad_factory", "bogus"),
        (lambda: choose_device("tpu"), "bad_request", "unknown device"),
    ],
)
def test_bad_requests_are_one_line_errors(call, code, words):
    with pytest.raises(ConsistencyError, match=words) as info:
        call()
    assert info.value.code == code and "\n" not in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_requested_without_a_device():
    with pytest.raises(ConsistencyError, match="torch sees no CUDA device") as info:
        choose_device("cuda:0")
    assert info.value.code == "no_cuda"
    assert choose_device("auto")[1] == "CPU (no CUDA device found)"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.complex64, torch.complex128])
def test_close_verdict_is_assert_closes(dtype):
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(64, generator=gen, dtype=torch.float64)
    rtol, atol = ASSERT_CLOSE_TOLERANCES[dtype]
    for factor in (0.25, 0.9, 1.5, 8.0):
        first = base.to(dtype)
        other = (first.to(torch.complex128 if dtype.is_complex else torch.float64)
                 + factor * (atol + rtol * first.abs().double())).to(dtype)
        try:
            torch.testing.assert_close(other, first, equal_nan=True)
            expected = True
        except AssertionError:
            expected = False
        assert compare("t", first, other).close is expected, (dtype, factor)
