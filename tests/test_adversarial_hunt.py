"""Adversarial hunt: inputs on which the static scan once gave a wrong trust answer.

Each malicious sample is first proven to run its payload under its loader (in a throwaway
process, creating only its canary), then scanned: the scan calls it dangerous and the canary
never appears.
"""

from __future__ import annotations

import subprocess

import pytest
from factories import (
    hunt_legacy_tar_links,
    hunt_npz_entry_count,
    hunt_npz_zipfile_shift,
    hunt_zip_trailing_end_signature,
)

from inspector.core.scan import scan_file, scan_paths

NUMPY_LOAD = r"""
import sys, numpy
out = numpy.load(sys.argv[1], allow_pickle=True)
try:
    [out[name] for name in out.files]
except Exception as exc:
    print("loader raised", type(exc).__name__, exc)
"""

NUMPY_SAMPLES = {"npz_zipfile_shift": hunt_npz_zipfile_shift,
                 "npz_entry_count": hunt_npz_entry_count}


@pytest.mark.parametrize("name", sorted(NUMPY_SAMPLES))
def test_npz_read_the_way_zipfile_reads_it_is_dangerous(tmp_path, python_exe, name):
    proof = tmp_path / "proof"
    proof.mkdir()
    sample = NUMPY_SAMPLES[name](tmp_path / "proof.npz", proof / "canary")
    proc = subprocess.run([python_exe, "-c", NUMPY_LOAD, str(sample)], capture_output=True,
                          text=True, timeout=120, cwd=proof)
    assert (proof / "canary").exists(), f"numpy.load did not run the payload: {proc.stdout}"

    canary = tmp_path / "canary"
    path = NUMPY_SAMPLES[name](tmp_path / f"{name}.npz", canary)
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any(g.import_name == "os.system" for g in res.globals), res.to_json()
    assert not canary.exists()


TORCH_LOAD = r"""
import sys, torch
try:
    torch.load(sys.argv[1], weights_only=False)
except Exception as exc:
    print("loader raised", type(exc).__name__, exc)
"""

TORCH_SAMPLES = {"zip_trailing_end_signature": hunt_zip_trailing_end_signature}


@pytest.mark.parametrize("name", sorted(TORCH_SAMPLES))
def test_torch_zip_read_the_way_miniz_reads_it_is_dangerous(tmp_path, python_exe, name):
    proof = tmp_path / "proof"
    proof.mkdir()
    sample = TORCH_SAMPLES[name](tmp_path / "proof.pt", proof / "canary")
    proc = subprocess.run([python_exe, "-c", TORCH_LOAD, str(sample)], capture_output=True,
                          text=True, timeout=300, cwd=proof)
    assert (proof / "canary").exists(), f"torch.load did not run the payload: {proc.stdout}"

    canary = tmp_path / "canary"
    path = TORCH_SAMPLES[name](tmp_path / f"{name}.pt", canary)
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any(g.import_name == "os.system" for g in res.globals), res.to_json()
    assert not canary.exists()


def test_legacy_tar_of_links_to_a_pickle_outside_is_never_safe_or_skipped(tmp_path, python_exe):
    outside = tmp_path / "outside"
    outside.mkdir()
    proof = tmp_path / "proof"
    proof.mkdir()
    sample = hunt_legacy_tar_links(proof / "model.pt", outside / "proof-canary")
    proc = subprocess.run([python_exe, "-c", TORCH_LOAD, str(sample)], capture_output=True,
                          text=True, timeout=300, cwd=proof)
    assert (outside / "proof-canary").exists(), f"torch.load ran nothing: {proc.stdout}"

    folder = tmp_path / "model"
    folder.mkdir()
    canary = outside / "canary"
    path = hunt_legacy_tar_links(folder / "model.pt", canary)
    res = scan_file(path)
    assert res.verdict == "suspicious" and res.error is None, res.to_json()
    assert any(f.code == "tar-link" and f.member == "pickle" for f in res.findings)
    assert not res.weights_only_ok
    (folder_res,) = scan_paths([folder])
    assert folder_res.verdict == "suspicious", folder_res.to_json()
    assert not canary.exists()
