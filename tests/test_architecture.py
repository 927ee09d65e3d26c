"""Architecture guess and resume-readiness checklist, on real state dicts of real models.

The tensor records are made by the worker's own code (`split_leaves`, `layout_record`,
`storage_groups`, `describe_object`) in this process, so shapes and shared storage are what a
jailed `inspect` would report; one test goes through the jailed `inspect` itself. Model configs
are built here, never downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch
from factories import save_training_checkpoint, small_state_dict, training_checkpoint

from inspector.checkpoint.architecture import UNKNOWN, Architecture, guess_architecture
from inspector.checkpoint.contents import summarize
from inspector.checkpoint.results import InspectResult
from inspector.checkpoint.resume import (
    MISMATCH,
    MISSING,
    PRESENT,
    ResumeChecklist,
    headline,
    resume_checklist,
)
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats
from inspector.cli import main
from inspector.tensors.load import split_leaves
from inspector.tensors.plain.leaves import describe_object
from inspector.tensors.records import layout_record, storage_groups


@pytest.fixture(scope="module")
def transformers():
    """transformers, for the tests that build its models: imported when the first of them runs,
    not at collection (a second or more of every run's collection otherwise)."""
    return pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _seeded():
    """Random initialisation, the same on every run."""
    torch.manual_seed(0)


def records(obj) -> tuple[list[TensorStats], list[ObjectLeaf]]:
    """Tensor records and object leaves of a checkpoint, as the worker builds them, typed."""
    tensors, objects = split_leaves(obj)
    shared = storage_groups(tensors)
    recs = [{**layout_record(k, t), **({"shared_with": shared[k]} if k in shared else {})}
            for k, t in tensors]
    return ([TensorStats.from_json(r) for r in recs],
            [ObjectLeaf.from_json(describe_object(k, v)) for k, v in objects])


def guess(obj):
    return guess_architecture(records(obj)[0])


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied parameters once


def llama(transformers, **kw):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                   num_attention_heads=8, num_key_value_heads=2, vocab_size=100,
                                   **kw)
    return cfg, transformers.LlamaForCausalLM(cfg)


def test_llama_untied_with_grouped_query_attention(transformers):
    cfg, model = llama(transformers, tie_word_embeddings=False)
    a = guess(model.state_dict())
    assert a.family.startswith("Llama")
    assert a.layers == {"decoder": cfg.num_hidden_layers}
    assert (a.hidden_size, a.vocab_size) == (cfg.hidden_size, cfg.vocab_size)
    assert a.intermediate_size == cfg.intermediate_size
    assert a.tied_embeddings is False and a.attention_heads is None  # head width is in no shape
    ratio = cfg.num_attention_heads // cfg.num_key_value_heads
    assert f"grouped-query attention: {ratio} query heads per key/value head" in a.notes
    assert a.parameters == n_params(model)


def test_llama_tied_head_shares_storage_or_is_left_out(transformers):
    _, model = llama(transformers, tie_word_embeddings=True)
    state = model.state_dict()
    assert guess(state).tied_embeddings is True
    assert guess(state).parameters == n_params(model)
    # what a safetensors save of a tied model holds: no lm_head at all
    state.pop("lm_head.weight")
    assert guess(state).tied_embeddings is True
    assert "no output head saved: tied to the embedding, or a base model" in guess(state).notes


def test_mistral_is_llama_style(transformers):
    cfg = transformers.MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=4, vocab_size=50)
    a = guess(transformers.MistralForCausalLM(cfg).state_dict())
    assert a.family.startswith("Llama") and a.layers == {"decoder": 2}
    assert not any("grouped-query" in n for n in a.notes)  # as many k/v heads as query heads


def test_mixtral_experts_and_their_width(transformers):
    cfg = transformers.MixtralConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     num_local_experts=4, vocab_size=50)
    model = transformers.MixtralForCausalLM(cfg)
    a = guess(model.state_dict())
    assert a.family.startswith("Llama") and a.layers == {"decoder": 2}
    assert "mixture of experts: 4 experts per layer" in a.notes
    assert a.intermediate_size == 48 and a.parameters == n_params(model)
    # Mixtral as first published: numbered experts under block_sparse_moe
    old = {k.replace(".mlp.gate.", ".block_sparse_moe.gate."): v
           for k, v in model.state_dict().items() if ".experts." not in k}
    old |= {f"model.layers.{n}.block_sparse_moe.experts.{e}.w1.weight": torch.zeros(48, 32)
            for n in range(2) for e in range(4)}
    b = guess(old)
    assert "mixture of experts: 4 experts per layer" in b.notes and b.intermediate_size == 48


def test_gpt2(transformers):
    cfg = transformers.GPT2Config(n_embd=48, n_layer=5, n_head=4, vocab_size=120, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    a = guess(model.state_dict())
    assert a.family.startswith("GPT-2") and a.layers == {"decoder": 5}
    assert (a.hidden_size, a.vocab_size, a.intermediate_size) == (48, 120, 4 * 48)
    assert a.tied_embeddings is True and "32 positions" in a.notes
    assert a.parameters == n_params(model)


def test_bert_with_and_without_its_masked_lm_head(transformers):
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                  intermediate_size=80, vocab_size=90)
    mlm = transformers.BertForMaskedLM(cfg)
    a = guess(mlm.state_dict())
    assert a.family.startswith("BERT") and a.layers == {"encoder": 4}
    assert (a.hidden_size, a.vocab_size, a.intermediate_size) == (32, 90, 80)
    assert a.tied_embeddings is True and a.parameters == n_params(mlm)
    base = guess(transformers.BertModel(cfg).state_dict())
    assert base.family == a.family and base.tied_embeddings is None  # nothing to tie


def test_vit(transformers):
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                 intermediate_size=64, image_size=32, patch_size=8)
    model = transformers.ViTForImageClassification(cfg)
    a = guess(model.state_dict())
    assert a.family.startswith("Vision Transformer") and a.layers == {"encoder": 3}
    assert (a.hidden_size, a.intermediate_size, a.vocab_size) == (32, 64, None)
    assert "8×8 patches of 3 channels" in a.notes and a.parameters == n_params(model)


def test_t5_counts_both_stacks_and_reads_its_heads(transformers):
    cfg = transformers.T5Config(d_model=32, d_ff=72, num_layers=2, num_decoder_layers=3,
                                num_heads=4, d_kv=8, vocab_size=110)
    model = transformers.T5ForConditionalGeneration(cfg)
    a = guess(model.state_dict())
    assert a.family.startswith("T5") and a.layers == {"encoder": 2, "decoder": 3}
    assert (a.hidden_size, a.vocab_size, a.attention_heads, a.intermediate_size) == (
        32, 110, 4, 72)
    assert a.tied_embeddings is True and a.parameters == n_params(model)


def test_plain_cnn_counts_convolutions_and_leaves_out_buffers():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, 10))
    a = guess(model.state_dict())
    assert a.family == "convolutional network" and a.layers == {"convolution": 3}
    assert (a.hidden_size, a.vocab_size, a.tied_embeddings) == (None, None, None)
    assert a.parameters == n_params(model)  # running_mean/var and the counter are not


def test_prefixes_and_training_state_change_nothing(transformers):
    _, model = llama(transformers, tie_word_embeddings=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    bare = guess(model.state_dict())
    wrapped = guess({"state_dict": {f"module.{k}": v for k, v in model.state_dict().items()},
                     "optimizer": opt.state_dict(), "epoch": 1})
    assert wrapped.to_json() | {"evidence": ""} == bare.to_json() | {"evidence": ""}


def test_unknown_is_said_honestly():
    a = guess(small_state_dict())
    assert a.family == UNKNOWN and a.layers == {} and a.hidden_size is None
    assert a.parameters == sum(t.numel() for t in small_state_dict().values())
    assert a.summary().startswith("family unknown")
    json.dumps(a.to_json(), allow_nan=False)


def test_through_the_jailed_inspect(tmp_path, capsys, transformers):
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(20)  # one of this model's records then starts with 0x2e (a STOP byte)
    model = transformers.GPT2LMHeadModel(cfg)
    path = tmp_path / "gpt2.pt"
    torch.save(model.state_dict(), path)
    assert main(["inspect", str(path), "--json"]) == 0  # loaded, safe code, healthy weights
    result = json.loads(capsys.readouterr().out)
    assert result["error"] is None
    a = guess_architecture(InspectResult.from_json(result).tensors)
    assert a.layers == {"decoder": 2} and a.hidden_size == 32 and a.tied_embeddings is True
    assert a.parameters == n_params(model) == result["unique_storage"]["numel"]
    assert result["architecture"] == a.to_json() and result["resume"] is None


# ---- resume readiness ----------------------------------------------------------------------


def checklist(obj):
    tensors, objects = records(obj)
    return resume_checklist(summarize(tensors, objects), tensors, objects)


def statuses(c) -> dict[str, str]:
    return {i.code: i.status for i in c.items}


def test_a_model_optimizer_and_counter_are_enough_to_resume():
    c = checklist(training_checkpoint())
    assert statuses(c) == {"model_weights": PRESENT, "optimizer_state": PRESENT,
                           "progress": PRESENT, "lr_scheduler": MISSING,
                           "grad_scaler": MISSING, "rng_state": MISSING}
    assert c.ready
    optimizer = next(i for i in c.items if i.code == "optimizer_state")
    assert "tracks the model's 4 parameter tensors" in optimizer.detail
    json.dumps(c.to_json(), allow_nan=False)
    assert ResumeChecklist.from_json(c.to_json() | {"later": 1}) == c


def test_json_round_trips_and_ignores_keys_a_later_version_adds(transformers):
    _, model = llama(transformers, tie_word_embeddings=True)
    a = guess(model.state_dict())
    assert Architecture.from_json(a.to_json() | {"later": 1}) == a


def test_everything_a_resume_needs():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    scaler = torch.amp.GradScaler("cpu")
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    sched.step()
    c = checklist({"model": model.state_dict(), "optimizer": opt.state_dict(),
                   "lr_scheduler": sched.state_dict(), "scaler": scaler.state_dict(),
                   "epoch": 2, "global_step": 40, "rng_state": torch.get_rng_state()})
    assert set(statuses(c).values()) == {PRESENT} and c.ready
    details = {i.code: i.detail for i in c.items}
    assert details["lr_scheduler"] == "StepLR · last_epoch 1"
    assert details["grad_scaler"] == f"scale {scaler.state_dict()['scale']!r}"
    assert details["rng_state"] == "rng_state" and details["progress"] == "epoch 2 · global_step 40"


def test_lightning_layout():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    sched.step()
    c = checklist({"state_dict": model.state_dict(), "optimizer_states": [opt.state_dict()],
                   "lr_schedulers": [sched.state_dict()], "epoch": 0, "global_step": 1})
    assert statuses(c) == {"model_weights": PRESENT, "optimizer_state": PRESENT,
                           "progress": PRESENT, "lr_scheduler": PRESENT,
                           "grad_scaler": MISSING, "rng_state": MISSING}
    optimizer = next(i.detail for i in c.items if i.code == "optimizer_state")
    assert "tracks the model's 4 parameter tensors · per-parameter state for 4" in optimizer


def test_optimizer_of_a_partly_frozen_model_is_a_mismatch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model[1].parameters(), lr=1e-3)  # the first layer is frozen
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    c = checklist({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 7})
    assert statuses(c)["optimizer_state"] == MISMATCH and not c.ready
    assert headline(c) == "Not ready to resume: optimizer state does not match the model"
    assert "tracks 2 parameter tensors (18 elements of state), the model has 4 (58)" in next(
        i.detail for i in c.items if i.code == "optimizer_state")


def test_weights_alone_cannot_resume():
    c = checklist({"model": small_state_dict(), "epoch": 1})
    assert statuses(c)["optimizer_state"] == MISSING and not c.ready


def test_checklist_from_the_jailed_inspect(tmp_path, capsys):
    path = save_training_checkpoint(tmp_path / "train.pt")
    assert main(["inspect", str(path), "--json"]) in (0, 7)
    r = json.loads(capsys.readouterr().out)
    typed = InspectResult.from_json(r)
    c = resume_checklist(summarize(typed.tensors, typed.objects), typed.tensors, typed.objects)
    assert c.ready and statuses(c)["progress"] == PRESENT
    assert r["resume"] == c.to_json()
    main(["inspect", str(path)])
    out = capsys.readouterr().out
    assert "resume:   Ready to resume" in out
    assert "  Epoch / step: saved — epoch 3 · step 1200" in out
    assert "  RNG state (optional): not saved — " in out
