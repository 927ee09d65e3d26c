"""torch.distributed.checkpoint folders: `inspect DIR` and `convert DIR -o X.safetensors`.

Folders are written by the real `dcp.save`: in one process (no process group), and by two
gloo ranks saving DTensors sharded by rows and by columns. Broken chunk layouts are laid out
by hand as `FileSystemWriter` lays them out (the real DCP metadata classes pickled with plain
pickle, each item a `torch.save` archive back to back in a `.distcp` file). Every folder is
hashed before and after: nothing writes into it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import pickletools
import struct
import subprocess
from pathlib import Path

import factories
import pytest
import torch
from safetensors.torch import load_file

from inspector.cli import main
from inspector.sandbox.host.client import SandboxError, convert_file, inspect_file
from inspector.scan.dcp_folder import is_dcp_folder, scan_folder
from inspector.tensors.dcp import read_metadata
from inspector.tensors.load import LoadError


def _flat(state: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _folder_digest(folder: Path) -> dict:
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.iterdir())}


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict]:
    """A real dcp.save folder of a nested state dict of several dtypes and plain values."""
    state = factories.dcp_state()
    return factories.dcp_save(state, tmp_path / "ckpt"), state


def test_folder_is_recognised_and_scanned_as_one_safe_checkpoint(saved):
    folder, _ = saved
    assert is_dcp_folder(folder) and not is_dcp_folder(folder / ".metadata")
    scan = scan_folder(folder).to_json()
    assert scan["format"] == "dcp" and scan["verdict"] == "safe", scan
    assert sorted(Path(f["path"]).name for f in scan["files"]) == [".metadata", "__0_0.distcp"]
    json.dumps(scan, allow_nan=False)


def test_metadata_is_read_by_the_weights_only_unpickler_as_plain_pickle_reads_it(saved):
    # imported here: torch.distributed.checkpoint adds over a second to every collection
    from torch.distributed.checkpoint.metadata import Metadata

    folder, _ = saved
    data = (folder / ".metadata").read_bytes()
    assert data[:2] == b"\x80\x04"  # protocol 4: STACK_GLOBAL, MEMOIZE, FRAME
    ours = read_metadata(str(folder / ".metadata"))
    assert isinstance(ours, Metadata)
    theirs = pickle.loads(data)  # a benign file this test just wrote
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.storage_data == theirs.storage_data
    assert ours.planner_data == theirs.planner_data


def _renamed_path_module(data: bytes, module: bytes) -> bytes:
    """A protocol-4 pickle whose path global names `module` instead of `pathlib` (its
    SHORT_BINUNICODE rewritten, and the FRAME holding it lengthened to match)."""
    old = b"\x8c\x07pathlib\x94\x8c\x09PosixPath"  # MEMOIZE between the strings
    at = data.index(old)
    frame = max(pos for op, _, pos in pickletools.genops(data)
                if op.name == "FRAME" and pos < at)
    (length,) = struct.unpack_from("<Q", data, frame + 1)
    grown = struct.pack("<Q", length + len(module) - len(b"pathlib"))
    new = b"\x8c" + bytes([len(module)]) + module + old[9:]
    return data[:frame + 1] + grown + data[frame + 9:at] + new + data[at + len(old):]


def test_a_path_pickled_by_python_3_13_loads(saved, capsys):
    """Python 3.13 pickles a path as `pathlib._local.PosixPath`, a name 3.11 lacks: the
    metadata reader rebuilds it as the same stand-in `--allow lightning` uses."""
    from torch.distributed.checkpoint.metadata import Metadata

    folder, state = saved
    metadata = folder / ".metadata"
    metadata.write_bytes(_renamed_path_module(metadata.read_bytes(), b"pathlib._local"))
    assert b"pathlib._local" in metadata.read_bytes()
    assert isinstance(read_metadata(str(metadata)), Metadata)
    assert main(["inspect", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None
    assert {t["key"] for t in report["tensors"]} == {k for k, v in _flat(state).items()
                                                      if isinstance(v, torch.Tensor)}


def test_inspect_gives_the_statistics_of_a_torch_save_of_the_same_state(saved, tmp_path, capsys):
    folder, state = saved
    before = _folder_digest(folder)
    single = tmp_path / "single.pt"
    torch.save(state, single)
    ours, ref = inspect_file(folder), inspect_file(single)
    assert ours.error is None and ref.error is None, (ours.error, ref.error)
    assert ours.format == "dcp" and ours.scan.verdict == "safe"
    assert ours.sandbox.level in ("full", "partial")
    layout = {"stride", "storage_offset", "contiguous", "shared_with"}
    mine = {t.key: {k: v for k, v in t.to_json().items() if k not in layout} for t in ours.tensors}
    theirs = {t.key: {k: v for k, v in t.to_json().items() if k not in layout}
              for t in ref.tensors}
    assert set(mine) == set(_flat(state)) - {"step", "name", "lr"}
    assert mine == theirs
    assert sorted(ours.objects, key=str) == sorted(ref.objects, key=str)
    assert ours.health == ref.health
    assert main(["inspect", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {t["key"] for t in report["tensors"]} == set(mine)
    assert _folder_digest(folder) == before


def test_convert_writes_the_tensors_bit_for_bit_and_never_overwrites(saved, tmp_path, capsys):
    folder, state = saved
    before = _folder_digest(folder)
    out = tmp_path / "model.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    # a folder's tensors are read only by the jailed loader, so the CLI does not claim to have
    # checked them; this test checks the bits itself
    said = capsys.readouterr().out
    assert "as reported by the jailed loader" in said and "bit for bit" not in said
    written = load_file(out)
    tensors = {k: v for k, v in _flat(state).items() if isinstance(v, torch.Tensor)}
    assert set(written) == set(tensors)
    for key, t in tensors.items():
        assert written[key].dtype == t.dtype and written[key].shape == t.shape, key
        assert _bits(written[key]) == _bits(t), key
    sidecar = json.loads((tmp_path / "model.sidecar.json").read_text())
    assert sidecar["values"] == {"step": 1234, "name": "run-15", "lr": 0.001}
    output_bytes = out.read_bytes()
    assert main(["convert", str(folder), "-o", str(out)]) == 4
    assert out.read_bytes() == output_bytes
    assert _folder_digest(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "model.safetensors",
                                                          "model.sidecar.json"]


def test_convert_without_output_writes_beside_the_folder(saved):
    folder, _ = saved
    assert main(["convert", str(folder)]) == 0
    assert (folder.parent / "ckpt.safetensors").is_file()
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp"]


def test_convert_key_and_strip_prefix_find_the_saved_nesting(saved, tmp_path):
    folder, state = saved
    out = tmp_path / "weights.safetensors"
    assert main(["convert", str(folder), "--key", "model", "--strip-prefix", "block.",
                 "-o", str(out)]) == 0
    written = load_file(out)
    model = _flat(state["model"])
    assert set(written) == {k.removeprefix("block.") for k in model}
    for key, t in model.items():
        assert _bits(written[key.removeprefix("block.")]) == _bits(t), key


_SHARDED = {
    "rows": [((0, 0), (4, 5)), ((4, 0), (2, 5))],
    "cols": [((0, 0), (3, 2)), ((0, 2), (3, 5))],
}


def _sharded_tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    return {"rows": torch.randn(6, 5, generator=gen),
            "cols": torch.randn(3, 7, generator=gen).to(torch.bfloat16)}


def test_chunks_of_every_rank_are_reassembled_into_full_tensors(tmp_path):
    full = _sharded_tensors()
    folder = tmp_path / "sharded"
    factories.dcp_write_chunks(folder, full, _SHARDED)
    before = _folder_digest(folder)
    report = inspect_file(folder)
    assert report.error is None, report.error
    digests = {t.key: t.digest for t in report.tensors}
    assert digests == {k: hashlib.sha256(_bits(t)).hexdigest() for k, t in full.items()}
    out = tmp_path / "model.safetensors"
    result = convert_file(folder, out)
    assert result["verified"] and result["tensors_written"] == 2
    written = load_file(out)
    for key, t in full.items():
        assert written[key].shape == t.shape and _bits(written[key]) == _bits(t), key
    assert _folder_digest(folder) == before


_TWO_RANKS = """
import os, sys
import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
mesh = init_device_mesh("cpu", (2,))
gen = torch.Generator().manual_seed(3)
full = {"rows": torch.randn(7, 5, generator=gen),
        "cols": torch.randn(3, 9, generator=gen).bfloat16(), "rep": torch.arange(4)}
placements = {"rows": Shard(0), "cols": Shard(1), "rep": Replicate()}
model = {k: distribute_tensor(t, mesh, [placements[k]]) for k, t in full.items()}
dcp.save({"model": model, "step": 3}, checkpoint_id=out)
if rank == 0:
    torch.save(full, out + ".full.pt")
dist.barrier()  # both ranks' files are written and closed before either leaves
# A normal exit tears gloo down while the other rank may already be gone, and that aborted
# one rank now and then ('terminate called without an active exception', SIGABRT).
os._exit(0)
"""


def test_a_real_two_rank_save_is_reassembled(tmp_path, python_exe):
    folder = tmp_path / "two"
    ranks = [subprocess.Popen([python_exe, "-c", _TWO_RANKS, str(rank), str(tmp_path / "store"),
                               str(folder)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for rank in (0, 1)]
    try:
        outputs = [proc.communicate(timeout=120)[0] for proc in ranks]
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in ranks] == [0, 0], outputs
    full = torch.load(f"{folder}.full.pt")
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp",
                                                        "__1_0.distcp"]
    before = _folder_digest(folder)
    report = inspect_file(folder)
    assert report.error is None, report.error
    assert {t.key: t.digest for t in report.tensors} == {
        f"model.{k}": hashlib.sha256(_bits(t)).hexdigest() for k, t in full.items()}
    assert report.objects[0].key == "step" and report.objects[0].repr == "3"
    out = tmp_path / "model.safetensors"
    assert main(["convert", str(folder), "--key", "model", "-o", str(out)]) == 0
    written = load_file(out)
    assert set(written) == set(full)
    for key, t in full.items():
        assert written[key].dtype == t.dtype and _bits(written[key]) == _bits(t), key
    assert _folder_digest(folder) == before


@pytest.mark.parametrize("chunks, why", [
    ({"rows": [((0, 0), (4, 5))]}, "exactly once"),                   # rows 4-5 missing
    ({"rows": [((0, 0), (4, 5)), ((3, 0), (3, 5))]}, "exactly once"),  # row 3 twice
])
def test_a_chunk_layout_that_does_not_cover_the_tensor_is_refused(tmp_path, chunks, why):
    full = _sharded_tensors()
    folder = tmp_path / "bad"
    factories.dcp_write_chunks(folder, full, chunks)
    report = inspect_file(folder)
    assert report.error.code == "load_failed" and why in report.error.message
    assert report.tensors == []


def test_a_data_file_outside_the_folder_is_refused(tmp_path):
    full = _sharded_tensors()
    folder = tmp_path / "escape"
    factories.dcp_write_chunks(folder, full, {"rows": [((0, 0), (6, 5))]})
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    (info,) = metadata.storage_data.values()
    info.relative_path = "../escape/__0_0.distcp"
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    report = inspect_file(folder)
    assert report.error.code == "load_failed"
    assert "not in the folder" in report.error.message


def test_metadata_payload_is_refused_before_and_inside_the_worker(tmp_path, canary, capsys):
    folder = factories.adv_dcp_metadata_payload(tmp_path / "evil.bin", canary).parent
    assert is_dcp_folder(folder)
    before = _folder_digest(folder)
    assert scan_folder(folder).verdict == "dangerous"
    assert main(["inspect", str(folder)]) == 2
    with pytest.raises(SandboxError) as refused:
        convert_file(folder, tmp_path / "out.safetensors")
    assert refused.value.code == "refused_dangerous"
    # forced past the scan, the worker's weights_only unpickler still refuses os.system
    report = inspect_file(folder, override_dangerous=True)
    assert report.error.code == "weights_only_refused", report.error
    assert not (tmp_path / "out.safetensors").exists()
    assert _folder_digest(folder) == before


def _protocol4(*names: str) -> bytes:
    """`Metadata`-looking protocol-4 pickle calling names[0].names[1](touch) via STACK_GLOBAL."""
    def short(text: str) -> bytes:
        return b"\x8c" + bytes([len(text.encode())]) + text.encode() + b"\x94"

    return (b"\x80\x04" + short(names[0]) + short(names[1]) + b"\x93\x94" + b"("
            + short(names[2]) + b"tR.")


@pytest.mark.parametrize("names", [
    ("os", "system"),
    ("builtins", "exec"),
    ("torch.distributed.checkpoint.metadata\nos", "system"),  # GLOBAL line injection
])
def test_protocol_4_payloads_never_run_in_the_metadata_reader(tmp_path, canary, names):
    path = tmp_path / ".metadata"
    command = factories.touch_cmd(canary) if names[1] == "system" else factories.touch_code(canary)
    path.write_bytes(_protocol4(*names, command))
    assert pickle.loads(_protocol4("builtins", "len", "abc")) == 3  # the builder is sound
    with pytest.raises(LoadError) as refused:
        read_metadata(str(path))
    assert refused.value.code == "weights_only_refused"
    assert "GLOBAL" in refused.value.message  # refused for the global, not a parse error


def test_protocol_4_payload_in_a_folder_is_refused_in_the_jail(tmp_path, canary):
    folder = tmp_path / "p4"
    folder.mkdir()
    (folder / ".metadata").write_bytes(_protocol4("os", "system", factories.touch_cmd(canary)))
    report = inspect_file(folder, override_dangerous=True)
    assert report.scan.verdict == "dangerous"
    assert report.error.code == "weights_only_refused", report.error


def test_a_framed_protocol_4_payload_is_refused(tmp_path, canary):
    body = _protocol4("os", "system", factories.touch_cmd(canary))[2:]
    path = tmp_path / ".metadata"
    path.write_bytes(b"\x80\x04\x95" + struct.pack("<Q", len(body)) + body)
    with pytest.raises(LoadError):
        read_metadata(str(path))


def test_a_payload_in_a_stored_item_is_refused_before_and_inside_the_worker(tmp_path, canary):
    folder = tmp_path / "item"
    factories.dcp_write_chunks(folder, _sharded_tensors(), {"rows": [((0, 0), (6, 5))]})
    item = (folder / "__0_0.distcp").read_bytes()
    bad = factories._rewrite_zip(item, {"/data.pkl": factories.call(
        "os", "system", factories.touch_cmd(canary))})
    (folder / "__0_0.distcp").write_bytes(bad)
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    (info,) = metadata.storage_data.values()
    info.length = len(bad)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    assert scan_folder(folder).verdict == "dangerous"
    assert main(["inspect", str(folder)]) == 2
    report = inspect_file(folder, override_dangerous=True)
    assert report.error.code == "weights_only_refused", report.error
    assert "rows" in report.error.message
