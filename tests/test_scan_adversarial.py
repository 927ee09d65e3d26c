"""Adversarial samples of issue 12: each is first proven malicious (its payload runs under its
target loader in a throwaway process and creates its canary there), then scanned: never safe,
and (at least 90 % of them, all today) dangerous, with nothing executed by the scan."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import ADVERSARIAL_BUILDERS
from proofs import canary_folders, payload_runs_test, proof, run_each_forked, scan_runs_nothing

from inspector.scan.engine import scan_file

# Runs one sample under its loader; the canary is the only file its folder may gain.
LOADER = r"""
import io, pickle, sys
kind, path, arg = sys.argv[1], sys.argv[2], sys.argv[3]


def joblib_stream(raw):
    import bz2, lzma, zlib
    if raw[:2] == b"\x1f\x8b" or raw[:1] == b"\x78":
        out, rest = b"", raw
        while rest:  # joblib's BinaryZlibFile reads stream after stream
            d = zlib.decompressobj(31 if rest[:2] == b"\x1f\x8b" else 15)
            out += d.decompress(rest)
            rest = d.unused_data
        return io.BytesIO(out)
    if raw[:3] == b"BZh":
        return bz2.BZ2File(io.BytesIO(raw))
    if raw[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(io.BytesIO(raw), format=lzma.FORMAT_XZ)
    return lzma.LZMAFile(io.BytesIO(raw), format=lzma.FORMAT_ALONE)


try:
    if kind == "pickle":
        with open(path, "rb") as f:
            pickle.load(f)
    elif kind == "pickle-all":
        with open(path, "rb") as f:
            while f.read(1):
                f.seek(-1, 1)
                pickle.load(f)
    elif kind == "torch":
        import torch
        torch.load(path, weights_only=False)
    elif kind == "torch-at":
        import torch
        raw = open(path, "rb").read()
        torch.load(io.BytesIO(raw[int(arg):]), weights_only=False)
    elif kind == "numpy":
        import numpy
        out = numpy.load(path, allow_pickle=True)
        if hasattr(out, "files"):
            [out[name] for name in out.zip.namelist()]
    elif kind == "joblib":
        pickle.load(joblib_stream(open(path, "rb").read()))
    elif kind == "dcp":
        from torch.distributed.checkpoint import FileSystemReader
        FileSystemReader(arg).read_metadata()
except Exception as exc:
    print("loader raised", type(exc).__name__, str(exc)[:200])
"""


PRELOAD = ("numpy", "torch", "torch.distributed.checkpoint")
"""What LOADER imports, imported once before the runs fork."""


def _loader_arg(name: str, path: Path, work: Path) -> str:
    if name == "distcp_second_archive":
        return str(len((work / "_base_ckpt.pt").read_bytes()))
    return str(path.parent)


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Every sample, built and proven malicious; the proof's canary removed afterwards."""
    work = tmp_path_factory.mktemp("adversarial")
    with canary_folders("adv", sorted(ADVERSARIAL_BUILDERS)) as (short, canaries):
        paths = {name: ADVERSARIAL_BUILDERS[name][1](work / f"{name}.bin", canary_dir / "c")
                 for name, canary_dir in canaries.items()}
        runs = [[ADVERSARIAL_BUILDERS[name][0], str(path), _loader_arg(name, path, work)]
                for name, path in paths.items()]
        outputs = run_each_forked(python_exe, LOADER, runs, short, PRELOAD)
        yield {name: proof(path, canaries[name], output)
               for (name, path), (_, output) in zip(paths.items(), outputs, strict=True)}


def test_enough_samples_across_the_classes():
    loaders = {loader for loader, _ in ADVERSARIAL_BUILDERS.values()}
    assert len(ADVERSARIAL_BUILDERS) >= 40
    assert {"pickle", "pickle-all", "torch", "torch-at", "numpy", "joblib", "dcp"} <= loaders


test_payload_runs_under_its_loader = payload_runs_test(ADVERSARIAL_BUILDERS)


@pytest.mark.parametrize("name", sorted(ADVERSARIAL_BUILDERS))
def test_scan_is_never_safe_and_runs_nothing(proven, name):
    res = scan_runs_nothing(*proven[name][:2])
    assert res.verdict != "safe", res.to_json()
    assert res.error is None or res.verdict == "dangerous", res.to_json()


def test_at_least_ninety_percent_dangerous(proven):
    verdicts = {name: scan_file(path).verdict for name, (path, *_) in proven.items()}
    dangerous = [n for n, v in verdicts.items() if v == "dangerous"]
    assert len(dangerous) >= 0.9 * len(verdicts), {n: v for n, v in verdicts.items()
                                                  if v != "dangerous"}


# Readers of one format that disagree (zipfile against miniz, a sparse member extracted):
# each once scanned safe or failed, so each must show its os.system payload.
READ_AS_ITS_LOADER_READS = ("npz_entry_count", "npz_zipfile_negative_shift", "npz_zipfile_shift",
                            "legacy_tar_sparse_storages", "zip_trailing_end_signature")


@pytest.mark.parametrize("name", READ_AS_ITS_LOADER_READS)
def test_a_file_read_as_its_loader_reads_it_shows_the_payload(proven, name):
    path, canary_dir, _, _ = proven[name]
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any(g.import_name == "os.system" for g in res.globals), res.to_json()
    assert not any(canary_dir.iterdir()), "the scan executed the payload"
