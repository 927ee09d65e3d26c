"""`convert DIR` on real transformers layouts: sharded and single `.bin` folders, through a
Hugging Face cache snapshot, and folders whose shards disagree with their index.

transformers 5 writes only safetensors, so the `.bin` folders are laid out as transformers 4
wrote them (`factories.hf_bin_folder`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from factories import hf_bin_folder as _bin_folder
from factories import tiny_gpt2, tree_digests

from inspector.cli import main
from inspector.shards.tie_rule import kept_name

TOKENS = torch.tensor([[5, 17, 300, 2, 999, 41, 7, 7, 64, 0]])


@pytest.fixture(scope="module", autouse=True)
def _needs_transformers():
    """Every test here needs transformers: skipped where it is absent, and imported when the
    first test runs, not at collection (a second or more of every collection otherwise); the
    helpers below import it where they use it."""
    pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    """A 2-layer GPT-2 with hidden size 64, random weights, tied input and output embeddings."""
    return tiny_gpt2()


def _loads_strictly_and_identically(folder: Path, model) -> None:
    import transformers

    loaded, info = transformers.GPT2LMHeadModel.from_pretrained(
        folder, use_safetensors=True, output_loading_info=True
    )
    assert {k: list(v) for k, v in info.items()} == {
        "missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": [],
    }
    loaded.eval()
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    with torch.no_grad():
        assert torch.equal(loaded(TOKENS).logits, model(TOKENS).logits)


def test_sharded_bin_folder_converts_to_what_transformers_loads(tmp_path, model, capsys):
    folder = _bin_folder(tmp_path / "gpt2", model, "200KB")
    before = tree_digests(folder)
    shards = sorted(p.name for p in folder.glob("pytorch_model-*.bin"))
    assert len(shards) >= 3
    assert main(["convert", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in tree_digests(folder).items() if k in before} == before
    count = len(shards)
    names = [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]
    assert sorted(set(tree_digests(folder)) - set(before)) == sorted(
        [*names, "model.safetensors.index.json"]
    )
    assert report["outputs"] == [str(folder / n) for n in names]
    assert [s["input"] for s in report["shards"]] == [str(folder / s) for s in shards]
    # one warm fork server for the folder: every shard's worker was forked, none started cold
    assert {s["timing"]["worker"] for s in report["shards"]} == {"forked"}
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    old = json.loads((folder / "pytorch_model.bin.index.json").read_text())["weight_map"]
    # the same shard boundaries: every key stored in the shard of the same number
    for key, shard in index["weight_map"].items():
        assert shard == old[key].replace("pytorch_model-", "model-").replace(".bin", ".safetensors")
    # of the tied pair, the embedding is stored, as save_pretrained stores it
    assert set(old) - set(index["weight_map"]) == {"lm_head.weight"}
    assert index["metadata"]["total_size"] == report["bytes_written"] == sum(
        t.numel() * t.element_size()
        for k, t in model.state_dict().items() if k != "lm_head.weight"
    )
    assert report["problems"] == []
    _loads_strictly_and_identically(folder, model)

    assert main(["convert", str(folder / "pytorch_model.bin.index.json")]) == 4
    assert "exists; refusing to overwrite" in capsys.readouterr().err


def test_single_pytorch_model_bin_becomes_model_safetensors(tmp_path, model, capsys):
    folder = _bin_folder(tmp_path / "gpt2", model, None)
    out = tmp_path / "converted"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "generation_config.json", "pytorch_model.bin",
    ]
    shutil.copy(folder / "config.json", out / "config.json")
    _loads_strictly_and_identically(out, model)

    # one file named directly gets the name transformers looks for, beside it
    assert main(["convert", str(folder / "pytorch_model.bin")]) == 0
    assert (folder / "model.safetensors").is_file()
    assert not (folder / "pytorch_model.safetensors").exists()


def _hf_cache(root: Path, folder: Path) -> Path:
    """Move a model folder into a hub cache layout: blobs named by SHA-256, snapshot links."""
    repo = root / "hub" / "models--org--gpt2-tiny"
    snapshot = repo / "snapshots" / ("ab" * 20)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for item in sorted(folder.iterdir()):
        blob = repo / "blobs" / hashlib.sha256(item.read_bytes()).hexdigest()
        item.rename(blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / item.name)
    return snapshot


@pytest.mark.parametrize("via", ["snapshot", "index link"])
def test_converting_through_a_cache_snapshot_never_writes_into_blobs(
    tmp_path, model, capsys, via
):
    snapshot = _hf_cache(tmp_path, _bin_folder(tmp_path / "gpt2", model, "300KB"))
    blobs = snapshot.parent.parent / "blobs"
    before = tree_digests(blobs)
    target = snapshot if via == "snapshot" else snapshot / "pytorch_model.bin.index.json"
    assert main(["convert", str(target), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert tree_digests(blobs) == before
    written = [Path(p) for p in report["outputs"]] + [Path(report["output_index"])]
    assert all(p.parent == snapshot and p.is_file() and not p.is_symlink() for p in written)
    assert all(s["input"].startswith(str(snapshot)) for s in report["shards"])
    _loads_strictly_and_identically(snapshot, model)

    # the folder now holds safetensors shards, so its index is named to reach the blobs check
    index = snapshot / "pytorch_model.bin.index.json"
    assert main(["convert", str(index), "-o", str(blobs)]) == 4
    assert "blobs/" in capsys.readouterr().err
    assert tree_digests(blobs) == before
    # the cache's own files still verify against their blob names; the new ones are copies
    assert main(["verify", str(snapshot.parent.parent), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    unchecked = {Path(f["path"]).name for f in doc["files"] if f["status"] == "unchecked"}
    assert unchecked == {p.name for p in written}
    assert all(f["status"] in ("ok", "unchecked") for f in doc["files"])


def _break(folder: Path, how: str) -> None:
    index_path = folder / "pytorch_model.bin.index.json"
    index = json.loads(index_path.read_text())
    shards = sorted(set(index["weight_map"].values()))
    if how == "missing shard":
        (folder / shards[-1]).unlink()
    elif how == "orphan shard":
        (folder / "pytorch_model-00009-of-00009.bin").write_bytes(b"left over")
    elif how == "key not in its shard":
        index["weight_map"]["transformer.h.9.attn.c_attn.weight"] = shards[0]
    elif how == "key in the wrong shard":
        key = next(k for k, s in index["weight_map"].items() if s == shards[-1])
        index["weight_map"][key] = shards[0]
    index_path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    "how", ["missing shard", "orphan shard", "key not in its shard", "key in the wrong shard"]
)
def test_shards_that_disagree_with_their_index_leave_nothing(tmp_path, model, capsys, how):
    folder = _bin_folder(tmp_path / "gpt2", model, "300KB")
    _break(folder, how)
    before = tree_digests(folder)
    assert main(["convert", str(folder), "--json"]) == 7
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["code"] == "coverage" and doc["problems"]
    assert tree_digests(folder) == before
    assert not any(p.name.startswith(".") for p in folder.iterdir())


def test_one_file_through_a_snapshot_link_lands_beside_the_link(tmp_path, model, capsys):
    snapshot = _hf_cache(tmp_path, _bin_folder(tmp_path / "gpt2", model, None))
    blobs = snapshot.parent.parent / "blobs"
    before = tree_digests(blobs)
    link = snapshot / "pytorch_model.bin"
    assert main(["convert", str(link), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    out = snapshot / "model.safetensors"
    assert report["input"] == str(link) and report["output"] == str(out)
    assert out.is_file() and not out.is_symlink() and tree_digests(blobs) == before
    _loads_strictly_and_identically(snapshot, model)
    # where the cache already holds model.safetensors, --force must not write through its link
    blob = blobs / hashlib.sha256(out.read_bytes()).hexdigest()
    out.rename(blob)
    os.symlink(os.path.relpath(blob, snapshot), out)
    assert main(["convert", str(link), "--force"]) == 4
    assert "is a link; refusing to write through it" in capsys.readouterr().err
    assert tree_digests(blobs) == {**before, blob.name: blob.name}


def _tiny_llama():
    """A 2-layer Llama with tied input and output embeddings."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.LlamaForCausalLM(config).eval()


def _tiny_t5():
    """A 1+1-layer T5 whose `shared` embedding is tied to both embed_tokens and lm_head."""
    import transformers

    torch.manual_seed(0)
    config = transformers.T5Config(
        num_layers=1, num_decoder_layers=1, d_model=32, d_kv=8, d_ff=64, num_heads=4,
        vocab_size=1000, decoder_start_token_id=0,
    )
    return transformers.T5ForConditionalGeneration(config).eval()


def _logits(model, tokens):
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            return model(input_ids=tokens, decoder_input_ids=tokens[:, :4]).logits
        return model(tokens).logits


def _stored_keys(folder: Path) -> list[str]:
    header = (folder / "model.safetensors").read_bytes()
    length = int.from_bytes(header[:8], "little")
    return sorted(k for k in json.loads(header[8:8 + length]) if k != "__metadata__")


def _tiny_bart():
    """A 1+1-layer BART: `model.shared` tied to both embed_tokens and lm_head."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BartConfig(
        encoder_layers=1, decoder_layers=1, d_model=16, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, vocab_size=100,
        max_position_embeddings=32,
    )
    return transformers.BartForConditionalGeneration(config).eval()


def _tiny_bert():
    """A 1-layer masked-LM BERT: the decoder weight tied to the word embeddings, and its bias
    to the prediction head's."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                                     intermediate_size=32, vocab_size=100,
                                     max_position_embeddings=32)
    return transformers.BertForMaskedLM(config).eval()


@pytest.mark.parametrize("build", [tiny_gpt2, _tiny_llama, _tiny_t5, _tiny_bart, _tiny_bert])
def test_the_tie_rule_keeps_what_save_pretrained_keeps(tmp_path, build):
    model = build()
    model.save_pretrained(tmp_path, safe_serialization=True)
    saved = set(_stored_keys(tmp_path))
    groups: dict[int, list[str]] = {}
    for key, tensor in model.state_dict().items():
        groups.setdefault(tensor.data_ptr(), []).append(key)
    tied = [names for names in groups.values() if len(names) > 1]
    assert tied
    for names in tied:
        assert saved & set(names) == {kept_name(names)}, names


@pytest.mark.parametrize("build, kept", [
    (tiny_gpt2, "transformer.wte.weight"),
    (_tiny_llama, "model.embed_tokens.weight"),
    (_tiny_t5, "shared.weight"),
])
def test_tied_weights_are_stored_under_the_name_save_pretrained_keeps(tmp_path, capsys,
                                                                      build, kept):
    model = build()
    model.save_pretrained(tmp_path / "reference", safe_serialization=True)
    folder = tmp_path / "bin"
    folder.mkdir()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    shutil.copy(tmp_path / "reference" / "config.json", folder / "config.json")
    out = tmp_path / "converted"
    assert main(["convert", str(folder), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    tied = {k for k, t in model.state_dict().items()
            if t.data_ptr() == model.state_dict()[kept].data_ptr()}
    [shard] = report["shards"]
    assert len(tied) >= 2 and shard["aliases"] == dict.fromkeys(sorted(tied - {kept}), kept)
    assert _stored_keys(out) == _stored_keys(tmp_path / "reference")
    shutil.copy(folder / "config.json", out / "config.json")
    loaded, info = type(model).from_pretrained(out, use_safetensors=True,
                                               output_loading_info=True)
    assert {k: list(v) for k, v in info.items()} == {
        "missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": [],
    }
    tokens = TOKENS % model.config.vocab_size
    assert torch.equal(_logits(loaded.eval(), tokens), _logits(model, tokens))
