"""Adversarial hunt: inputs on which the static scan once gave a wrong trust answer.

Each malicious sample is first proven to run its payload under its loader (in a throwaway
process, creating only its canary), then scanned: the scan calls it dangerous and the canary
never appears. The samples two readers of one format read differently (npz through zipfile,
a zip's end record, a sparse tar member) are in `factories.ADVERSARIAL_BUILDERS`, proven and
scanned by tests/test_scan_adversarial.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import (
    hunt_frame_past_stop_legacy,
    hunt_index_outside,
    hunt_legacy_tar_links,
    hunt_nested_archive,
    hunt_split_frame_pickle,
    hunt_split_frame_zip,
    unpack_nested,
)
from proofs import run_each_forked

from inspector.scan.engine import scan_file, scan_paths

BYTESIO_LOAD = r"""
import io, pickle, sys
kind, path = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
try:
    if kind == "pickle":
        print(repr(pickle.loads(data))[:40], "from bytes")  # reads linearly: no payload
        print(repr(pickle.load(io.BytesIO(data)))[:40])
    elif kind == "torch-bytesio":
        import torch
        torch.load(io.BytesIO(data), weights_only=False)
    else:
        import torch
        torch.load(path, weights_only=False)
except Exception as exc:
    print("loader raised", type(exc).__name__, exc)
"""

FRAME_SAMPLES = {"split_frame_pickle": ("pickle", hunt_split_frame_pickle),
                 "split_frame_zip": ("torch", hunt_split_frame_zip),
                 "frame_past_stop_legacy": ("torch-bytesio", hunt_frame_past_stop_legacy)}


NESTED = ("zip-deflated", "zip-stored", "tar.gz", "zip-in-zip")


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe) -> dict[str, tuple[Path, str]]:
    """Every hunt sample built with a canary and loaded by its loader in a proof folder of its
    own, each in a process forked from one interpreter with torch imported: name -> (canary,
    the loader's output)."""
    work = tmp_path_factory.mktemp("hunt-proofs")
    folders = {name: work / name for name in ("legacy_tar_links", *NESTED, *FRAME_SAMPLES)}
    for folder in folders.values():
        folder.mkdir()
    canaries = {name: folder / "canary" for name, folder in folders.items()}
    # the tar's links reach a pickle outside the folder the loader runs in
    (work / "outside").mkdir()
    canaries["legacy_tar_links"] = work / "outside" / "proof-canary"
    loads = {"legacy_tar_links": ("torch", hunt_legacy_tar_links(
        folders["legacy_tar_links"] / "model.pt", canaries["legacy_tar_links"]))}
    for kind in NESTED:
        suffix = ".tar.gz" if kind == "tar.gz" else ".zip"
        sample = hunt_nested_archive(kind)(work / f"{kind}{suffix}", canaries[kind])
        loads[kind] = ("torch", unpack_nested(sample, work / f"{kind}-unpacked"))
    for name, (loader, build) in FRAME_SAMPLES.items():
        loads[name] = (loader, build(work / f"{name}.bin", canaries[name]))
    outputs = run_each_forked(python_exe, BYTESIO_LOAD,
                              [[loader, str(path)] for loader, path in loads.values()],
                              [folders[name] for name in loads], ("torch",))
    return {name: (canaries[name], output) for name, (_, output) in zip(loads, outputs,
                                                                        strict=True)}


def test_legacy_tar_of_links_to_a_pickle_outside_is_never_safe_or_skipped(tmp_path, proven):
    ran, output = proven["legacy_tar_links"]
    assert ran.exists(), f"torch.load ran nothing: {output}"

    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside").mkdir()
    canary = tmp_path / "outside" / "canary"
    path = hunt_legacy_tar_links(folder / "model.pt", canary)
    res = scan_file(path)
    assert res.verdict == "suspicious" and res.error is None, res.to_json()
    assert any(f.code == "tar-link" and f.member == "pickle" for f in res.findings)
    assert not res.weights_only_ok
    (folder_res,) = scan_paths([folder])
    assert folder_res.verdict == "suspicious", folder_res.to_json()
    assert not canary.exists()


def test_index_that_maps_weights_outside_its_folder_is_not_safe(tmp_path):
    canary = tmp_path / "canary"
    folder = hunt_index_outside(tmp_path / "model", canary)
    index = folder / "model.safetensors.index.json"
    hub = pytest.importorskip("transformers.utils.hub")
    files, _ = hub.get_checkpoint_shard_files(str(folder), str(index))
    outside = tmp_path / "outside" / "pytorch_model-00002-of-00002.bin"
    assert any(Path(f).resolve() == outside for f in files), files  # what transformers loads

    results = {Path(r.path).name: r for r in scan_paths([folder])}
    res = results["model.safetensors.index.json"]
    assert res.verdict == "suspicious" and res.error is None, res.to_json()
    assert any(f.code == "index-outside-file" and "../outside/" in f.message
               for f in res.findings)
    (alone,) = scan_paths([index])
    assert alone.verdict == "suspicious", alone.to_json()
    assert not canary.exists()


def test_index_that_maps_weights_behind_a_folder_link_is_not_safe(tmp_path):
    """`sub/` is a link to a folder outside, and transformers loads
    `sub/pytorch_model-00002-of-00002.bin` through it: the index says so, and the folder scan
    follows the link and reports the shard, saying where it really lies."""
    import json

    canary = tmp_path / "canary"
    folder = hunt_index_outside(tmp_path / "model", canary)
    (folder / "sub").symlink_to(tmp_path / "outside", target_is_directory=True)
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["b"] = "sub/pytorch_model-00002-of-00002.bin"
    index.write_text(json.dumps(data))
    results = {Path(r.path).name: r for r in scan_paths([folder])}
    shard = results["pytorch_model-00002-of-00002.bin"]  # the link is followed
    assert shard.verdict == "dangerous" and any(f.code == "outside-folder"
                                                for f in shard.findings)
    res = results["model.safetensors.index.json"]
    assert res.verdict == "suspicious", res.to_json()
    assert any(f.code == "index-outside-file" and "sub/" in f.message for f in res.findings)
    assert not canary.exists()


@pytest.mark.parametrize("kind", NESTED)
def test_a_checkpoint_inside_an_archive_is_scanned(tmp_path, proven, kind):
    suffix = ".tar.gz" if kind == "tar.gz" else ".zip"
    ran, output = proven[kind]
    assert ran.exists(), f"torch.load did not run the payload: {output}"

    canary = tmp_path / "canary"
    path = hunt_nested_archive(kind)(tmp_path / f"model{suffix}", canary)
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    use = next(g for g in res.globals if g.import_name == "os.system")
    assert any(m.endswith("data.pkl") and "!" in m for m in use.members), use.members
    assert not canary.exists()


@pytest.mark.parametrize("name", sorted(FRAME_SAMPLES))
def test_a_frame_read_the_way_a_reader_without_peek_reads_it_is_dangerous(tmp_path, proven,
                                                                         name):
    ran, output = proven[name]
    assert ran.exists(), f"the payload did not run: {output}"

    canary = tmp_path / "canary"
    path = FRAME_SAMPLES[name][1](tmp_path / f"{name}.bin", canary)
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any(g.import_name == "os.system" for g in res.globals), res.to_json()
    assert any(f.code == "frame-misaligned" for f in res.findings), res.to_json()
    assert not canary.exists()
