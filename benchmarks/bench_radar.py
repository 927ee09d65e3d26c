"""What the corruption radar costs the UI thread: `checkpoint.radar.build_radar` and the view's
colouring (`gui.widgets.radar_view.RadarModel.set_radar`) on large key lists.

Records are synthetic (keys, absmax, std, counts; no torch): a Llama-2-70B-shaped state dict
(80 layers, 723 tensors), a Mixtral-shaped one (32 layers of 8 experts, 995 tensors) and a
training checkpoint of N parameter tensors plus Adam state (3 per parameter, left off the
radar). The Tensors pane builds the radar only while its Radar view is shown, once per change
of the tensors or the health findings.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_radar.py [--tensors 4000]
"""

from __future__ import annotations

import argparse

from common import best_of

from inspector.checkpoint.radar import ABSMAX, build_radar

LLAMA = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
         "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
         "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight")


def _rec(key: str, i: int) -> dict:
    return {"key": key, "dtype": "bfloat16", "numel": 4096, "absmax": 0.05 + i % 97 / 1000,
            "std": 0.02, "nan": 0, "inf": 0}


def llama(layers: int = 80) -> list[dict]:
    """Embedding, `layers` decoder layers, final norm and head."""
    keys = (["model.embed_tokens.weight"]
            + [f"model.layers.{i}.{k}" for i in range(layers) for k in LLAMA]
            + ["model.norm.weight", "lm_head.weight"])
    return [_rec(k, i) for i, k in enumerate(keys)]


def mixtral(layers: int = 32, experts: int = 8) -> list[dict]:
    """Attention, router and numbered experts per layer."""
    keys = ["model.embed_tokens.weight"]
    for i in range(layers):
        p = f"model.layers.{i}."
        keys += [p + k for k in LLAMA[:4] + LLAMA[7:]] + [p + "block_sparse_moe.gate.weight"]
        keys += [f"{p}block_sparse_moe.experts.{e}.w{n}.weight"
                 for e in range(experts) for n in (1, 2, 3)]
    keys += ["model.norm.weight", "lm_head.weight"]
    return [_rec(k, i) for i, k in enumerate(keys)]


def training(tensors: int) -> list[dict]:
    """`tensors` parameters in layers of 8, each with exp_avg, exp_avg_sq and step."""
    params = [f"model.blocks.{i // 8}.p{i % 8}.weight" for i in range(tensors)]
    state = [f"optimizer.state.{i}.{s}" for i in range(tensors)
             for s in ("exp_avg", "exp_avg_sq", "step")]
    return [_rec(k, i) for i, k in enumerate(params + state)]


def main() -> None:
    """Print build and colouring times per case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=4000)
    args = parser.parse_args()
    from inspector.gui.app import create_application
    from inspector.gui.widgets.radar_view import RadarModel, colour_scale

    create_application([])
    colour_scale()  # the colour map's one-off load (pyqtgraph import) is not the radar's cost
    model = RadarModel()
    for name, records in (("llama-2-70b-shaped", llama()), ("mixtral-shaped", mixtral()),
                          (f"training, {args.tensors:,} params", training(args.tensors))):
        radar = build_radar(records)
        build, _ = best_of(lambda r=records: build_radar(r))
        colour, _ = best_of(lambda r=radar: model.set_radar(r, ABSMAX))
        print(f"{name}: {len(records):,} records -> {len(radar.rows)} rows x "
              f"{len(radar.columns)} columns; build {build * 1000:.1f} ms, "
              f"colour {colour * 1000:.1f} ms")


if __name__ == "__main__":
    main()
