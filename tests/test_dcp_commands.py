"""A torch.distributed.checkpoint folder as one input to `diff`, `manifest`, `verify`, `report`.

Folders are written by the real `dcp.save` (`factories.dcp_save`) or laid out chunk by chunk
as FileSystemWriter lays them out (`factories.dcp_write_chunks`). Every folder is hashed
before and after: no command writes into it.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import factories
import pytest
import torch

from inspector.cli import main
from inspector.layout.torch_save import describe_archive
from inspector.report import FileEvidence, SessionEvidence, build_report
from inspector.sandbox.host.client import static_scan

CHUNKS = {"rows": [((0, 0), (4, 5)), ((4, 0), (2, 5))]}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A real dcp.save folder of a nested state dict of several dtypes and plain values."""
    return factories.dcp_save(factories.dcp_state(), tmp_path / "ckpt")


def _run_json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def _item_data(folder: Path, fqn: str) -> tuple[str, int]:
    """The data file and file offset where the first chunk of `fqn` keeps its bytes."""
    metadata = pickle.loads((folder / ".metadata").read_bytes())  # a file this test wrote
    info = next(v for k, v in metadata.storage_data.items() if k.fqn == fqn)
    data = (folder / info.relative_path).read_bytes()
    (layout,) = describe_archive(data, info.offset, info.offset + info.length)
    return info.relative_path, layout.data_offset


def test_diff_of_a_folder_and_its_consolidation_is_identical(folder, tmp_path, capsys):
    before = factories.tree_digests(folder)
    out = tmp_path / "model.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    capsys.readouterr()
    code, result = _run_json(capsys, ["diff", str(folder), str(out), "--json"])
    assert code == 0 and result["identical"], result["summary"]
    assert result["a"]["format"] == "dcp" and result["b"]["format"] == "safetensors"
    keys = {"model.embed.weight", "model.head.weight", "model.norm.bias",
            "model.block.scale", "model.block.mask", "model.positions", "temperature"}
    assert {r["key"] for r in result["tensors"]} == keys
    assert {r["status"] for r in result["tensors"]} == {"identical"}
    code, result = _run_json(capsys, ["diff", str(folder), str(folder), "--json"])
    assert code == 0 and result["identical"] and len(result["tensors"]) == len(keys)
    assert factories.tree_digests(folder) == before


def test_a_flipped_bit_in_a_data_file_is_named_and_placed(folder, tmp_path, capsys):
    flipped = tmp_path / "flipped"
    shutil.copytree(folder, flipped)
    name, start = _item_data(flipped, "model.embed.weight")
    element, bit = 37, 30  # float32: bit 30 is the exponent's top bit
    data = bytearray((flipped / name).read_bytes())
    data[start + element * 4 + bit // 8] ^= 1 << (bit % 8)
    (flipped / name).write_bytes(bytes(data))
    code, result = _run_json(capsys, ["diff", str(folder), str(flipped), "--json"])
    assert code == 1 and not result["identical"]
    changed = [r for r in result["tensors"] if r["status"] != "identical"]
    assert [r["key"] for r in changed] == ["model.embed.weight"]
    (record,) = changed
    assert record["single_bit_flips"] == 1 and record["changed_elements"] == 1
    (flip,) = record["bitflips"]
    assert (flip["index"], flip["bit"], flip["kind"]) == (element, bit, "exponent")
    assert flip["position"] == [element // 8, element % 8]
    byte = start + element * 4 + bit // 8  # the byte flipped above, in the data file
    assert (flip["file_a"], flip["file_offset_a"]) == (name, byte)
    assert (flip["file_b"], flip["file_offset_b"]) == (name, byte)
    assert main(["diff", str(folder), str(flipped)]) == 1
    assert "model.embed.weight" in capsys.readouterr().out


def test_diff_of_two_chunked_folders_reassembles_both(tmp_path, capsys):
    full = {"rows": torch.arange(30, dtype=torch.float32).reshape(6, 5)}
    factories.dcp_write_chunks(tmp_path / "a", full, CHUNKS)
    other = {"rows": full["rows"].clone()}
    other["rows"][5, 4] = -1.0  # in the second rank's chunk
    factories.dcp_write_chunks(tmp_path / "b", other, CHUNKS)
    code, result = _run_json(capsys, ["diff", str(tmp_path / "a"), str(tmp_path / "b"),
                                      "--json"])
    assert code == 1
    (record,) = result["tensors"]
    assert record["key"] == "rows" and record["changed_elements"] == 1
    assert record["max_abs_diff"] == 30.0


def test_manifest_lists_metadata_and_every_data_file_and_verify_checks_them(
        folder, tmp_path, capsys):
    factories.dcp_write_chunks(tmp_path / "two", {"rows": torch.ones(6, 5)}, CHUNKS)
    for target in (folder, tmp_path / "two"):
        manifest = tmp_path / f"{target.name}.sha256"
        assert main(["manifest", "create", str(target), "-o", str(manifest)]) == 0
        listed = sorted(line.split("  ", 1)[1] for line in manifest.read_text().splitlines())
        expected = sorted(f"{target.name}/{p.name}" for p in target.iterdir())
        assert listed == expected and f"{target.name}/.metadata" in listed
        capsys.readouterr()
        assert main(["verify", "-m", str(manifest), str(target)]) == 0
    assert len(list((tmp_path / "two").glob("__*_0.distcp"))) == 2
    assert main(["manifest", "create", str(folder), "-o", str(tmp_path / "m.json")]) == 0
    formats = {Path(f["path"]).name: f["format"]
               for f in json.loads((tmp_path / "m.json").read_text())["files"]}
    assert formats == {".metadata": "pickle", "__0_0.distcp": "distcp"}
    data = tmp_path / "two" / "__1_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["verify", "-m", str(tmp_path / "two.sha256"), str(tmp_path / "two"),
                 "--json"]) == 1
    rows = {Path(r["path"]).name: r["status"] for r in json.loads(capsys.readouterr().out)[
        "files"]}
    assert rows["__1_0.distcp"] != "ok"
    assert rows["__0_0.distcp"] == "ok" and rows[".metadata"] == "ok"


def test_report_gives_one_entry_for_the_folder_with_its_statistics(folder, tmp_path, capsys):
    manifest = tmp_path / "m.sha256"
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    out = tmp_path / "report.json"
    code = main(["report", str(folder), "-o", str(out), "--manifest", str(manifest), "-q"])
    assert code == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    (entry,) = doc["files"]
    assert entry["file"]["format"] == "dcp" and entry["file"]["sha256"] is None
    assert entry["file"]["size"] == sum(p.stat().st_size for p in folder.iterdir())
    assert entry["tensors"]["count"] == 7
    checks = {c["id"]: c["status"] for c in entry["checklist"]}
    assert checks["hash_on_record"] == "pass"
    # torch.load would refuse .metadata; the row says what the worker did instead
    weights_only = next(c for c in entry["checklist"] if c["id"] == "weights_only")
    assert weights_only["status"] == "pass", weights_only
    assert "under the DCP allow-list" in weights_only["detail"]
    assert "torch.distributed.checkpoint.filesystem._StorageInfo" in weights_only["detail"]
    json.dumps(doc, allow_nan=False)


def _weights_only_row(folder: Path, inspect: dict | None, scan: dict) -> dict:
    evidence = FileEvidence(str(folder), scan=scan, inspect=inspect)
    (entry,) = build_report(SessionEvidence([evidence])).to_json()["files"]
    return next(c for c in entry["checklist"] if c["id"] == "weights_only")


def test_report_row_of_a_dcp_folder_the_worker_did_not_load(folder):
    scan = static_scan(folder).to_json()
    failed = {"path": str(folder), "format": "dcp", "scan": scan, "tensors": [],
              "objects": [], "error": {"code": "load_failed", "message": "chunks overlap"}}
    row = _weights_only_row(folder, failed, scan)
    assert (row["status"], row["detail"]) == ("fail", "the jailed load failed: chunks overlap")
    row = _weights_only_row(folder, None, scan)
    assert row["status"] == "not_checked" and "it was not loaded" in row["detail"]
    hostile = {**scan, "verdict": "dangerous", "globals": [
        *scan["globals"], {"module": "os", "name": "system", "count": 1, "severity": "dangerous",
                           "reason": "runs programs"}]}
    row = _weights_only_row(folder, None, hostile)
    assert (row["status"], row["detail"]) == (
        "fail", "the DCP allow-list refuses its .metadata: os.system")


def test_report_of_a_folder_holding_a_dcp_folder_keeps_it_whole(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    factories.dcp_save(factories.dcp_state(), runs / "step-100")
    torch.save({"w": torch.ones(3)}, runs / "final.pt")
    (runs / "notes.txt").write_text("not a checkpoint")
    out = tmp_path / "report.json"
    assert main(["report", str(runs), "-o", str(out), "-q"]) == 0, capsys.readouterr()
    entries = {Path(e["file"]["path"]).name: e["file"]["format"]
               for e in json.loads(out.read_text())["files"]}
    assert entries == {"step-100": "dcp", "final.pt": "pytorch-zip"}

