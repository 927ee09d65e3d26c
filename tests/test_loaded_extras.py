"""A file a loader reads is never a harmless extra, nor left out of a record for its name.

- a DCP folder at any depth has its `.metadata` (a hidden name: the map from each tensor to its
  bytes) in `manifest create`; an unlisted one fails `verify`, and `--strict` sees every hidden
  file; a report whose own hash item fails is no pass;
- an unlisted file whose bytes are a checkpoint (never judged by its name) fails without
  --strict, against a manifest and against a signature: transformers loads an added
  `model.safetensors` before the listed `pytorch_model.bin`;
- a batch's results file carries every verdict the plain verify gives: an index's unlisted
  shard, and a shard that checked nothing (its completion line), which merge also re-derives.
Each hostile folder is shown to do its harm under the real loader first.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import factories
import pytest
import torch
from safetensors.torch import save_file
from signing_keys import write_key

from inspector.cli import main
from inspector.fleet.jobs import END_KIND, Job, open_results
from inspector.integrity.manifest import read_manifest
from inspector.integrity.verify import FileCheck, VerifyResult, verify
from inspector.integrity.verify_batch import VERIFY_KIND
from inspector.report import FileEvidence, SessionEvidence, build_report
from inspector.run import journal
from inspector.scan.engine import scan_file


def _dcp_load(folder: Path) -> dict[str, list[float]]:
    import torch.distributed.checkpoint as dcp

    state = {"w": torch.empty(4), "b": torch.empty(4)}
    dcp.load(state, checkpoint_id=str(folder))
    return {k: v.tolist() for k, v in state.items()}


def _swap_dcp_items(folder: Path) -> None:
    """Point `w` at `b`'s bytes and `b` at `w`'s in the folder's `.metadata`."""
    path = folder / ".metadata"
    meta = pickle.loads(path.read_bytes())  # a file this test wrote with dcp.save
    (kw, vw), (kb, vb) = sorted(meta.storage_data.items(), key=lambda kv: kv[0].fqn != "w")
    meta.storage_data[kw], meta.storage_data[kb] = vb, vw
    path.write_bytes(pickle.dumps(meta))


@pytest.fixture
def nested_dcp(tmp_path: Path) -> Path:
    """root/step_2: a dcp.save folder one level down."""
    root = tmp_path / "root"
    factories.dcp_save({"w": torch.arange(4.0), "b": torch.full((4,), 7.0)}, root / "step_2")
    return root


def test_a_nested_dcp_metadata_is_recorded_and_an_edit_of_it_fails(nested_dcp, capsys):
    sums = nested_dcp / "SHA256SUMS"
    assert main(["manifest", "create", str(nested_dcp), "-o", str(sums)]) == 0
    listed = [line.split("  ", 1)[1] for line in sums.read_text().splitlines()]
    assert "step_2/.metadata" in listed
    _swap_dcp_items(nested_dcp / "step_2")
    # the harm, under the real loader: the edited map gives each tensor the other's bytes
    assert _dcp_load(nested_dcp / "step_2") == {"w": [7.0] * 4, "b": [0.0, 1.0, 2.0, 3.0]}
    capsys.readouterr()
    assert main(["verify", "-m", str(sums), str(nested_dcp)]) == 1
    assert "mismatch" in capsys.readouterr().out


def test_an_unlisted_dcp_metadata_fails_even_without_strict(nested_dcp):
    # a manifest that lists the data file only, as `manifest create` wrote it before
    data = next((nested_dcp / "step_2").glob("*.distcp"))
    sums = nested_dcp / "SHA256SUMS"
    assert main(["manifest", "create", str(data), "-o", str(sums)]) == 0
    _swap_dcp_items(nested_dcp / "step_2")
    assert _dcp_load(nested_dcp / "step_2")["w"] == [7.0] * 4
    result = verify(read_manifest(sums), [nested_dcp])
    assert not result.ok
    assert {Path(f.path).name: f.status for f in result.files} == {
        ".metadata": "unchecked", data.name: "ok"}


def test_strict_sees_hidden_files_and_plain_verify_leaves_them(tmp_path: Path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 64)
    sums = tmp_path / "SHA256SUMS"
    assert main(["manifest", "create", str(folder), "-o", str(sums)]) == 0
    (folder / ".notes").write_text("an editor's file")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # Git's own: never seen
    manifest = read_manifest(sums)
    assert verify(manifest, [folder]).ok
    strict = verify(manifest, [folder], strict=True)
    assert not strict.ok
    assert [(Path(f.path).name, f.status) for f in strict.failed_files] == [(".notes", "extra")]


def _extra_evidence(path: Path, manifest: Path, scanned: bool) -> FileEvidence:
    """A file whose verify row is an extra (the manifest does not list it)."""
    verified = VerifyResult(files=[FileCheck(path=str(path), status="extra")])
    return FileEvidence(str(path), scan=scan_file(path).to_json() if scanned else None,
                        verify={"manifest": str(manifest), **verified.to_json()},
                        manifest=str(manifest))


def test_a_report_whose_hash_item_fails_is_no_pass(tmp_path: Path):
    # a checkpoint the report scanned whose own row is an extra: the checklist fails it, and
    # so must the report, though `sha256sum -c` tolerates extras
    path = tmp_path / "model.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00v\x00" + b"{'descr': '<f4', 'fortran_order': False, "
                     b"'shape': (2,), }".ljust(117) + b"\n" + b"\x00" * 8)
    manifest = tmp_path / "SHA256SUMS"
    report = build_report(SessionEvidence([_extra_evidence(path, manifest, True)],
                                          environment=None, command="test"))
    (item,) = [c for c in report.files[0].checklist if c.id == "hash_on_record"]
    assert item.status == "fail"
    assert report.status == "failed"
    assert any(p.startswith("model.npy: SHA-256 on record") for p in report.problems)
    # the twin: a batch verify's extra (a README), which the report holds only the
    # verification of, is judged as `verify` judged it: tolerated
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    report = build_report(SessionEvidence([_extra_evidence(readme, manifest, False)],
                                          environment=None, command="test"))
    assert report.status == "passed"


def _bert_folder(root: Path) -> dict[str, torch.Tensor]:
    """A tiny BERT saved as pytorch_model.bin with its config; its state dict."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1,
                                  num_attention_heads=1, intermediate_size=8,
                                  max_position_embeddings=8)
    torch.manual_seed(0)
    state = {k: v.contiguous().clone()
             for k, v in transformers.BertModel(cfg).state_dict().items()}
    root.mkdir()
    cfg.save_pretrained(root)
    torch.save(state, root / "pytorch_model.bin")
    return state


def _add_unlisted_weights(root: Path, state: dict[str, torch.Tensor]) -> None:
    """An unlisted model.safetensors of other weights, shown to be what transformers loads."""
    from transformers import BertModel

    save_file({k: torch.full_like(v, 0.5) if v.is_floating_point() else v
               for k, v in state.items()}, str(root / "model.safetensors"))
    loaded = BertModel.from_pretrained(str(root)).embeddings.word_embeddings.weight
    assert torch.all(loaded == 0.5)  # the harm: the unlisted file is the one loaded


def test_an_unlisted_checkpoint_fails_without_strict_a_readme_does_not(tmp_path, capsys):
    root = tmp_path / "model"
    state = _bert_folder(root)
    sums = tmp_path / "SHA256SUMS"
    assert main(["manifest", "create", str(root), "-o", str(sums)]) == 0
    (root / "README.md").write_text("# notes\n")
    # a name is no format: a text file named like weights stays a tolerated extra
    (root / "extra.safetensors").write_text("not a checkpoint at all\n")
    capsys.readouterr()
    assert main(["verify", "-m", str(sums), str(root)]) == 0
    _add_unlisted_weights(root, state)
    # bytes are: a torch save under a name no loader uses is no harmless extra either
    torch.save({"x": torch.ones(2)}, root / "notes.dat")
    capsys.readouterr()
    assert main(["verify", "-m", str(sums), str(root), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    statuses = {Path(f["path"]).name: f["status"] for f in doc["files"]}
    assert statuses == {"config.json": "ok", "pytorch_model.bin": "ok", "README.md": "extra",
                        "extra.safetensors": "extra", "model.safetensors": "unchecked",
                        "notes.dat": "unchecked"}


def test_an_unsigned_checkpoint_in_a_signed_folder_fails_the_signature(tmp_path, capsys):
    root = tmp_path / "model"
    state = _bert_folder(root)
    pem, pub = write_key(tmp_path, "alice")
    assert main(["sign", str(root), "--private-key", str(pem), "-q"]) == 0
    (root / "README.md").write_text("# notes\n")
    capsys.readouterr()
    assert main(["verify", str(root), "--public-key", str(pub)]) == 0
    _add_unlisted_weights(root, state)
    capsys.readouterr()
    assert main(["verify", str(root), "--public-key", str(pub), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "changed"
    assert "model.safetensors" in doc["signature"]["reason"]
    assert {Path(f["path"]).name: f["status"] for f in doc["files"]}["model.safetensors"] \
        == "unchecked"


def _sharded(root: Path) -> tuple[Path, Path]:
    """A two-shard safetensors set whose manifest lists the index and shard 1 only."""
    folder = root / "m"
    folder.mkdir(parents=True)
    save_file({"a": torch.ones(4)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.full((4,), 9.0)}, str(folder / "model-00002-of-00002.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 32},
        "weight_map": {"a": "model-00001-of-00002.safetensors",
                       "b": "model-00002-of-00002.safetensors"}}))
    sums = root / "SHA256SUMS"
    assert main(["manifest", "create", str(folder / "model.safetensors.index.json"),
                 str(folder / "model-00001-of-00002.safetensors"), "-o", str(sums)]) == 0
    return folder, sums


def _kept(results: Path) -> dict[str, dict]:
    """Each verify result a results file keeps, by file name."""
    return {Path(e.record["key"]).name: e.record["result"]
            for e in journal.read(results).sound if e.kind == VERIFY_KIND}


def test_a_batch_keeps_an_index_shard_the_manifest_leaves_out_as_unchecked(tmp_path, capsys):
    folder, sums = _sharded(tmp_path)
    assert main(["verify", "-m", str(sums), str(folder)]) == 3
    results = tmp_path / "r.jsonl"
    assert main(["verify", "-m", str(sums), str(folder), "--shard", "0/1",
                 "--results", str(results)]) == 3
    kept = _kept(results)["model-00002-of-00002.safetensors"]
    assert [f["status"] for f in kept["files"]] == ["unchecked"] and kept["ok"] is False
    capsys.readouterr()
    assert main(["merge", str(results), "-o", str(tmp_path / "merged.json")]) == 1
    assert capsys.readouterr().out.startswith("PROBLEM")


def _wrong_folder(root: Path) -> tuple[Path, Path]:
    """A manifest of root/release and a folder beside it holding none of its files."""
    good, wrong = root / "release", root / "wrong"
    good.mkdir(parents=True)
    wrong.mkdir()
    (good / "model.bin").write_bytes(b"weights v1" * 100)
    (wrong / "model-other.bin").write_bytes(b"anything at all")
    sums = root / "SHA256SUMS"
    assert main(["manifest", "create", str(good), "-o", str(sums)]) == 0
    return wrong, sums


def test_a_batch_that_checked_nothing_says_so_in_its_results_and_merge_fails(tmp_path,
                                                                             capsys):
    wrong, sums = _wrong_folder(tmp_path)
    results = tmp_path / "r.jsonl"
    assert main(["verify", "-m", str(sums), str(wrong), "--shard", "0/1",
                 "--results", str(results)]) == 3
    (end,) = [e.record for e in journal.read(results).sound if e.kind == END_KIND]
    assert end["errors"] and "nothing was checked" in end["errors"][0]
    capsys.readouterr()
    assert main(["merge", str(results), "-o", str(tmp_path / "merged.json")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("PROBLEM") and "nothing was checked" in out


def test_merge_rederives_a_shard_that_compared_nothing(tmp_path, capsys):
    # a results file whose completion line names no error (an earlier writer, or one that
    # left it out): its results alone show that no file was compared
    wrong, sums = _wrong_folder(tmp_path)
    extra = wrong / "model-other.bin"
    log = open_results(tmp_path / "r.jsonl", Job(VERIFY_KIND, f"ckpt-inspector verify {wrong}"))
    log.begin({"command": log.job.command, "shard": "0/1", "environment": None})
    part = VerifyResult(files=[FileCheck(path=str(extra), status="extra", actual_size=15)])
    log.record(str(extra), extra, {"manifest": str(sums), "dialect": "sha256sum",
                                   **part.to_json()})
    log.end()
    capsys.readouterr()
    assert main(["merge", str(log.path), "-o", str(tmp_path / "merged.json")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("PROBLEM") and "compare no file with the manifest" in out
    # the clean twin: the right folder's results merge SAFE
    shutil.rmtree(wrong)
    good = tmp_path / "r_good.jsonl"
    assert main(["verify", "-m", str(sums), str(tmp_path / "release"), "--shard", "0/1",
                 "--results", str(good)]) == 0
    capsys.readouterr()
    assert main(["merge", str(good), "-o", str(tmp_path / "good.json")]) == 0


def test_a_checkpoint_in_a_folder_the_manifest_lists_nothing_from_is_a_plain_extra(
        tmp_path, monkeypatch, capsys) -> None:
    """A loader picks among the files of a model's folder: an unlisted checkpoint beside a
    listed one fails, while one in a folder the manifest lists nothing from (the working
    folder holding the manifest, another run's file) is another model: reported, tolerated."""
    (tmp_path / "models").mkdir()
    torch.save({"w": torch.ones(2)}, tmp_path / "models" / "step-100.pt")
    monkeypatch.chdir(tmp_path)
    assert main(["manifest", "create", "models/", "-o", "SHA256SUMS"]) == 0
    torch.save({"w": torch.zeros(2)}, tmp_path / "other.pt")
    capsys.readouterr()
    assert main(["verify", "-m", "SHA256SUMS"]) == 0
    out = capsys.readouterr().out
    assert "NOT IN MANIFEST" in out and "other.pt" in out and "UNCHECKED" not in out
    torch.save({"w": torch.zeros(2)}, tmp_path / "models" / "step-200.pt")
    assert main(["verify", "-m", "SHA256SUMS"]) == 3
    out = capsys.readouterr().out
    assert "UNCHECKED" in out and "step-200.pt" in out
