"""Every compression read to its end (issue 34): zstd and lz4 frames are decoded like gzip, bz2
and xz, and a payload behind 48 MiB of padding (a compressed pickle, a deflated torch zip
`data.pkl`) is found by reading the stream once, padding passed over, never held. Each hostile
sample runs its payload under its real loader (the canary appears) and `ckpt-inspector scan`
calls it dangerous; a benign compressed pickle is not worded as an unreadable one."""

from __future__ import annotations

import gzip
import pickle

import pytest
from hostile_unpack import (
    COMPRESSORS,
    PADDING,
    benign_compressed,
    compressed_padded,
    gzip_torch_zip_padded,
    lz4_pickle,
    open_compressed,
    padded_pickle,
    padded_protocol0,
    tar_gz_padded,
    tar_zst,
    zip_deflated_padded,
    zstd_torch_zip,
)
from proofs import cli_calls_all_dangerous

from inspector.formats.archives import decompress, squeeze
from inspector.scan import budget
from inspector.scan.engine import pickle_source, scan_bytes, scan_file
from inspector.scan.pickles.walker import scan_pickle


def _load_compressed(kind, path):
    if kind in ("gzip", "bz2", "xz", "lz4"):
        import joblib

        return joblib.load(path)  # joblib's own readers, chosen by the file's magic
    with open_compressed(kind, path) as fh:
        return pickle.load(fh)


def _load_torch(path):
    import torch

    return torch.load(path, weights_only=False)


def _load_tar_zst(path):
    import io
    import tarfile

    import zstandard

    with tarfile.open(fileobj=io.BytesIO(zstandard.decompress(path.read_bytes(),
                                                              max_output_size=1 << 26))) as tar:
        return pickle.load(tar.extractfile("model/model.pkl"))


def _load_tar_gz(path):
    import tarfile

    with tarfile.open(path, "r:gz") as tar:
        return pickle.load(tar.extractfile("model/model.pkl"))


def _load_gzip_torch(path):
    import io

    import torch

    with gzip.open(path) as fh:
        return torch.load(io.BytesIO(fh.read()), weights_only=False)


def _load_zstd_torch(path):
    import io

    import torch
    import zstandard

    inner = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes())).read()
    return torch.load(io.BytesIO(inner), weights_only=False)


SAMPLES = {f"padded_{kind}": (compressed_padded(kind), lambda p, k=kind: _load_compressed(k, p))
           for kind in COMPRESSORS}
SAMPLES.update({
    "zip_deflated_padded": (zip_deflated_padded, _load_torch),
    "tar_zst": (tar_zst, _load_tar_zst),
    "zstd_torch_zip": (zstd_torch_zip, _load_zstd_torch),
    "lz4_pickle": (lz4_pickle, lambda p: _load_compressed("lz4", p)),
    "tar_gz_padded": (tar_gz_padded, _load_tar_gz),
    "gzip_torch_zip_padded": (gzip_torch_zip_padded, _load_gzip_torch),
})


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_hostile_compressed_sample_runs_under_its_loader_and_is_dangerous(tmp_path, name):
    build, load = SAMPLES[name]
    canary = tmp_path / "canary"
    path = build(tmp_path / name, canary)
    res = scan_file(path)
    assert not canary.exists()  # the scan ran nothing
    assert res.verdict == "dangerous", res.to_json()
    assert not {"scan-budget", "compressed-unreadable"} & {f.code for f in res.findings}
    assert any(g.module in ("os", "posix") and g.name == "system" for g in res.globals)
    load(path)
    assert canary.exists()


def test_padding_is_passed_over_not_held(tmp_path):
    data = gzip.compress(padded_pickle(tmp_path / "canary"))
    hold = 1 << 20
    decoded = squeeze.content(data, "gzip", hold, budget.MAX_STREAMED)
    assert len(decoded.data) < hold and decoded.passed_over == PADDING - squeeze.KEEP
    assert decoded.incomplete is None and not decoded.over_limit
    walked = scan_pickle(decoded.data)
    assert walked.stopped and any(g.name == "system" for g in walked.globals)


@pytest.mark.parametrize("quoted", [False, True])
def test_a_protocol_0_line_of_padding_is_cut_and_the_payload_found(tmp_path, quoted):
    canary = tmp_path / "canary"
    path = tmp_path / "p0.gz"
    path.write_bytes(gzip.compress(padded_protocol0(canary, quoted)))
    res = scan_file(path)
    assert not canary.exists()
    assert res.verdict == "dangerous" and "stream-passed-over" in {f.code for f in res.findings}
    with gzip.open(path) as fh:
        pickle.load(fh)
    assert canary.exists()


def test_a_cut_through_an_escape_still_parses():
    """Wherever the cut falls in a run of escapes, the cut line parses as the loader's would."""
    for shift in range(10):
        for line in (b"V" + b"x" * shift + b"\\u00e9\\\\" * 30_000 + b"\n",
                     b"S'" + b"x" * shift + b"\\x41\\\\\\'" * 30_000 + b"'\n"):
            body = line + b"0N."
            decoded = squeeze.content(gzip.compress(body), "gzip", 1 << 17, 1 << 30)
            walked = scan_pickle(decoded.data)
            assert decoded.passed_over and walked.stopped and walked.error is None, shift


def test_a_frame_around_a_cut_value_keeps_its_framing():
    big = b"\x8e" + (1_000_000).to_bytes(8, "little") + bytes(1_000_000)
    body = b"\x80\x04" + b"\x95" + (len(big) + 2).to_bytes(8, "little") + big + b"0N."
    decoded = squeeze.content(gzip.compress(body), "gzip", 200_000, budget.MAX_STREAMED)
    assert decoded.passed_over == 1_000_000 - squeeze.KEEP
    walked = scan_pickle(decoded.data)
    assert walked.stopped and walked.error is None and not walked.issues, walked


def test_past_the_stream_limit_the_scan_names_the_limit(tmp_path, monkeypatch):
    real = budget.ScanBudget.for_size.__func__
    monkeypatch.setattr(budget.ScanBudget, "for_size", classmethod(
        lambda cls, size: budget.ScanBudget(real(cls, size).decoded, real(cls, size).opcodes,
                                            40 << 20)))
    data = gzip.compress(padded_pickle(tmp_path / "canary"))
    res = scan_bytes(data)
    found = {f.code: f.message for f in res.findings}
    assert res.verdict == "suspicious" and "scan-budget" in found
    assert "stream limit" in found["scan-budget"]
    assert f"{budget.MAX_STREAMED >> 20} MiB per file" in found["scan-budget"]


def test_benign_compressed_pickles_are_not_worded_as_unreadable(tmp_path):
    for kind in COMPRESSORS:
        res = scan_file(benign_compressed(kind, tmp_path / f"benign.{kind}"))
        codes = {f.code for f in res.findings}
        assert res.format == "compressed-pickle" and "compressed-pickle" in codes
        assert res.verdict == "safe" and not {"compressed-unreadable", "scan-budget"} & codes
    cut = gzip.compress(pickle.dumps(list(range(1000))))[:-30]
    res = scan_bytes(cut)
    assert res.verdict == "suspicious"
    assert "compressed-unreadable" in {f.code for f in res.findings}


def test_pickle_source_offsets_point_into_the_squeezed_stream(tmp_path):
    path = compressed_padded("zstd")(tmp_path / "p.zst", tmp_path / "canary")
    res = scan_file(path)
    source = pickle_source(path, None)
    entry = res.pickles[0]
    assert scan_pickle(source, entry.offset if hasattr(entry, "offset") else entry["offset"]
                       ).stopped


def test_stream_reads_across_members_and_reports_truncation():
    for kind, compress in COMPRESSORS.items():
        data = compress(b"a" * 300_000) + compress(b"tail")
        stream = decompress.Stream(data, kind)
        assert stream.skip(299_990) == 299_990 and stream.read(100) == b"a" * 10 + b"tail"
        assert stream.incomplete is None and stream.members == 2
        cut = decompress.decompress(data[:-3], kind, 1 << 30)
        assert cut.incomplete and not cut.over_limit


def test_the_zlib_header_check_refuses_only_what_zlib_refuses():
    """`accepts` answers most files from the two header bytes alone: every one of the 65,536
    two-byte headers that zlib's own decoder reads on into data must pass that check."""
    import zlib

    body = zlib.compress(b"a pickle, perhaps" * 4)[2:]
    for cmf in range(256):
        for flg in range(256):
            stream = bytes((cmf, flg)) + body
            try:
                zlib_reads = bool(zlib.decompressobj(zlib.MAX_WBITS).decompress(stream, 64))
            except zlib.error:
                zlib_reads = False
            assert decompress.accepts(stream, "zlib") == zlib_reads, (cmf, flg)


def test_cli_calls_every_hostile_sample_dangerous(python_exe, tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    canary = tmp_path / "canary"
    for name, (build, _load) in SAMPLES.items():
        build(folder / name, canary)
    cli_calls_all_dangerous(python_exe, folder, SAMPLES)
    assert not canary.exists()
