"""integrity.shard_index: reading, checking and writing a sharded checkpoint's index (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from inspector.core.atomic import OutputExistsError
from inspector.integrity.shard_index import (
    ShardError,
    check_contents,
    check_files,
    read_index,
    safetensors_contents,
    shard_name,
    write_index,
)

S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def _set(folder: Path) -> Path:
    """Two real safetensors shards and the index transformers would write for them."""
    save_file({"a": np.ones((2, 3), np.float32), "b": np.zeros(4, np.int64)}, folder / S1)
    save_file({"c": np.ones(5, np.float16)}, folder / S2)
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({
        "metadata": {"total_size": 24 + 32 + 10},
        "weight_map": {"a": S1, "b": S1, "c": S2},
    }))
    return index


def _contents(index_path: Path) -> tuple[dict[str, list[str]], int]:
    index = read_index(index_path)
    found, total = {}, 0
    for shard in index.shards():
        found[shard], size = safetensors_contents(index.folder / shard)
        total += size
    return found, total


def test_a_consistent_set_has_no_problems(tmp_path: Path) -> None:
    index = read_index(_set(tmp_path))
    assert index.single_name == "model.safetensors"
    assert index.shards() == [S1, S2] and index.keys_of(S1) == ["a", "b"]
    found, total = _contents(index.path)
    assert total == 66 == index.total_size
    assert check_files(index) == [] and check_contents(index, found, total) == []


def test_missing_and_orphan_shards(tmp_path: Path) -> None:
    index_path = _set(tmp_path)
    (tmp_path / S2).rename(tmp_path / "model-00003-of-00003.safetensors")
    (tmp_path / "pytorch_model-00001-of-00002.bin").write_bytes(b"another set")
    problems = check_files(read_index(index_path))
    assert [(p.code, p.message.split(":")[0]) for p in problems] == [
        ("missing-shard", S2),
        ("orphan-shard", "model-00003-of-00003.safetensors"),
    ]


def test_a_key_listed_twice_in_the_json_is_caught(tmp_path: Path) -> None:
    index_path = _set(tmp_path)
    text = index_path.read_text().replace('"c": "', f'"a": "{S2}", "c": "')
    index_path.write_text(text)
    problems = check_files(read_index(index_path))
    assert [(p.code, p.fatal) for p in problems] == [("key-in-two-shards", True)]
    assert S1 in problems[0].message and S2 in problems[0].message


def test_contents_that_disagree_with_the_index(tmp_path: Path) -> None:
    index = read_index(_set(tmp_path))
    found = {S1: ["a", "x"], S2: ["c", "a", "b"]}
    codes = sorted((p.code, p.fatal) for p in check_contents(index, found, 99))
    assert codes == [
        ("key-in-two-shards", True),
        ("key-in-wrong-shard", True),
        ("key-not-in-index", True),
        ("total-size", False),
    ]
    assert [p.code for p in check_contents(index, {S1: ["a"], S2: ["c"]})] == ["key-not-in-shard"]


def test_write_index_round_trips_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors.index.json"
    write_index(out, {"b": S2, "a": S1}, 66, {"total_parameters": 17, "total_size": 1})
    doc = json.loads(out.read_text())
    assert doc == {
        "metadata": {"total_parameters": 17, "total_size": 66},
        "weight_map": {"a": S1, "b": S2},
    }
    assert list(doc["weight_map"]) == ["a", "b"]
    with pytest.raises(OutputExistsError):
        write_index(out, {}, 0)
    assert read_index(out).total_size == 66


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"weight_map": []}',
        '{"weight_map": {"a": "../x.bin"}}',
        '{"weight_map": {"a": 1}}',
    ],
)
def test_unreadable_indexes_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "pytorch_model.bin.index.json"
    path.write_text(text)
    with pytest.raises(ShardError, match=str(path)):
        read_index(path)


def test_shard_names_are_transformers_names() -> None:
    assert shard_name("model.safetensors", 2, 12) == "model-00002-of-00012.safetensors"
    assert shard_name("diffusion_pytorch_model.bin", 1, 3) == (
        "diffusion_pytorch_model-00001-of-00003.bin"
    )
