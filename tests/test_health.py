"""Weights health: random bit flips, NaN checkpoints, training state, constant and duplicates."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from pathlib import Path

import factories
import numpy as np
import pytest
import torch

from inspector.checkpoint.health import (
    PROBLEM,
    Health,
    assess,
    is_state_key,
    magnitude_outliers,
    outlier_gap,
)
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.cli import main
from inspector.report import SessionEvidence, build_report
from inspector.report.model import FileEvidence
from inspector.report.render_html import render_html
from inspector.sandbox.host.client import inspect_file
from inspector.tensors.describe import describe_tensors
from inspector.tensors.stats import tensor_stats

FLIPS = 1000
_BITS_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
_EXPONENT_MSB = {torch.float32: 30, torch.float16: 14, torch.bfloat16: 14}


def _assess(rows) -> Health:
    """The health of the contract's tensor records (dicts, as the worker writes them)."""
    return assess(map(TensorStats.from_json, rows))


def _records(state: dict[str, torch.Tensor]) -> list[dict]:
    return describe_tensors(list(state.items()), lambda event: None, threads=1)


def _flip(t: torch.Tensor, index: int, bit: int) -> torch.Tensor:
    out = t.clone()
    raw = out.reshape(-1).view(_BITS_VIEW[t.dtype]).numpy()
    unsigned = raw.view(np.uint32 if raw.itemsize == 4 else np.uint16)
    unsigned[index] ^= unsigned.dtype.type(1 << bit)
    return out


def _scaled(g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(32, 32, generator=g) * 0.05).to(dtype)


def _strict(obj: object) -> str:
    return json.dumps(obj, allow_nan=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_random_single_bit_flips_are_named_when_they_hit_the_exponent_top(dtype) -> None:
    rng = random.Random(f"flips-{dtype}")
    g = torch.Generator().manual_seed(7)
    clean = (torch.randn(48, 64, generator=g) * 0.02).to(dtype)
    base = tensor_stats(clean)
    assert _assess([{"key": "w", "dtype": str(dtype).removeprefix("torch."), "shape": [48, 64],
                    "numel": clean.numel(), "digest": "a", **base}]).status == "ok"
    bits = clean.element_size() * 8
    msb = _EXPONENT_MSB[dtype]
    required = named = other_exponent_named = 0
    for _ in range(FLIPS):
        index, bit = rng.randrange(clean.numel()), rng.randrange(bits)
        flipped = _flip(clean, index, bit)
        rec = {"key": "layer.weight", "dtype": str(dtype).removeprefix("torch."),
               "shape": [48, 64], "numel": clean.numel(), "digest": "x", **tensor_stats(flipped)}
        health = _assess([rec])
        _strict(rec)
        _strict(health.to_json())
        hit = {f.key for f in health.findings if f.severity == PROBLEM}
        old = float(clean.reshape(-1)[index])
        new = float(flipped.reshape(-1)[index].float())
        others = torch.cat([clean.reshape(-1)[:index], clean.reshape(-1)[index + 1:]])
        biggest = float(others.float().abs().max())
        set_msb = bit == msb and abs(new) > abs(old)
        # float32 and bfloat16: the top exponent bit multiplies by 2**128, so every such flip
        # of a non-zero value must be named; float16 (2**16) when it lands 2**9 above the rest.
        must = set_msb and old != 0 and (not math.isfinite(new) or dtype != torch.float16
                                         or abs(new) >= 2 ** (outlier_gap("float16") + 1) * biggest)
        if must:
            required += 1
            assert hit == {"layer.weight"}, (index, bit, old, new, health.to_json())
            named += 1
        elif hit and bit != msb:
            other_exponent_named += 1
        if bit < bits - 1 - (8 if dtype != torch.float16 else 5):
            # a mantissa flip never moves a value orders of magnitude: never a problem
            assert not hit, (index, bit, old, new)
    assert required > 0 and named == required


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_flipped_tensors_make_strict_reports(dtype, tmp_path: Path) -> None:
    """Any flip, exponent bits included, still gives a strict-JSON report and HTML."""
    rng = random.Random(f"report-{dtype}")
    clean = _scaled(torch.Generator().manual_seed(5), dtype)
    path = tmp_path / "m.pt"
    path.write_bytes(b"m")
    bits = clean.element_size() * 8
    for _ in range(20):
        flipped = _flip(clean, rng.randrange(clean.numel()), rng.randrange(bits - 9, bits))
        row = {"key": "w", "dtype": str(dtype).removeprefix("torch."), "shape": [32, 32],
               "numel": 1024, "nbytes": 1024 * clean.element_size(), "digest": "0" * 64,
               **tensor_stats(flipped)}
        inspect = {"path": str(path), "size": 1, "sha256": "ab" * 32, "format": "pytorch-zip",
                   "scan": {"path": str(path), "format": "pytorch-zip", "verdict": "safe",
                            "weights_only_ok": True, "globals": [], "findings": []},
                   "sandbox": {"level": "full"}, "digest_algorithm": "sha256",
                   "tensors": [row], "objects": [], "error": None,
                   "health": _assess([row]).to_json()}
        report = build_report(SessionEvidence([FileEvidence(str(path), inspect=inspect)]))
        json.loads(report.dumps(), parse_constant=lambda t: pytest.fail(f"token {t}"))
        assert "<html" in render_html(report)


def test_flipped_checkpoint_end_to_end_through_the_jailed_inspect(tmp_path: Path, capsys) -> None:
    g = torch.Generator().manual_seed(3)
    dtypes = ["float32", "float16", "bfloat16", "float32", "bfloat16"]
    state = {f"block{i}.{dt}.weight": _scaled(g, getattr(torch, dt))
             for i, dt in enumerate(dtypes)}
    # float16's top exponent bit multiplies by 2**16 only: flip its largest value
    largest = int(state["block1.float16.weight"].float().abs().argmax())
    flips = {"block0.float32.weight": (5, 30), "block1.float16.weight": (largest, 14),
             "block2.bfloat16.weight": (77, 14), "block4.bfloat16.weight": (3, 14)}
    for key, (index, bit) in flips.items():
        state[key] = _flip(state[key], index, bit)
    path = tmp_path / "flipped.pt"
    torch.save(state, path)
    report = inspect_file(path)
    assert report.error is None and report.scan.verdict == "safe"
    named = {f.key for f in report.health.findings if f.severity == "problem"}
    assert named == set(flips)
    assert "block3.float32.weight" not in named
    assert main(["inspect", str(path), "--json"]) == 7
    out = capsys.readouterr().out
    json.loads(out, parse_constant=lambda token: pytest.fail(f"non-strict token {token}"))


def test_nan_checkpoint_is_safe_code_with_a_weights_problem(tmp_path: Path, capsys) -> None:
    weight = torch.randn(16, 16)
    weight[2, 3] = float("nan")
    weight[4, 4] = float("inf")
    path = tmp_path / "nan.pt"
    torch.save({"fc.weight": weight, "fc.bias": torch.zeros(16)}, path)
    assert main(["inspect", str(path)]) == 7
    text = capsys.readouterr().out
    assert "scan:     No code found" in text and "health:   Weights corrupted" in text
    assert "fc.weight: 1 NaN and 1 Inf" in text
    assert main(["inspect", str(path), "--json"]) == 7
    report = json.loads(capsys.readouterr().out,
                        parse_constant=lambda token: pytest.fail(f"non-strict token {token}"))
    assert report["scan"]["verdict"] == "safe"
    assert report["health"]["status"] == "problem"
    assert [f["code"] for f in report["health"]["findings"]] == ["nonfinite-weights"]


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_sign_flipped_running_variance_is_a_problem_through_the_jailed_inspect(
        tmp_path: Path, capsys, suffix: str) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    model(torch.randn(32, 4))  # a training forward: running statistics of real data
    clean = {k: v.clone() for k, v in model.state_dict().items()}
    flipped = {k: v.clone() for k, v in clean.items()}
    flipped["1.running_var"] = _flip(flipped["1.running_var"], 5, 31)
    # the harm, under torch: channel 5 of every eval output is NaN, and only it
    model.load_state_dict(flipped)
    out = model.eval()(torch.randn(3, 4))
    assert torch.isnan(out).all(dim=0).tolist() == [i == 5 for i in range(8)]
    for name, state in (("clean", clean), ("flipped", flipped)):
        path = tmp_path / f"{name}{suffix}"
        if suffix == ".pt":
            torch.save(state, path)
        else:
            save_file(state, str(path))
        report = inspect_file(path)
        assert report.error is None
        found = [(f.key, f.code) for f in report.health.findings]
        assert found == ([] if name == "clean" else [("1.running_var", "negative-variance")])
    assert main(["inspect", str(path)]) == 7
    assert "1.running_var: a running variance holds -" in capsys.readouterr().out


def test_crc_damaged_file_is_named_damaged_with_both_checksums(tmp_path: Path, capsys) -> None:
    path = factories.crc_damaged(tmp_path / "damaged.pt")
    assert main(["inspect", str(path)]) == 1  # the scan still says suspicious
    text = capsys.readouterr().out
    assert "scan:     Damaged" in text and "(not a question of code)" in text
    damaged = [line for line in text.splitlines() if line.lstrip().startswith("damaged ")]
    assert len(damaged) == 1 and "[damaged/data/0]" in damaged[0]
    assert "suspicious" not in text.lower()  # one word for damage (issue 24)
    assert re.search(r"CRC-32 [0-9a-f]{8} does not match [0-9a-f]{8}", damaged[0])
    assert "allow" not in text.lower()
    assert f"sha256:   {hashlib.sha256(path.read_bytes()).hexdigest()}" in text


def test_lightning_state_is_shown_but_not_a_problem() -> None:
    g = torch.Generator().manual_seed(0)
    records = _records({
        "state_dict.encoder.weight": torch.randn(8, 8, generator=g),
        "state_dict.encoder.bias": torch.zeros(8),
        "state_dict.norm.weight": torch.ones(8),
        "callbacks.ModelCheckpoint{'monitor': 'val_loss'}.kth_value": torch.tensor(math.inf),
        "callbacks.ModelCheckpoint{'monitor': 'val_loss'}.best_model_score": torch.tensor(0.3),
        "optimizer_states.0.state.0.exp_avg": torch.full((8, 8), math.nan),
        "optimizer_states.0.state.0.step": torch.tensor(100.0),
    })
    health = _assess(records)
    assert health.status == "ok"
    assert {f.code for f in health.findings} == {"nonfinite-state"}
    assert health.weights_checked == 3 and health.state_tensors == 4


def test_constant_zero_and_duplicate_weights_are_warnings() -> None:
    g = torch.Generator().manual_seed(1)
    shared = torch.randn(16, 16, generator=g)
    records = _records({
        "a.weight": torch.randn(16, 16, generator=g),
        "a.bias": torch.zeros(16),
        "ln.weight": torch.ones(16),
        "lora_B.weight": torch.zeros(16, 4),
        "proj.weight": torch.full((4, 4), 0.5),
        "b.weight": shared,
        "c.weight": shared.clone(),
        "tied.weight": shared,
    })
    health = _assess(records)
    assert health.status == "warning"
    found = {(f.code, f.key) for f in health.findings}
    assert found == {("zero-weights", "lora_B.weight"), ("constant-weights", "proj.weight"),
                     ("duplicate-weights", "c.weight")}


def test_outlier_rule_needs_enough_values_and_a_clear_gap() -> None:
    assert magnitude_outliers([[-5, 10], [30, 1]], 20) == (0, None)
    assert magnitude_outliers([[-7, 500], [-6, 500], [20, 1]], 20) == (1, -6)
    assert magnitude_outliers([[-7, 500], [-6, 500], [14, 1]], 20) == (0, -6)
    # two values above a bulk of 998 are flipped bits, not the bulk (a few always count)
    assert magnitude_outliers([[-7, 998], [20, 2]], 20) == (2, -7)
    # more than the tail (eight here) move the bulk up: they are the tensor's own scale
    assert magnitude_outliers([[-7, 991], [20, 9]], 20) == (0, 20)
    assert outlier_gap("float8_e4m3fn") is None and outlier_gap("int8") is None
    assert outlier_gap("F16") == 8 and outlier_gap("bfloat16") == 20


@pytest.mark.parametrize("key, state", [
    ("optimizer.state.3.exp_avg_sq", True), ("lr_schedulers.0.last_epoch", True),
    ("callbacks.EarlyStopping{'monitor': 'x'}.best_score", True), ("global_step", True),
    ("model.layers.0.attn.q_proj.weight", False), ("bn1.running_var", False),
])
def test_state_keys(key: str, state: bool) -> None:
    assert is_state_key(key) is state


def test_tensors_without_statistics_are_not_judged() -> None:
    records = _records({"sparse": torch.eye(4).to_sparse(), "meta": torch.empty(3, 3,
                                                                                 device="meta"),
                        "dense": torch.randn(4, 4)})
    health = _assess(records)
    # the sparse weight is judged on its stored values (an identity is not "constant")
    assert health.weights_checked == 2 and health.status == "ok"


def test_every_health_rule_is_registered_with_a_scope_and_each_one_fires():
    from inspector.checkpoint.health import RULES
    assert [type(r).__name__ for r in RULES] == ["QuantizationScale", "NonFiniteValues",
                                                 "MagnitudeOutlier", "NegativeVariance",
                                                 "ConstantWeights", "DuplicateWeights"]
    assert {r.scope for r in RULES} == {"quantized", "values", "weights"}
    base = {"dtype": "float32", "shape": [4, 4], "numel": 16, "nan": 0, "inf": 0, "zeros": 0,
            "min": -1.0, "max": 1.0, "absmax": 1.0, "digest": "d"}
    found = {(f.key, f.code) for f in _assess([
        {**base, "key": "q", "dtype": "qint8", "quantization": {"scale": "nan"}},
        {**base, "key": "n", "nan": 2, "digest": "n"},
        {**base, "key": "o", "exponents": [[-4, 15], [60, 1]], "absmax": 2.0 ** 60,
         "digest": "o"},
        {**base, "key": "bn.running_var", "shape": [4], "digest": "v"},
        {**base, "key": "c", "min": 0.5, "max": 0.5, "digest": "c"},
        {**base, "key": "a"}, {**base, "key": "b"},
    ]).findings}
    assert found == {("q", "nonfinite-weights"), ("n", "nonfinite-weights"),
                     ("o", "magnitude-outlier"), ("bn.running_var", "negative-variance"),
                     ("c", "constant-weights"), ("b", "duplicate-weights")}
