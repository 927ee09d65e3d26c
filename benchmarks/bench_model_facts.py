"""The architecture guess on full-size configs, and what `model_facts` (architecture and
resume checklist, computed by the client for every inspect) costs on large key lists.

Models are built from transformers' default or published-shape configs on the meta device
(shapes only, no memory, no download): GPT-2 124M, BERT-base, Llama-2-7B-shaped, Mixtral-shaped
(2 layers), T5-small, ViT-base. Each guess is printed beside the config's own values. Then a
training checkpoint of N parameter tensors with Adam state (2 moments and a step per
parameter) and its param_groups ids is timed through `model_facts`.

    .venv/bin/python benchmarks/bench_model_facts.py [--tensors 4000]
"""

from __future__ import annotations

import argparse
import time

import torch
from common import best_of

from inspector.checkpoint.architecture import guess_architecture
from inspector.checkpoint.resume import model_facts
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats
from inspector.tensors.records import layout_record


def _configs() -> dict:
    import transformers as tf

    return {
        "gpt2-124M": (tf.GPT2Config(), tf.GPT2LMHeadModel),
        "bert-base": (tf.BertConfig(), tf.BertForMaskedLM),
        "llama-2-7b": (tf.LlamaConfig(hidden_size=4096, intermediate_size=11008,
                                      num_hidden_layers=32, num_attention_heads=32,
                                      vocab_size=32000), tf.LlamaForCausalLM),
        "mixtral-2-layer": (tf.MixtralConfig(num_hidden_layers=2), tf.MixtralForCausalLM),
        "t5-small": (tf.T5Config(), tf.T5ForConditionalGeneration),
        "vit-base": (tf.ViTConfig(), tf.ViTForImageClassification),
    }


def _records(model: torch.nn.Module) -> list[TensorStats]:
    """Layout records with `shared_with` by parameter identity (meta tensors have no storage
    whose address would tell, and `state_dict(keep_vars=True)` keeps tied parameters one)."""
    items = model.state_dict(keep_vars=True).items()
    by_id: dict[int, list[str]] = {}
    for key, t in items:
        by_id.setdefault(id(t), []).append(key)
    records = []
    for key, t in items:
        rec = layout_record(key, t)
        if len(by_id[id(t)]) > 1:
            rec["shared_with"] = [k for k in by_id[id(t)] if k != key]
        records.append(TensorStats.from_json(rec))
    return records


def guesses() -> None:
    """Print each full-size guess against its config."""
    for name, (cfg, cls) in _configs().items():
        with torch.device("meta"):
            model = cls(cfg)
        records = _records(model)
        start = time.perf_counter()
        arch = guess_architecture(records)
        ms = (time.perf_counter() - start) * 1e3
        layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "num_layers", None)
        hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "d_model", None)
        print(f"{name}: {len(records)} tensors, {ms:.1f} ms\n  guess:  {arch.summary()}\n"
              f"  config: layers {layers}, hidden {hidden}, vocab "
              f"{getattr(cfg, 'vocab_size', None)}")


def cost(n: int) -> None:
    """Time model_facts on a training checkpoint of `n` parameter tensors."""
    params = [{"key": f"model.layers.{i // 9}.mlp.w{i % 9}.weight", "dtype": "bfloat16",
               "shape": [256, 256], "numel": 65536} for i in range(n)]
    state = [dict(p, key=f"optimizer.state.{i}.{m}") for i, p in enumerate(params)
             for m in ("exp_avg", "exp_avg_sq")]
    state += [{"key": f"optimizer.state.{i}.step", "dtype": "float32", "shape": [],
               "numel": 1} for i in range(n)]
    objects = [{"key": f"optimizer.param_groups.0.params.{i}", "repr": str(i)}
               for i in range(n)] + [{"key": "epoch", "repr": "1"}]
    tensors = [TensorStats.from_json(t) for t in params + state]
    leaves = [ObjectLeaf.from_json(o) for o in objects]
    best, facts = best_of(lambda: model_facts(tensors, leaves))
    print(f"model_facts on {len(tensors)} tensors and {len(leaves)} objects: best "
          f"{best * 1e3:.0f} ms of 5 (ready: {facts.resume.ready})")


def main() -> None:
    """Run both parts."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tensors", type=int, default=4000)
    args = parser.parse_args()
    guesses()
    cost(args.tensors)


if __name__ == "__main__":
    main()
