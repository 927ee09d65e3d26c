"""`report DIR`: a sharded model folder (or its `*.index.json`) is one checkpoint in the report.

The model is the small GPT-2 of `factories.tiny_gpt2`, saved by transformers' own
`save_pretrained(max_shard_size="200KB")` as safetensors shards and once as one file. Damaged
sets are copies; every input is hashed before and after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import factories
import jsonschema
import pytest
from factories import call, gpt2_layouts, tiny_gpt2, touch_cmd, tree_digests

from inspector.cli import main
from inspector.core import envinfo
from inspector.report.render_json import load_schema

pytestmark = pytest.mark.usefixtures("qapp")  # the HTML report draws its charts with Qt

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The same model as safetensors shards, `.bin` shards and one file of each."""
    # importorskip here, not at module level: importing transformers adds a second or more to
    # every collection, and only the tests that use this model need it
    pytest.importorskip("transformers")
    return gpt2_layouts(tmp_path_factory.mktemp("models"), tiny_gpt2())


@pytest.fixture(autouse=True)
def fast_env(monkeypatch):
    """In-process runs skip the torch subprocess probe of the environment section."""
    real = envinfo.collect
    monkeypatch.setattr(envinfo, "collect", lambda probe_torch=True: real(probe_torch=False))



def _report(tmp_path: Path, *args: str, name: str = "report.json") -> tuple[int, Path]:
    out = tmp_path / name
    return main(["report", *args, "-o", str(out), "--quiet"]), out


def _json(path: Path) -> dict:
    text = path.read_text()
    doc = json.loads(text)
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    json.dumps(doc, allow_nan=False)
    return doc


@pytest.mark.parametrize("named", ["folder", "index"])
def test_a_sharded_folder_is_one_entry_with_its_shards(saved, tmp_path, named):
    before = tree_digests(saved)
    folder = saved / "st"
    target = folder if named == "folder" else folder / INDEX
    # beside the same model in one file, two jobs at once (the --jobs runner)
    code, out = _report(tmp_path, str(target), str(saved / "st-single" / "model.safetensors"),
                        "--jobs", "2")
    assert code == 0
    doc = _json(out)
    assert doc["status"] == "passed" and doc["problems"] == []
    sharded, single = doc["files"]
    assert sharded["file"]["name"] == target.name
    assert sharded["file"]["path"] == str(target.absolute())
    assert sharded["file"]["sha256"] is None  # a folder has none; each shard has its own
    assert sharded["file"]["format"] == single["file"]["format"] == "safetensors"
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert [s["file"] for s in sharded["shards"]["files"]] == shards
    for row in sharded["shards"]["files"]:
        data = (folder / row["file"]).read_bytes()
        assert row["sha256"] == hashlib.sha256(data).hexdigest() and row["bytes"] == len(data)
    assert sharded["file"]["size"] == sum(s["bytes"] for s in sharded["shards"]["files"])
    assert sharded["shards"]["index"] == str(folder / INDEX)
    assert sharded["shards"]["problems"] == []
    assert single["shards"] is None
    assert sharded["load"]["status"] == "loaded" and sharded["verdict"] == "safe"
    # the same model: every tensor and the same unique parameters as the one file
    assert sharded["tensors"]["count"] == single["tensors"]["count"]
    assert sharded["tensors"]["unique_parameters"] == single["tensors"]["unique_parameters"]
    assert sharded["tensors"]["unique_parameters"] == sum(
        p.numel() for p in tiny_gpt2().parameters())  # tied embeddings counted once
    assert sharded["model"]["architecture"] == single["model"]["architecture"]
    assert tree_digests(saved) == before


def test_the_html_report_lists_the_shards(saved, tmp_path):
    code, out = _report(tmp_path, str(saved / "st"), name="report.html")
    assert code == 0
    html = out.read_text().replace("<wbr>", "")  # a name wraps at its separators
    assert "Shards</h3>" in html and "one per shard (see Shards)" in html
    for shard in (saved / "st").glob("model-*.safetensors"):
        assert shard.name in html and hashlib.sha256(shard.read_bytes()).hexdigest() in html
    assert "Every key is in exactly one shard" in html


def test_a_missing_shard_is_a_report_problem(saved, tmp_path):
    copy = tmp_path / "st-missing"
    shutil.copytree(saved / "st", copy)
    gone = sorted(copy.glob("model-*.safetensors"))[1]
    gone.unlink()
    before = tree_digests(copy)
    code, out = _report(tmp_path, str(copy))
    assert code == 1  # safe code, a failed check
    doc = _json(out)
    (entry,) = doc["files"]
    message = f"{gone.name}: named by the index but not in {copy}"
    assert entry["shards"]["problems"] == [
        {"code": "missing-shard", "message": message, "fatal": True}]
    assert f"{copy.name}: shard coverage: missing-shard: {message}" in doc["problems"]
    assert entry["load"]["status"] == "failed" and entry["tensors"] is None
    assert gone.name not in [s["file"] for s in entry["shards"]["files"]]
    assert doc["status"] == "failed"
    code, out = _report(tmp_path, str(copy), name="report.html")
    assert code == 1
    assert "missing-shard" in out.read_text()
    assert tree_digests(copy) == before


def test_a_wrong_total_size_is_shown_but_fails_nothing(saved, tmp_path):
    copy = tmp_path / "st-size"
    shutil.copytree(saved / "st", copy)
    doc = json.loads((copy / INDEX).read_text())
    doc["metadata"]["total_size"] += 4
    (copy / INDEX).write_text(json.dumps(doc))
    code, out = _report(tmp_path, str(copy))
    assert code == 0  # as `inspect`: only bookkeeping
    report = _json(out)
    assert [p["code"] for p in report["files"][0]["shards"]["problems"]] == ["total-size"]
    assert report["problems"] == []


def test_a_malicious_shard_makes_one_dangerous_entry(saved, tmp_path, canary):
    copy = tmp_path / "bin-hostile"
    shutil.copytree(saved / "bin", copy)
    hostile = sorted(copy.glob("pytorch_model-*.bin"))[1]
    hostile.write_bytes(call("os", "system", touch_cmd(canary)))
    before = tree_digests(copy)
    code, out = _report(tmp_path, str(copy))
    assert code == 2
    doc = _json(out)
    (entry,) = doc["files"]
    assert entry["verdict"] == doc["verdict"] == "dangerous"
    assert entry["load"]["status"] == "refused"
    assert entry["load"]["error"].startswith(f"{hostile.name}: not loaded")
    assert "os.system" in {f"{g['module']}.{g['name']}" for g in entry["scan"]["globals"]}
    assert all(s["tensors"] is None and s["sha256"] is None
               for s in entry["shards"]["files"])
    assert tree_digests(copy) == before
    assert not canary.exists()


def test_a_folder_of_unrelated_checkpoints_keeps_one_entry_per_file(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    factories.save_state_dict(folder / "a.pt")
    factories.save_state_dict(folder / "b.pt")
    code, out = _report(tmp_path, str(folder))
    assert code == 0
    doc = _json(out)
    assert sorted(f["file"]["name"] for f in doc["files"]) == ["a.pt", "b.pt"]
    assert all(f["shards"] is None and f["file"]["sha256"] for f in doc["files"])


def test_unique_storage_counts_the_bytes_tensors_reach_once():
    import torch

    from inspector.tensors.records import unique_storage

    # one storage with a 16-byte "header" no tensor reaches, as a safetensors mapping has
    mapping = torch.zeros(4 + 10 + 6, dtype=torch.float32)
    a, b = mapping[4:14], mapping[14:20].view(2, 3)
    tied = mapping[4:14].view(2, 5)  # the same bytes as `a` under another name
    own = torch.ones(3, dtype=torch.float16)
    result = unique_storage([("a", a), ("b", b), ("tied", tied), ("own", own)])
    assert result == {"storages": 2, "numel": 10 + 6 + 3, "nbytes": 4 * 16 + 2 * 3}


def test_a_manifest_checks_each_shard_and_consistency_is_left_unchecked(saved, tmp_path):
    copy = tmp_path / "st"
    shutil.copytree(saved / "st", copy)
    shards = sorted(copy.glob("model-*.safetensors"))
    sums = tmp_path / "SHA256SUMS"
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  st/{p.name}" for p in shards]
    sums.write_text("\n".join(lines) + "\n")
    code, out = _report(tmp_path, str(copy), "--manifest", str(sums), "--consistency",
                        "--device", "cpu")
    assert code == 0
    (entry,) = _json(out)["files"]
    # the shard files only: config.json and the index are no `extra` rows
    assert entry["verification"]["counts"] == {"ok": len(shards)}
    checks = {c["id"]: c for c in entry["checklist"]}
    assert checks["hash_on_record"]["status"] == "pass"
    # the probe reads one file: not run on a folder, and not counted as a failure
    assert entry["consistency"] is None and checks["deterministic"]["status"] == "not_checked"
    lines[1] = "0" * 64 + lines[1][64:]
    sums.write_text("\n".join(lines) + "\n")
    code, out = _report(tmp_path, str(copy), "--manifest", str(sums), name="tampered.json")
    assert code == 1
    (entry,) = _json(out)["files"]
    assert entry["verification"]["status"] == "fail"
    assert {c["id"]: c["status"] for c in entry["checklist"]}["hash_on_record"] == "fail"
