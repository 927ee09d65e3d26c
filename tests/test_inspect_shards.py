"""`inspect` of a sharded checkpoint: a model folder or its `*.index.json` is one result.

The model is a small GPT-2 (tied input and output embeddings) configured here, saved by
transformers' own `save_pretrained(max_shard_size="200KB")` (safetensors shards) and as
transformers 4 saved `.bin` shards (`factories.hf_bin_folder`), each beside the same model in
one file. Damaged sets are copies; every input is hashed before and after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from factories import (
    call,
    gpt2_layouts,
    mal_zip_data_pkl,
    tiny_gpt2,
    touch_cmd,
    tree_digests,
)
from gui_support import LOAD_TIMEOUT_MS

from inspector.cli import main

pytest_plugins = ("gui_fixtures",)  # fixtures: window

VALUES = ("dtype", "shape", "numel", "nbytes", "digest", "min", "max", "mean", "std",
          "std_sample", "absmax", "nan", "inf", "zeros", "histogram", "exponents", "flags")
"""What a tensor is, whatever file holds it (layout fields such as `storage_offset` differ:
safetensors tensors are views of one mapping of their file)."""
INDEXES = {"st": "model.safetensors.index.json", "bin": "pytorch_model.bin.index.json"}
SETTLED = ("loaded", "load_failed", "blocked", "error", "needs_decision")
SINGLES = {"st": "st-single/model.safetensors", "bin": "bin-single/pytorch_model.bin"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The same model as safetensors shards, `.bin` shards, one safetensors and one `.bin` file."""
    # importorskip here, not at module level: importing transformers adds a second or more to
    # every collection, and only the tests that use this model need it
    pytest.importorskip("transformers")
    return gpt2_layouts(tmp_path_factory.mktemp("models"), tiny_gpt2())



def _inspect(capsys, path: Path, *extra: str) -> tuple[int, dict]:
    code = main(["inspect", str(path), "--json", *extra])
    out, _ = capsys.readouterr()
    report = json.loads(out)
    json.dumps(report, allow_nan=False)
    return code, report


def _weight_map(index: Path) -> dict[str, str]:
    return json.loads(index.read_text())["weight_map"]


@pytest.mark.parametrize("kind", ["st", "bin"])
@pytest.mark.parametrize("named", ["folder", "index"])
def test_shards_give_the_tensors_of_the_same_model_in_one_file(saved, capsys, kind, named):
    before = tree_digests(saved)
    folder, index = saved / kind, saved / kind / INDEXES[kind]
    code, report = _inspect(capsys, folder if named == "folder" else index)
    assert code == 0, report["error"]
    single_code, single = _inspect(capsys, saved / SINGLES[kind])
    assert single_code == 0
    records = {t["key"]: t for t in report["tensors"]}
    assert len(records) == len(report["tensors"])  # every key once
    assert {k: {f: t.get(f) for f in VALUES} for k, t in records.items()} == {
        t["key"]: {f: t.get(f) for f in VALUES} for t in single["tensors"]}
    # each record names the shard that holds it, as the index says
    assert {k: t["shard"] for k, t in records.items()} == _weight_map(index)
    shards = sorted(set(_weight_map(index).values()))
    assert [s["file"] for s in report["shards"]] == shards
    for summary in report["shards"]:
        data = (folder / summary["file"]).read_bytes()
        assert summary["sha256"] == hashlib.sha256(data).hexdigest()
        assert summary["bytes"] == len(data)
        assert summary["tensors"] == sum(t["shard"] == summary["file"] for t in records.values())
        assert summary["format"] == report["format"] == single["format"]
    assert report["index"] == str(index)
    assert report["path"] == str(folder if named == "folder" else index)
    assert report["problems"] == []
    assert report["sha256"] is None and report["size"] == sum(s["bytes"] for s in report["shards"])
    assert report["scan"]["verdict"] == "safe" and len(report["scan"]["files"]) == len(shards)
    # each import once, as for the one file, counted over every shard and naming them
    counts: Counter[str] = Counter()
    for own in report["scan"]["files"]:
        counts.update({f"{g['module']}.{g['name']}": g["count"] for g in own["globals"]})
    merged = {f"{g['module']}.{g['name']}": g for g in report["scan"]["globals"]}
    assert len(merged) == len(report["scan"]["globals"])
    assert {k: g["count"] for k, g in merged.items()} == counts
    assert merged.keys() == {f"{g['module']}.{g['name']}" for g in single["scan"]["globals"]}
    if kind == "bin":
        rebuild = merged["torch._utils._rebuild_tensor_v2"]
        assert {m.split(":")[0] for m in rebuild["members"]} == set(shards)
    assert report["timing"]["workers"] == len(shards)  # one worker, one shard at a time
    # judged over every shard at once, as over the one file
    assert report["health"] == single["health"]
    assert report["architecture"] == single["architecture"]
    assert report["architecture"]["tied_embeddings"] is True
    if kind == "bin":  # the tied head is stored beside the embedding, in one storage
        head_shard = _weight_map(index)["lm_head.weight"]
        assert report["aliases"] == [{"key": "lm_head.weight",
                                      "stored_as": "transformer.wte.weight", "shard": head_shard,
                                      "how": "alias"}]
    else:  # transformers leaves the tied head out of safetensors
        assert "lm_head.weight" not in records and report["aliases"] == []
    assert tree_digests(saved) == before


def test_the_text_output_counts_the_shards(saved, capsys):
    code = main(["inspect", str(saved / "st")])
    out, _ = capsys.readouterr()
    assert code == 0
    count = len(list((saved / "st").glob("model-*.safetensors")))
    assert f"shards:   {count} in {saved / 'st' / INDEXES['st']}" in out
    assert "coverage: every key in exactly one shard" in out
    assert "GPT-2" in out


@pytest.mark.parametrize("payload, override", [("pickle", False), ("zip", False),
                                               ("zip", True)])
def test_a_malicious_shard_refuses_the_whole_folder(saved, tmp_path, capsys, canary, payload,
                                                     override):
    copy = tmp_path / "bin-hostile"
    shutil.copytree(saved / "bin", copy)
    hostile = sorted(copy.glob("pytorch_model-*.bin"))[1]
    if payload == "pickle":
        hostile.write_bytes(call("os", "system", touch_cmd(canary)))
    else:  # a torch.save archive whose data.pkl runs the command
        hostile.write_bytes(mal_zip_data_pkl(tmp_path / "payload.bin", canary).read_bytes())
    before = tree_digests(copy)
    extra = ("--override-dangerous",) if override else ()
    code, report = _inspect(capsys, copy, *extra)
    assert report["scan"]["verdict"] == "dangerous"
    assert "os.system" in {f"{g['module']}.{g['name']}" for g in report["scan"]["globals"]}
    assert report["tensors"] == [] and report["health"] is None
    if override:  # loaded with weights_only inside the jail, which refuses the global
        assert code == 5
        assert report["error"]["code"] == "weights_only_refused", report["error"]
        assert report["error"]["message"].startswith(f"{hostile.name}: ")
        assert report["sandbox"]["level"] in ("full", "partial")
    else:  # refused before any worker started: no shard was loaded
        assert code == 2
        assert report["error"]["code"] == "refused_dangerous"
        assert report["error"]["message"].startswith(f"{hostile.name}: not loaded")
        assert report["sandbox"] is None
        assert all(s["tensors"] is None for s in report["shards"])
    assert tree_digests(copy) == before
    assert not canary.exists()


def test_a_missing_shard_loads_nothing_and_is_a_coverage_problem(saved, tmp_path, capsys):
    copy = tmp_path / "st-missing"
    shutil.copytree(saved / "st", copy)
    gone = sorted(copy.glob("model-*.safetensors"))[1]
    gone.unlink()
    before = tree_digests(copy)
    code, report = _inspect(capsys, copy)
    assert code == 8
    assert report["error"]["code"] == "missing_shard"
    assert report["tensors"] == [] and report["sandbox"] is None
    message = f"{gone.name}: named by the index but not in {copy}"
    assert [(p["code"], p["message"], p["fatal"]) for p in report["problems"]] == [
        ("missing-shard", message, True)]
    assert gone.name not in [s["file"] for s in report["shards"]]
    code = main(["inspect", str(copy)])
    out, _ = capsys.readouterr()
    assert code == 8
    assert "coverage: 1 problem" in out and f"missing-shard: {message}" in out
    assert tree_digests(copy) == before


def test_an_index_naming_a_shard_outside_its_folder_is_refused_in_words(saved, tmp_path,
                                                                       capsys):
    copy = tmp_path / "st-outside"
    shutil.copytree(saved / "st", copy)
    index = copy / INDEXES["st"]
    data = json.loads(index.read_text())
    key = next(iter(data["weight_map"]))
    data["weight_map"][key] = "../elsewhere.safetensors"
    index.write_text(json.dumps(data))
    code = main(["inspect", str(copy)])
    out, _ = capsys.readouterr()
    assert code == 3
    assert "'weight_map' must map each key to a file name in its folder" in out
    assert "None" not in out  # no unfilled field shown to the user
    assert "sha256:   -" in out and "scan:     not run" in out


def test_a_misplaced_key_is_listed_and_every_tensor_still_inspected(saved, tmp_path, capsys):
    copy = tmp_path / "st-misplaced"
    shutil.copytree(saved / "st", copy)
    index_path = copy / INDEXES["st"]
    doc = json.loads(index_path.read_text())
    key = "transformer.h.1.mlp.c_fc.weight"
    held = doc["weight_map"][key]
    wrong = next(s for s in sorted(set(doc["weight_map"].values())) if s != held)
    doc["weight_map"][key] = wrong
    index_path.write_text(json.dumps(doc))
    code, report = _inspect(capsys, copy)
    assert code == 8
    assert report["error"] is None
    assert [(p["code"], p["message"]) for p in report["problems"]] == [
        ("key-in-wrong-shard", f"{key}: in {held}, the index says {wrong}")]
    assert {t["key"]: t["shard"] for t in report["tensors"]}[key] == held
    assert len(report["tensors"]) == len(doc["weight_map"])


def test_a_wrong_total_size_is_only_a_warning(saved, tmp_path, capsys):
    copy = tmp_path / "st-size"
    shutil.copytree(saved / "st", copy)
    index_path = copy / INDEXES["st"]
    doc = json.loads(index_path.read_text())
    right = doc["metadata"]["total_size"]
    doc["metadata"]["total_size"] = right + 4
    index_path.write_text(json.dumps(doc))
    code, report = _inspect(capsys, copy)
    assert code == 0
    assert [(p["code"], p["fatal"]) for p in report["problems"]] == [("total-size", False)]
    assert f"the tensors hold {right} bytes" in report["problems"][0]["message"]


def test_an_orphan_shard_is_listed(saved, tmp_path, capsys):
    copy = tmp_path / "st-orphan"
    shutil.copytree(saved / "st", copy)
    shards = sorted(copy.glob("model-*.safetensors"))
    orphan = copy / shards[0].name.replace("-00001-", "-00009-")
    shutil.copy(shards[0], orphan)
    code, report = _inspect(capsys, copy)
    assert code == 8
    assert [p["code"] for p in report["problems"]] == ["orphan-shard"]
    assert orphan.name not in {t["shard"] for t in report["tensors"]}


def test_a_folder_with_one_checkpoint_file_is_that_file(saved, capsys):
    code, report = _inspect(capsys, saved / "bin-single")
    assert code == 0
    assert report["path"] == str(saved / SINGLES["bin"])
    assert "shards" not in report and len(report["tensors"]) == 29


def test_the_app_opens_a_model_folder_as_one_document(window, qtbot, saved):
    before = tree_digests(saved)
    (doc,) = window.open_paths([saved / "st"])
    qtbot.waitUntil(lambda: doc.state in SETTLED, timeout=LOAD_TIMEOUT_MS)
    assert doc.state == "loaded", doc.message
    weight_map = _weight_map(saved / "st" / INDEXES["st"])
    assert {t["key"]: t["shard"] for t in doc.tensors} == weight_map
    assert doc.scan.verdict == "safe" and len(doc.scan.files) == len(set(weight_map.values()))
    window.tabs.setCurrentWidget(window.overview)
    shards = window.overview.fields["shards"]
    count = len(set(weight_map.values()))
    assert shards.text() == (f"{count} shards ({INDEXES['st']}): every key in exactly one "
                             "shard, as the index says")
    assert shards.isVisible()
    (single,) = window.open_paths([saved / SINGLES["st"]])
    qtbot.waitUntil(lambda: single.state in SETTLED, timeout=LOAD_TIMEOUT_MS)
    window.overview.set_document(single)
    assert not shards.isVisible()  # one file: no shard row
    assert tree_digests(saved) == before


def test_the_app_blocks_a_model_folder_with_a_malicious_shard(window, qtbot, saved,
                                                               tmp_path, canary):
    copy = tmp_path / "bin-hostile"
    shutil.copytree(saved / "bin", copy)
    hostile = sorted(copy.glob("pytorch_model-*.bin"))[1]
    hostile.write_bytes(call("os", "system", touch_cmd(canary)))
    (doc,) = window.open_paths([copy])
    qtbot.waitUntil(lambda: doc.state in SETTLED, timeout=LOAD_TIMEOUT_MS)
    assert doc.state == "blocked", doc.message
    assert doc.scan.verdict == "dangerous" and doc.result is None and not doc.tensors
    window.tabs.setCurrentWidget(window.overview)
    qtbot.waitUntil(lambda: not window.runner.active(), timeout=LOAD_TIMEOUT_MS)
    assert window.overview.fields["sha256"].text() == "—"  # not hashing a folder forever
    assert not canary.exists()
