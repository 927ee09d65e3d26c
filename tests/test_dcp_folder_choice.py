"""One choice of what a folder's checkpoint is, for `inspect`/`diff`/`report` and `convert`.

`shards.shard_set.folder_checkpoint` decides; `shard_set.resolve` (inspect, diff, report) and
`shards.convert.plan_folder` (convert) both go through it, so they never disagree: a
torch.distributed.checkpoint folder is itself, safetensors come before torch pickles and an
index before a single file, and `convert` refuses a folder whose checkpoint is safetensors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import factories
import pytest

from inspector.shards.convert import FolderError, plan_folder
from inspector.shards.shard_set import FolderChoiceError, folder_checkpoint, resolve


def _files(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"x")
    return folder


def _index(folder: Path, name: str, shards: list[str]) -> Path:
    doc = {"metadata": {"total_size": len(shards)},
           "weight_map": {f"w{i}": shard for i, shard in enumerate(shards)}}
    (folder / name).write_text(json.dumps(doc))
    return folder / name


def _convert_choice(folder: Path) -> Path | str:
    try:
        return plan_folder(folder, None).source
    except FolderError as exc:
        return exc.code


def test_a_folder_of_both_bin_and_safetensors_shards_is_its_safetensors_index(tmp_path):
    st = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    pt = [f"pytorch_model-0000{i}-of-00002.bin" for i in (1, 2)]
    folder = _files(tmp_path / "both", *st, *pt, "config.json")
    chosen = _index(folder, "model.safetensors.index.json", st)
    _index(folder, "pytorch_model.bin.index.json", pt)
    assert folder_checkpoint(folder) == chosen
    assert resolve(folder).files == [folder / name for name in st]
    assert _convert_choice(folder) == "already_safetensors"
    # the .bin shards are still converted when their index is named
    assert plan_folder(folder / "pytorch_model.bin.index.json", tmp_path / "out").index.shards() \
        == pt


def test_a_folder_with_a_torch_index_is_that_index_for_every_command(tmp_path):
    pt = [f"pytorch_model-0000{i}-of-00002.bin" for i in (1, 2)]
    folder = _files(tmp_path / "bin", *pt, "training_args.bin")
    chosen = _index(folder, "pytorch_model.bin.index.json", pt)
    assert folder_checkpoint(folder) == chosen
    assert resolve(folder).index.path == chosen
    assert _convert_choice(folder) == chosen


@pytest.mark.parametrize("names, inspect, convert", [
    (("model.safetensors", "training_args.bin"), "model.safetensors", "already_safetensors"),
    (("pytorch_model.bin", "optimizer.pt", "training_args.bin"), "pytorch_model.bin",
     "pytorch_model.bin"),
    (("weights.pt", "config.json"), "weights.pt", "weights.pt"),
    (("a.pt", "b.pt"), "no_checkpoint", "no_checkpoint"),
    (("config.json",), "no_checkpoint", "no_checkpoint"),
    (("a.bin.index.json", "b.bin.index.json"), "ambiguous", "ambiguous"),
])
def test_single_files_and_unclear_folders(tmp_path, names, inspect, convert):
    folder = _files(tmp_path / "f", *names)
    try:
        chosen: str = folder_checkpoint(folder).name
    except FolderChoiceError as exc:
        chosen = exc.code
    assert chosen == inspect
    picked = _convert_choice(folder)
    assert (picked.name if isinstance(picked, Path) else picked) == convert


def test_a_dcp_folder_is_itself(tmp_path):
    folder = factories.dcp_save(factories.dcp_state(), tmp_path / "dcp")
    assert folder_checkpoint(folder) == folder
    shards = resolve(folder)
    assert shards.files == [folder] and shards.index is None


def test_a_hub_cache_snapshot_is_read_through_its_links(tmp_path):
    repo = tmp_path / "hub" / "models--org--name"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "0123abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for name, blob in (("pytorch_model.bin", "b" * 64), ("config.json", "c" * 40)):
        (blobs / blob).write_bytes(b"x")
        os.symlink(os.path.relpath(blobs / blob, snapshot), snapshot / name)
    assert folder_checkpoint(snapshot) == snapshot / "pytorch_model.bin"
    assert resolve(snapshot).files == [snapshot / "pytorch_model.bin"]  # the link, not its blob
    job = plan_folder(snapshot, None)
    assert job.source == snapshot / "pytorch_model.bin"
    assert job.pairs[0][1] == snapshot / "model.safetensors"
