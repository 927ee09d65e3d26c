"""The corruption radar (checkpoint.radar) on records the sandbox's statistics give for real state
dicts: a single flipped exponent bit is its row's brightest cell, NaN shows in the NaN/Inf share."""

from __future__ import annotations

import math

import factories
import pytest
import torch

from inspector.checkpoint.health import Health, assess
from inspector.checkpoint.radar import ABSMAX, AFTER, BEFORE, NONFINITE, STD, build_radar, kind_of
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.tensors.describe import describe_tensors


def _assess(rows) -> Health:
    """The health of the contract's tensor records (dicts, as the worker writes them)."""
    return assess(map(TensorStats.from_json, rows))


def records(state: dict[str, torch.Tensor]) -> list[dict]:
    return describe_tensors(list(state.items()), lambda event: None, threads=1)


@pytest.fixture(scope="module")
def flipped() -> list[dict]:
    return records(factories.layered_state_dict(flip=True))


def test_layers_along_the_depth_and_a_row_per_weight_kind() -> None:
    radar = build_radar(records(factories.layered_state_dict()))
    assert radar.columns == [BEFORE, "0", "1", "2", "3", "4", "5", AFTER]
    labels = [r.label for r in radar.rows]
    assert labels == ["model.embed_tokens.weight", "self_attn.q_proj.weight",
                      "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                      "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                      "mlp.down_proj.weight", "input_layernorm.weight",
                      "post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"]
    assert [r.kind for r in radar.rows] == ["embedding"] + ["attention"] * 4 + ["mlp"] * 3 + [
        "norm"] * 3 + ["head"]
    assert radar.rows[2].pattern == "model.layers.*.self_attn.k_proj.weight"
    assert radar.locate("model.layers.4.mlp.up_proj.weight") == (6, 5)
    assert radar.locate("lm_head.weight") == (11, 7)
    assert len(radar.cells) == 6 * 9 + 3 and not radar.flagged()
    # Healthy weights of about 0.02 sit within a few orders of each other.
    lo, hi = radar.scale(ABSMAX)
    assert -2 < lo < hi < 0.5


def test_one_flipped_exponent_bit_is_the_brightest_cell_of_its_row(flipped) -> None:
    key, _, _ = factories.RADAR_FLIP
    health = _assess(flipped)
    radar = build_radar(flipped, health.findings)
    row, column = radar.locate(key)
    assert radar.columns[column] == "3" and radar.rows[row].label == "self_attn.k_proj.weight"
    for metric in (ABSMAX, STD):
        assert radar.brightest(metric, row) == column
        values = [radar.cells[(row, c)].value(metric) for c in range(1, 7) if c != column]
        # float32's top exponent bit multiplies the value by 2**128, about 10**38.5.
        assert radar.cells[(row, column)].value(metric) > max(values) + 30
    assert radar.position(ABSMAX, radar.cells[(row, column)].value(ABSMAX)) == 1.0
    # Every other row's brightest cell is far down the whole-model scale.
    others = [radar.position(ABSMAX, cell.value(ABSMAX))
              for (r, c), cell in radar.cells.items() if (r, c) != (row, column)]
    assert max(others) < 0.1
    assert radar.flagged() == [(row, column)]
    assert radar.cells[(row, column)].findings == ("magnitude-outlier",)
    tip = radar.describe(row, column)
    assert tip.splitlines()[0] == key and "layer 3 · attention" in tip
    assert "weights health: magnitude-outlier" in tip
    assert f"absmax {flipped_absmax(flipped, key):.6g}" in tip
    assert f"to {flipped_absmax(flipped, key):.3g} (bright) on a log scale" in radar.legend(ABSMAX)


def flipped_absmax(recs: list[dict], key: str) -> float:
    return next(r["absmax"] for r in recs if r["key"] == key)


def test_nan_and_inf_share_lights_its_cell_and_health_marks_it() -> None:
    state = factories.layered_state_dict()
    bad = state["model.layers.2.mlp.down_proj.weight"]
    bad.view(-1)[:8] = float("nan")
    bad.view(-1)[8:16] = float("inf")
    recs = records(state)
    radar = build_radar(recs, _assess(recs).findings)
    row, column = radar.locate("model.layers.2.mlp.down_proj.weight")
    cell = radar.cells[(row, column)]
    assert cell.nan == 8 and cell.inf == 8 and cell.nonfinite == pytest.approx(16 / 512)
    assert radar.brightest(NONFINITE, row) == column
    assert radar.position(NONFINITE, cell.value(NONFINITE)) > 0.25
    assert radar.position(NONFINITE, 0.0) == 0.0
    assert cell.findings == ("nonfinite-weights",)
    assert "NaN 8 · Inf 8 of 512" in radar.describe(row, column)


def test_other_stacks_line_up_and_same_tails_keep_their_stack() -> None:
    g = torch.Generator().manual_seed(1)
    gpt2 = {"transformer.wte.weight": torch.randn(8, 4, generator=g)}
    gpt2 |= {f"transformer.h.{i}.{name}": torch.randn(4, 4, generator=g)
             for i in range(3) for name in ("attn.c_attn.weight", "mlp.c_fc.weight",
                                            "ln_1.weight")}
    radar = build_radar(records(gpt2))
    assert radar.columns == [BEFORE, "0", "1", "2"]
    assert [(r.label, r.kind) for r in radar.rows] == [
        ("transformer.wte.weight", "embedding"), ("attn.c_attn.weight", "attention"),
        ("mlp.c_fc.weight", "mlp"), ("ln_1.weight", "norm")]

    t5 = {f"{stack}.block.{i}.layer.0.SelfAttention.q.weight": torch.randn(4, 4, generator=g)
          for stack in ("encoder", "decoder") for i in range(2)}
    radar = build_radar(records(t5))
    assert radar.columns == ["0", "1"]  # nothing outside the layers
    assert [r.label for r in radar.rows] == ["encoder.block.*.layer.0.SelfAttention.q.weight",
                                             "decoder.block.*.layer.0.SelfAttention.q.weight"]


def test_training_state_and_buffers_stay_off_the_radar() -> None:
    state = factories.training_checkpoint()  # Sequential: model.0.* and model.2.*
    radar = build_radar(records(flatten(state)))
    assert radar.columns == ["0", "2"]
    assert all(not c.key.startswith("optimizer") for c in radar.cells.values())
    assert {c.key for c in radar.cells.values()} == {
        "model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}


def flatten(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out |= flatten(v, f"{prefix}{k}.")
        elif isinstance(v, list):
            out |= flatten(dict(enumerate(v)), f"{prefix}{k}.")
        elif isinstance(v, torch.Tensor):
            out[f"{prefix}{k}"] = v
    return out


def test_no_layered_keys_is_an_empty_radar_in_words() -> None:
    radar = build_radar(records(factories.small_state_dict()))
    assert radar.empty and not radar.rows and "name none" in radar.reason
    one = build_radar(records({"blocks.0.weight": torch.ones(2), "head.weight": torch.ones(2)}))
    assert one.empty and "one layer only" in one.reason


def test_zero_and_missing_statistics() -> None:
    recs = [{"key": f"layers.{i}.w", "dtype": "float32", "numel": 4, "absmax": a, "std": s,
             "nan": n, "inf": 0} for i, (a, s, n) in enumerate([(0.0, 0.0, 0), (None, None, 4),
                                                                (2.0, 1.0, 0)])]
    radar = build_radar(recs)
    zero, empty, two = (radar.cells[(0, c)] for c in range(3))
    assert zero.value(ABSMAX) == -math.inf and radar.position(ABSMAX, -math.inf) == 0.0
    assert empty.value(STD) is None and radar.position(STD, None) is None
    assert empty.nonfinite == 1.0 and radar.position(NONFINITE, 1.0) == 1.0
    assert two.value(ABSMAX) == pytest.approx(math.log10(2))
    assert radar.brightest(ABSMAX, 0) == 2


@pytest.mark.parametrize("label, kind", [
    ("attention.self.query.weight", "attention"), ("intermediate.dense.weight", "mlp"),
    ("output.LayerNorm.weight", "norm"), ("layer.1.DenseReluDense.wi.weight", "mlp"),
    ("block_sparse_moe.experts.3.w1.weight", "mlp"), ("cls_token", "embedding"),
    ("classifier.weight", "head"), ("scale", "other")])
def test_weight_kinds(label, kind) -> None:
    assert kind_of(label) == kind


def test_the_std_view_says_it_is_the_loaders_word(flipped) -> None:
    """Nothing here computes a std (the claims only bound it by the checked range): its
    legend and tooltips say whose it is, and do not read a bright cell as a flipped bit."""
    radar = build_radar(flipped)
    legend = radar.legend(STD)
    assert "as reported by the jailed loader (not checked here)" in legend
    assert "flipped exponent bit" not in legend
    row, column = next(iter(radar.cells))
    assert "std " in radar.describe(row, column)
    assert all(line.endswith("(the loader's)") for line in
               radar.describe(row, column).splitlines() if line.startswith("std "))
