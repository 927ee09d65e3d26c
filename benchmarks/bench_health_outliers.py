"""False positives and detection of the weights-health outlier rule (`checkpoint.health`) on
real-shaped checkpoints, and what the exponent counts cost the statistics.

Models are built from transformers configs with their own random initialisation (GPT-2 124M,
BERT-base, a Llama-shaped 8-layer model, ViT-base, T5-small; no downloads) in float32,
float16 and bfloat16, plus a small GPT-2 trained for --steps steps on a toy copy task (trained
weights have heavier tails than any initialisation). For each: every tensor goes through
`tensors.stats.tensor_stats` (with the exponent pass forced on every tensor, so the rule
itself is measured, and again as shipped, where the histogram screen skips that pass; both
must give the same findings) and `checkpoint.health.assess`; a false positive is any problem
finding on these clean weights. Then one random non-zero element of every judged weight gets
its top exponent bit set and we count how many of those tensors are named. Last, what the
exponent pass costs `describe_tensors` (statistics and digests on two threads) with and
without the screen.

    .venv/bin/python benchmarks/bench_health_outliers.py [--steps 300] [--models gpt2,bert]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from inspector.checkpoint.health import PROBLEM, Health, assess, is_state_key, outlier_gap
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.tensors import stats
from inspector.tensors.describe import describe_tensors
from inspector.tensors.records import dtype_name
from inspector.tensors.stats import tensor_stats

_MSB = {torch.float32: (torch.int32, 30), torch.float16: (torch.int16, 14),
        torch.bfloat16: (torch.int16, 14)}


def _assess(rows) -> Health:
    """The health of the contract's tensor records (dicts, as the worker writes them)."""
    return assess(map(TensorStats.from_json, rows))


def _models(names: list[str]) -> dict[str, torch.nn.Module]:
    import transformers as tf

    makers = {
        "gpt2-124M": lambda: tf.GPT2LMHeadModel(tf.GPT2Config()),
        "bert-base": lambda: tf.BertModel(tf.BertConfig()),
        "llama-8L-512": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
            num_attention_heads=8, num_key_value_heads=8, vocab_size=32000)),
        "vit-base": lambda: tf.ViTModel(tf.ViTConfig()),
        "t5-small": lambda: tf.T5ForConditionalGeneration(tf.T5Config()),
    }
    return {n: makers[n]() for n in makers if not names or any(x in n for x in names)}


def _trained_gpt2(steps: int) -> torch.nn.Module:
    """A 2-layer GPT-2 trained to copy the first half of a sequence into the second."""
    import transformers as tf

    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=64,
                                             n_positions=64))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        half = torch.randint(0, 64, (32, 16))
        batch = torch.cat([half, half], dim=1)
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"  trained gpt2-2L: final loss {loss.item():.3f} after {steps} steps")
    return model


def _records(state: dict[str, torch.Tensor], force: bool = True) -> list[dict]:
    shipped = stats.outliers_ruled_out
    if force:
        stats.outliers_ruled_out = lambda *args: False
    try:
        return _plain_records(state)
    finally:
        stats.outliers_ruled_out = shipped


def _plain_records(state: dict[str, torch.Tensor]) -> list[dict]:
    out = []
    for key, t in state.items():
        t = t.detach()
        out.append({"key": key, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                    "numel": t.numel(), "digest": f"{t.data_ptr()}:{key}", **tensor_stats(t)})
    return out


def _flip_msb(t: torch.Tensor, rng: random.Random) -> torch.Tensor | None:
    """t with the top exponent bit of one random non-zero value set; None if all are zero."""
    view, bit = _MSB[t.dtype]
    out = t.detach().clone().contiguous()
    raw = out.view(-1).view(view)
    nonzero = torch.nonzero((out.view(-1) != 0) & (raw >> bit & 1 == 0)).view(-1)
    if not nonzero.numel():
        return None
    i = int(nonzero[rng.randrange(nonzero.numel())])
    raw[i] = int(raw[i]) ^ (1 << bit)
    return out


def run(name: str, model: torch.nn.Module, dtype: torch.dtype, rng: random.Random) -> dict:
    state = {k: v.to(dtype) if v.is_floating_point() else v
             for k, v in model.state_dict(keep_vars=False).items()}
    start = time.perf_counter()
    records = _records(state)
    elapsed = time.perf_counter() - start
    health = _assess(records)
    assert _assess(_records(state, force=False)).to_json() == health.to_json()
    fps = [f for f in health.findings if f.severity == PROBLEM]
    warnings = [f for f in health.findings if f.severity == "warning"]
    judged = [k for k, v in state.items() if v.is_floating_point() and not is_state_key(k)
              and v.numel() >= 16 and outlier_gap(dtype_name(dtype)) is not None]
    named = flipped_count = 0
    for key in judged:
        flipped = _flip_msb(state[key], rng)
        if flipped is None:
            continue  # all zero (a fresh bias): flipping 0 gives 2.0, nothing to see
        flipped_count += 1
        findings = _assess(_records({key: flipped})).findings
        named += any(f.key == key and f.severity == PROBLEM for f in findings)
    params = sum(v.numel() for v in state.values())
    print(f"{name:>14} {dtype_name(dtype):>9}: {len(records):4d} tensors, {params / 1e6:7.1f} M "
          f"values, stats {elapsed:5.2f} s; false problems {len(fps)} of "
          f"{health.weights_checked} weights; warnings {len(warnings)}; flipped top exponent "
          f"bit named in {named}/{flipped_count} tensors with non-zero values")
    for f in fps + warnings[:3]:
        print(f"      {f.severity}: {f.key}: {f.message}")
    return {"fps": len(fps), "judged": health.weights_checked, "named": named,
            "flipped": flipped_count}


def heavy_tails(tensors: int = 20) -> None:
    """Stress: 1 M-value tensors drawn from Student-t (df 1, 2, 3) x 0.02; how many are flagged."""
    torch.manual_seed(0)
    for df in (1.0, 2.0, 3.0):
        dist = torch.distributions.StudentT(df)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            flagged = sum(
                _assess(_records({"w": (dist.sample((1024, 1024)) * 0.02).to(dtype)})).status
                == PROBLEM for _ in range(tensors))
            print(f"  Student-t df={df:g} {dtype_name(dtype):>9}: {flagged}/{tensors} flagged")


def exponent_cost(repeats: int = 5) -> None:
    """describe_tensors on 256 MiB of float32 weights: no exponent pass, screened, forced."""
    items = [(f"w{i}", torch.randn(2048, 2048) * 0.02) for i in range(16)]
    shipped = stats.outliers_ruled_out
    modes = {"never": lambda *args: True, "screened (shipped)": shipped,
             "always": lambda *args: False}
    times: dict[str, list[float]] = {m: [] for m in modes}
    torch.set_num_threads(1)
    for _ in range(repeats):
        for mode, screen in modes.items():
            stats.outliers_ruled_out = screen
            start = time.perf_counter()
            describe_tensors(items, lambda event: None, threads=2)
            times[mode].append(time.perf_counter() - start)
    stats.outliers_ruled_out = shipped
    base = statistics.median(times["never"])
    print("describe_tensors, 256 MiB float32, 2 threads, median of", repeats, "runs:",
          ", ".join(f"{m} {statistics.median(v):.3f} s (x{statistics.median(v) / base:.2f})"
                    for m, v in times.items()))


def main() -> None:
    """Run every model in every dtype, then the trained model, then the cost measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--models", default="", help="comma-separated name filters")
    args = parser.parse_args()
    rng = random.Random(0)
    totals = {"fps": 0, "judged": 0, "named": 0, "flipped": 0}
    torch.manual_seed(0)
    models = _models([m for m in args.models.split(",") if m])
    models["gpt2-2L-trained"] = _trained_gpt2(args.steps)
    for name, model in models.items():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for k, v in run(name, model, dtype, rng).items():
                totals[k] += v
    print(f"TOTAL: {totals['fps']} false problems over {totals['judged']} judged weight tensors; "
          f"flipped top exponent bit named in {totals['named']}/{totals['flipped']}")
    heavy_tails()
    exponent_cost()


if __name__ == "__main__":
    main()
