"""Tensor-level verify and diff end to end, through the jailed worker and the real CLI.

One random bit is flipped in the tensor data region of a real `.pt` archive and of a real
`.safetensors` file with a JSON manifest on record: verify must report the file mismatch and
exactly one mismatched tensor, and diff must name the tensor, element, bit and kind. These
start real workers (each pays torch's import), so they flip a handful of bits; the 1,000-flip
loop runs in-process in `test_diff_bitflips.py` through the same diff engine.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import zipfile
from pathlib import Path

import factories
import pytest
import torch
from safetensors.torch import save_file

from inspector.checkpoint.bitflip import layout_for
from inspector.cli import main
from inspector.integrity.manifest import read_manifest, relative_path, write_manifest
from inspector.integrity.verify import plan, tensor_targets, verify, verify_tensors_only
from inspector.sandbox.host.client import convert_file, diff_files, tensor_digests

# tied weights share one storage: a flip there changes two keys, so flips avoid them
TIED = ("embed.weight", "lm_head.weight")


def _state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    state = {
        "layer1.weight": torch.randn(32, 16, generator=g),
        "layer1.bias": torch.randn(32, generator=g),
        "embed.weight": torch.randn(50, 8, generator=g).to(torch.bfloat16),
        "norm.weight": torch.randn(16, generator=g).to(torch.float16),
        "head.weight": torch.randn(4, 16, generator=g, dtype=torch.float64),
        "step_counts": torch.randint(0, 1000, (10,), generator=g),
    }
    state["lm_head.weight"] = state["embed.weight"]
    return state


def _untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy without shared storage, as `safetensors.torch.save_file` requires."""
    return {k: v.clone() for k, v in state.items()}


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _pt_regions(path: Path, state: dict[str, torch.Tensor]) -> dict[str, tuple[int, int]]:
    """Key -> (file offset, length) of each tensor's record in a torch zip archive."""
    by_bytes = {_raw(t): key for key, t in state.items() if key != TIED[1]}
    regions = {}
    data = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if "/data/" not in info.filename or info.compress_type != zipfile.ZIP_STORED:
                continue
            name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
            start = info.header_offset + 30 + name_len + extra_len
            record = data[start : start + info.file_size]
            regions[by_bytes[record]] = (start, info.file_size)
    assert set(regions) == set(state) - {TIED[1]}
    return regions


def _safetensors_regions(path: Path) -> dict[str, tuple[int, int]]:
    data = path.read_bytes()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    return {
        k: (8 + n + e["data_offsets"][0], e["data_offsets"][1] - e["data_offsets"][0])
        for k, e in header.items()
    }


def _flip_random_bit(path: Path, regions: dict, state: dict, rng: random.Random) -> tuple:
    """Flip one bit inside one tensor's bytes; return (key, element index, bit, kind)."""
    key = rng.choice(sorted(k for k in regions if k not in TIED))
    start, length = regions[key]
    offset = rng.randrange(length)
    bit_in_byte = rng.randrange(8)
    data = bytearray(path.read_bytes())
    data[start + offset] ^= 1 << bit_in_byte
    path.write_bytes(bytes(data))
    itemsize = state[key].element_size()
    bit = (offset % itemsize) * 8 + bit_in_byte
    return key, offset // itemsize, bit, layout_for(state[key].dtype).describe(bit)[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """A .pt, its real conversion to safetensors, and a JSON manifest (tensor digests) of both."""
    folder = tmp_path_factory.mktemp("recorded")
    state = _state_dict()
    torch.save(state, folder / "model.pt")
    report = convert_file(folder / "model.pt", folder / "model.safetensors")
    assert report["verified"]
    manifest = folder / "manifest.json"
    assert main(["manifest", "create", str(folder), "-o", str(manifest)]) == 0
    # the .pt's own manifest, as `manifest create model.pt` writes it, without another worker
    pt_only = tmp_path_factory.mktemp("pt-manifest") / "model.pt.json"
    (entry,) = [f for f in read_manifest(manifest).files if f.path == "model.pt"]
    entry.path = relative_path(folder / "model.pt", pt_only.parent)
    write_manifest(pt_only, [entry])
    return {"folder": folder, "state": state, "manifest": manifest, "pt_manifest": pt_only}


def _copy(recorded: dict, tmp_path: Path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(recorded["folder"], folder)
    return folder


def test_json_manifest_records_every_tensor_of_both_formats(recorded: dict) -> None:
    manifest = read_manifest(recorded["manifest"])
    assert manifest.dialect == "json"
    by_path = {f.path: f for f in manifest.files}
    assert by_path["model.pt"].format == "pytorch-zip"
    assert by_path["model.safetensors"].format == "safetensors"
    for entry in by_path.values():
        assert {t.key for t in entry.tensors} == set(recorded["state"])
        assert {t.digest_algorithm for t in entry.tensors} == {"sha256"}
    pt = {t.key: t for t in by_path["model.pt"].tensors}
    st = {t.key: t for t in by_path["model.safetensors"].tensors}
    assert all(pt[k].digest == st[k].digest and pt[k].shape == st[k].shape for k in pt)
    assert pt["embed.weight"].dtype == "bfloat16" and pt["embed.weight"].shape == (50, 8)


def test_untouched_copy_verifies_file_and_tensors(recorded: dict, tmp_path: Path, capsys) -> None:
    folder = _copy(recorded, tmp_path)
    assert main(["verify", "-m", str(folder / "manifest.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["status"] for f in doc["files"]] == ["ok", "ok"]
    assert len(doc["tensors"]) == 2 * len(recorded["state"])
    assert {t["status"] for t in doc["tensors"]} == {"ok"}


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors"])
def test_one_flipped_bit_is_found_by_verify_and_localised_by_diff(
    recorded: dict, tmp_path: Path, name: str
) -> None:
    folder = _copy(recorded, tmp_path)
    target = folder / name
    state = recorded["state"]
    regions = _pt_regions(target, state) if name.endswith(".pt") else _safetensors_regions(target)
    key, index, bit, kind = _flip_random_bit(target, regions, state, random.Random(name))

    result = verify(
        read_manifest(folder / "manifest.json"), [target], tensor_digests=tensor_digests
    )
    assert [(f.path, f.status) for f in result.files] == [(name, "mismatch")]
    bad = [t for t in result.tensors if t.status != "ok"]
    assert [(t.key, t.status) for t in bad] == [(key, "mismatch")]
    assert len(result.tensors) == len(state)

    diff = diff_files(recorded["folder"] / name, target)
    assert diff["identical"] is False
    changed = [t for t in diff["tensors"] if t["status"] != "identical"]
    assert [t["key"] for t in changed] == [key]
    (record,) = changed
    assert record["changed_elements"] == 1 and record["single_bit_flips"] == 1
    (flip,) = record["bitflips"]
    assert (flip["index"], flip["bit"], flip["kind"]) == (index, bit, kind)
    assert record["summary"].startswith(f"1 single-bit flip in `{key}`")


def test_safetensors_conversion_verifies_tensor_for_tensor_against_pt_manifest(
    recorded: dict, tmp_path: Path, capsys
) -> None:
    converted = recorded["folder"] / "model.safetensors"
    # the converter kept one name for the tied storage and recorded the other as an alias
    assert TIED[1] not in _safetensors_regions(converted)
    argv = ["verify", str(converted), "-m", str(recorded["pt_manifest"]), "--tensors-only"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["files"] == []
    assert sorted(t["key"] for t in doc["tensors"]) == sorted(recorded["state"])
    assert {t["status"] for t in doc["tensors"]} == {"ok"}

    state = _untied(recorded["state"])
    state["norm.weight"] = state["norm.weight"].float()
    state["layer1.bias"][3] += 1
    del state["head.weight"]
    state["extra"] = torch.ones(2)
    save_file(state, tmp_path / "edited.safetensors")
    result = verify_tensors_only(
        read_manifest(recorded["pt_manifest"]), [tmp_path / "edited.safetensors"], tensor_digests
    )
    statuses = {t.key: t.status for t in result.tensors if t.status != "ok"}
    assert statuses == {
        "norm.weight": "dtype_or_shape_changed",
        "layer1.bias": "mismatch",
        "head.weight": "missing",
        "extra": "extra",
    }


def test_diff_cli_human_output_and_exit_codes(recorded: dict, tmp_path: Path, capsys) -> None:
    pt, st = recorded["folder"] / "model.pt", recorded["folder"] / "model.safetensors"
    assert main(["diff", str(pt), str(st)]) == 0
    assert "IDENTICAL: 7 tensors (7 identical)" in capsys.readouterr().out
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(st.read_bytes()[:200])
    assert main(["diff", str(pt), str(broken)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ckpt-inspector diff: ") and "\n" not in err

    flipped = tmp_path / "flipped.safetensors"
    shutil.copyfile(st, flipped)
    start, _length = _safetensors_regions(flipped)["layer1.weight"]
    data = bytearray(flipped.read_bytes())
    data[start + 4 * 37 + 3] ^= 0x40  # element 37, bit 30: the exponent's top bit
    flipped.write_bytes(bytes(data))
    assert main(["diff", str(st), str(flipped), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["identical"] is False and doc["counts"] == {"identical": 6, "changed": 1}
    (changed,) = [t for t in doc["tensors"] if t["status"] == "changed"]
    assert changed["changed_elements"] == 1 and changed["max_abs_diff"] is not None
    (flip,) = changed["bitflips"]
    # later releases add keys to a flip record (values, offsets); these four are the contract
    assert {k: flip[k] for k in ("index", "bit", "kind", "position")} == {
        "index": 37, "bit": 30, "kind": "exponent", "position": [2, 5],
    }
    assert main(["diff", str(st), str(flipped)]) == 1
    out = capsys.readouterr().out
    assert "1 single-bit flip in `layer1.weight`, in an exponent bit" in out
    assert "[2, 5] (element 37): bit 30, exponent" in out


def test_the_cli_checks_every_key_of_an_index_in_its_shard(tmp_path: Path, capsys) -> None:
    # the shards' headers list their keys here: no worker, and once it compared nothing
    for name, key in (("model-00001-of-00002.safetensors", "a"),
                      ("model-00002-of-00002.safetensors", "b")):
        save_file({key: torch.ones(2)}, tmp_path / name)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                                "b": "model-00002-of-00002.safetensors"}}))
    assert main(["verify", "-m", str(index)]) == 0
    out = capsys.readouterr().out
    assert "only its tensor names compared, not its other bytes" in out and "2 tensors: 2 ok" in out
    save_file({"c": torch.ones(2)}, tmp_path / "model-00002-of-00002.safetensors")
    assert main(["verify", "-m", str(index)]) == 1
    out = capsys.readouterr().out
    assert "tensor MISSING                b (model-00002-of-00002.safetensors)" in out
    assert main(["verify", "-m", str(index), "--no-tensors"]) == 0
    assert "found, its bytes not compared" in capsys.readouterr().out


def test_an_entry_without_a_file_hash_says_what_its_ok_compared(recorded: dict, tmp_path: Path,
                                                                 capsys) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    # the same tensors in another file: a pickle that holds more than the recorded one did
    torch.save({**recorded["state"], "note": "not in the recorded file"}, folder / "model.pt")
    doc = json.loads(recorded["pt_manifest"].read_text())
    for entry in doc["files"]:
        entry.pop("sha256"), entry.pop("size")
        entry["path"] = "model.pt"
    manifest = folder / "tensors-only.json"
    manifest.write_text(json.dumps(doc))
    assert main(["verify", "-m", str(manifest), "--json"]) == 0
    (file,) = json.loads(capsys.readouterr().out)["files"]
    assert file["status"] == "ok"
    assert file["note"] == "no SHA-256 recorded: only its tensors compared, not its other bytes"


def test_a_malicious_replacement_is_never_loaded(
    recorded: dict, tmp_path: Path, canary: Path, capsys
) -> None:
    (tmp_path / "evil").mkdir()
    evil = factories.mal_zip_data_pkl(tmp_path / "evil" / "model.pt", canary)
    folder = _copy(recorded, tmp_path)
    shutil.copyfile(evil, folder / "model.pt")
    assert main(["verify", "-m", str(folder / "manifest.json"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {f["path"]: f["status"] for f in doc["files"]} == {
        "model.pt": "size_mismatch",
        "model.safetensors": "ok",
    }
    argv = ["verify", str(evil), "-m", str(recorded["pt_manifest"]), "--tensors-only", "--json"]
    assert main(argv) == 3
    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert "tensors not checked" in error and "dangerous" in error
    assert main(["diff", str(recorded["folder"] / "model.pt"), str(evil)]) == 2
    assert "dangerous" in capsys.readouterr().err


def test_sharded_index_checks_every_key_in_its_shard(recorded: dict, tmp_path: Path) -> None:
    state = _untied(recorded["state"])
    keys = sorted(state)
    shards = {
        "model-00001-of-00002.safetensors": keys[:3],
        "model-00002-of-00002.safetensors": keys[3:],
    }
    for name, shard_keys in shards.items():
        save_file({k: state[k] for k in shard_keys}, tmp_path / name)
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {k: name for name, shard_keys in shards.items() for k in shard_keys}
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    asked = []

    def no_worker(path: Path, *, cancel=None) -> list:
        asked.append(path)  # an index lists keys only: each shard's header answers it
        return tensor_digests(path, cancel=cancel)

    result = verify(read_manifest(index), tensor_digests=no_worker)
    assert result.ok and len(result.tensors) == len(state) and asked == []
    assert tensor_targets(plan(read_manifest(index), [])) == []

    save_file({k: state[k] for k in keys[:2]}, tmp_path / "model-00001-of-00002.safetensors")
    result = verify(read_manifest(index), tensor_digests=no_worker)
    assert [(t.key, t.status) for t in result.tensors if t.status != "ok"] == [(keys[2], "missing")]
    # a header a loader refuses is no listing: its tensors are not checked, and it fails
    second = tmp_path / "model-00002-of-00002.safetensors"
    second.write_bytes((2**40).to_bytes(8, "little") + b"{}")
    result = verify(read_manifest(index), tensor_digests=no_worker)
    assert not result.ok and asked == []
    assert any("model-00002-of-00002.safetensors: tensors not checked: header length" in e
               for e in result.errors)
