"""`diff` between sharded checkpoints: folders, indexes and single files, across formats.

The checkpoints are a small GPT-2 (tied input and output embeddings) configured here, saved
by transformers' own `save_pretrained(max_shard_size="200KB")` (safetensors shards) and as
transformers 4 saved `.bin` shards (`factories.hf_bin_folder`). A flipped bit is flipped in a
copy; every input is hashed before and after to prove none was written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import weakref
from pathlib import Path

import pytest
import torch
from factories import gpt2_layouts, tiny_gpt2, tree_digests

from inspector.checkpoint.tensor_pairs import Stored, pair_keys
from inspector.cli import main
from inspector.sandbox.worker.diff import IDENTICAL, ONLY_IN_A, Side, diff_sides
from inspector.tensors.sources import open_checkpoint

FLIP_KEY = "transformer.h.1.mlp.c_fc.weight"
FLIP_ELEMENT, FLIP_BIT = 777, 30  # a float32 exponent bit


@pytest.fixture(scope="module")
def model():
    """A 2-layer GPT-2 with hidden size 64, random weights, tied input and output embeddings."""
    # importorskip here, not at module level: importing transformers adds a second or more to
    # every collection, and only the tests that use this model need it
    pytest.importorskip("transformers")
    return tiny_gpt2()


@pytest.fixture(scope="module")
def saved(model, tmp_path_factory):
    """The same model as safetensors shards, `.bin` shards, one safetensors and one `.bin` file."""
    return gpt2_layouts(tmp_path_factory.mktemp("models"), model)



def _diff(capsys, a: Path, b: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["diff", str(a), str(b), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _weight_map(index: Path) -> dict[str, str]:
    return json.loads(index.read_text())["weight_map"]


@pytest.mark.parametrize("names", ["folders", "indexes"])
def test_bin_shards_and_safetensors_shards_of_one_model_are_identical(saved, model, capsys,
                                                                      names):
    before = tree_digests(saved)
    a_index, b_index = saved / "bin" / "pytorch_model.bin.index.json", \
        saved / "st" / "model.safetensors.index.json"
    a, b = (saved / "bin", saved / "st") if names == "folders" else (a_index, b_index)
    code, out, err = _diff(capsys, a, b, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["identical"] is True
    records = {r["key"]: r for r in result["tensors"]}
    assert set(records) == set(model.state_dict())
    assert {r["status"] for r in records.values()} == {IDENTICAL}
    # every key named with the shard each side keeps it in, as each index says
    map_a, map_b = _weight_map(a_index), _weight_map(b_index)
    assert {k: r["shard_a"] for k, r in records.items()} == map_a
    assert {k: r["shard_b"] for k, r in records.items() if k in map_b} == map_b
    # the tied head: stored in A beside the embedding, not stored in B; compared with B's
    # embedding, and said so
    head = records["lm_head.weight"]
    assert "lm_head.weight" not in map_b
    assert head["stored_as_b"] == "transformer.wte.weight"
    assert head["shard_b"] == map_b["transformer.wte.weight"]
    assert result["aliases"] == [{"key": "lm_head.weight", "side": "b",
                                  "stored_as": "transformer.wte.weight", "how": "tied"}]
    assert [s["file"] for s in result["a"]["shards"]] == sorted(set(map_a.values()))
    assert result["a"]["format"] == "pytorch-zip" and result["b"]["format"] == "safetensors"
    assert result["a"]["index"] == str(a_index) and result["b"]["index"] == str(b_index)
    assert result["a"]["problems"] == result["b"]["problems"] == []
    json.dumps(result, allow_nan=False)
    code, out, _ = _diff(capsys, a, b)
    assert code == 0
    assert "IDENTICAL: " in out and "shards" in out
    assert "tied: `lm_head.weight` is not stored in B" in out
    assert tree_digests(saved) == before


def _flip_in_safetensors(path: Path, key: str, element: int, bit: int) -> int:
    """Flip one bit of one element in place (of a copy); the byte's offset in the file."""
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8:8 + n])[key]
    assert entry["dtype"] == "F32"
    at = 8 + n + entry["data_offsets"][0] + element * 4 + bit // 8
    data[at] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))
    return at


def test_one_flipped_bit_in_one_shard_is_named_by_key_shard_and_bit(saved, tmp_path, capsys):
    before = tree_digests(saved)
    copy = tmp_path / "st-flipped"
    shutil.copytree(saved / "st", copy)
    shard = _weight_map(copy / "model.safetensors.index.json")[FLIP_KEY]
    at = _flip_in_safetensors(copy / shard, FLIP_KEY, FLIP_ELEMENT, FLIP_BIT)
    code, out, err = _diff(capsys, saved / "bin", copy, "--json")
    assert code == 1, err
    result = json.loads(out)
    changed = [r for r in result["tensors"] if r["status"] != IDENTICAL]
    assert [r["key"] for r in changed] == [FLIP_KEY]
    (record,) = changed
    assert record["shard_b"] == shard
    assert record["changed_elements"] == record["single_bit_flips"] == 1
    (flip,) = record["bitflips"]
    assert (flip["index"], flip["bit"], flip["file_offset_b"]) == (FLIP_ELEMENT, FLIP_BIT, at)
    code, out, _ = _diff(capsys, saved / "bin", copy)
    assert code == 1
    line = next(x for x in out.splitlines() if FLIP_KEY in x)
    assert f"B: {shard}" in line
    assert f"bit {FLIP_BIT}" in out
    assert tree_digests(saved) == before


def test_a_missing_shard_is_an_error_that_names_it(saved, tmp_path, capsys):
    copy = tmp_path / "st-missing"
    shutil.copytree(saved / "st", copy)
    gone = sorted(copy.glob("model-*.safetensors"))[1]
    gone.unlink()
    code, out, err = _diff(capsys, saved / "st", copy, "--json")
    assert code == 2
    error = json.loads(out)["error"]  # --json answers with the error object, not silence
    assert error["code"] == "bad_shards" and gone.name in error["message"]
    assert f"{gone.name}: named by the index but not in {copy}" in err


@pytest.mark.parametrize("sharded, single", [
    ("st", "st-single/model.safetensors"),
    ("bin", "bin-single/pytorch_model.bin"),
    ("bin", "st-single"),
])
def test_sharded_against_the_same_model_in_one_file_is_identical(saved, capsys, sharded,
                                                                 single):
    code, out, err = _diff(capsys, saved / sharded, saved / single, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert len(result["b"]["shards"]) == 1 and result["b"]["index"] is None
    assert {r["status"] for r in result["tensors"]} == {IDENTICAL}


def test_a_head_that_is_not_tied_is_only_in_a(saved, model, tmp_path, capsys):
    """Only shared storage makes an alias: an untied copy of the embedding is a key of its own."""
    copy = tmp_path / "bin-untied"
    shutil.copytree(saved / "bin", copy)
    shard = _weight_map(copy / "pytorch_model.bin.index.json")["lm_head.weight"]
    state = torch.load(copy / shard, weights_only=True)
    state["lm_head.weight"] = state["lm_head.weight"].clone()
    torch.save(state, copy / shard)
    code, out, err = _diff(capsys, copy, saved / "st", "--json")
    assert code == 1, err
    result = json.loads(out)
    assert result["aliases"] == []
    assert [(r["key"], r["status"]) for r in result["tensors"] if r["status"] != IDENTICAL] == [
        ("lm_head.weight", ONLY_IN_A)]


def test_an_index_that_misplaces_a_key_is_warned_about_and_the_tensors_still_compared(
        saved, tmp_path, capsys):
    copy = tmp_path / "st-misplaced"
    shutil.copytree(saved / "st", copy)
    index_path = copy / "model.safetensors.index.json"
    doc = json.loads(index_path.read_text())
    held = doc["weight_map"][FLIP_KEY]
    wrong = next(s for s in sorted(set(doc["weight_map"].values())) if s != held)
    doc["weight_map"][FLIP_KEY] = wrong
    index_path.write_text(json.dumps(doc))
    code, out, err = _diff(capsys, saved / "st", copy, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["a"]["problems"] == []
    assert [(p["code"], p["message"]) for p in result["b"]["problems"]] == [
        ("key-in-wrong-shard", f"{FLIP_KEY}: in {held}, the index says {wrong}")]
    assert {r["key"]: r["shard_b"] for r in result["tensors"]}[FLIP_KEY] == held
    code, out, _ = _diff(capsys, saved / "st", copy)
    assert f"warning: {FLIP_KEY}: in {held}, the index says {wrong}" in out


def test_shards_reached_through_links_are_named_as_the_links(saved, tmp_path, capsys):
    """A Hugging Face cache snapshot: links named like the shards, to blobs named by hash."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snapshot.mkdir()
    for item in (saved / "st").iterdir():
        blob = blobs / hashlib.sha256(item.read_bytes()).hexdigest()
        shutil.copy(item, blob)
        (snapshot / item.name).symlink_to(blob)
    code, out, err = _diff(capsys, saved / "bin", snapshot, "--json")
    assert code == 0, err
    result = json.loads(out)
    names = sorted(p.name for p in (saved / "st").glob("model-*.safetensors"))
    assert [s["file"] for s in result["b"]["shards"]] == names
    assert {r["shard_b"] for r in result["tensors"]} == set(names)
    assert result["b"]["path"] == str(snapshot)


def test_one_shard_per_side_is_open_at_a_time(saved):
    """The comparison never holds two files of one side: each is dropped before the next."""
    live = {"a": set(), "b": set()}
    most = {"a": 0, "b": 0}

    def side(letter: str, folder: Path) -> Side:
        files = sorted(str(p) for p in folder.glob("*-of-*.*"))

        def opened(number: int):
            ckpt = open_checkpoint(files[number])
            token = object()
            live[letter].add(token)
            most[letter] = max(most[letter], len(live[letter]))
            weakref.finalize(ckpt, live[letter].discard, token)
            return ckpt

        return Side(str(folder), [Path(f).name for f in files], opened)

    result = diff_sides(side("a", saved / "bin"), side("b", saved / "st"))
    assert result["identical"]
    assert most == {"a": 1, "b": 1}


def test_pairs_follow_tied_storage_only_where_dtype_and_shape_agree():
    a = [Stored("emb", 0, "float32", (4, 2), storage=(8, (2, 1))),
         Stored("head", 0, "float32", (4, 2), storage=(8, (2, 1))),
         Stored("other", 1, "float32", (4, 2), storage=(8, (2, 1)))]
    b = [Stored("emb", 1, "float32", (4, 2), storage=(0, 32))]
    pairs = {p.key: p for p in pair_keys(a, b)}
    assert (pairs["head"].tied, pairs["head"].b.key) == ("b", "emb")
    assert pairs["emb"].tied is None and pairs["other"].b is None  # another shard: no twin
    b_other = [Stored("emb", 0, "float16", (4, 2), storage=(0, 16))]
    assert {p.key: p.b for p in pair_keys(a, b_other)}["head"] is None
