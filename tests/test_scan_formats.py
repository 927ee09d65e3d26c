"""Format detection from bytes and the header checks that need no pickle: safetensors, npy,
compressed pickles, archives the scanner cannot open, and files that are not models."""

from __future__ import annotations

import bz2
import io
import json
import lzma
import struct
import zipfile

import pytest
from factories import call, save_safetensors, touch_cmd

from inspector.formats.archives import zipread
from inspector.scan.engine import scan_file, scan_paths


def _safetensors(tmp_path, header: dict, data: bytes):
    raw = json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _codes(res):
    return {f.code for f in res.findings}


def test_real_safetensors_is_safe(tmp_path):
    res = scan_file(save_safetensors(tmp_path / "model.weights"))
    assert (res.format, res.verdict, res.globals) == ("safetensors", "safe", [])


@pytest.mark.parametrize(("header", "code"), [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, "safetensors-overlap"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}}, "safetensors-bounds"),
    ({"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}}, "safetensors-size"),
    ({"a": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}, "safetensors-entry"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, "safetensors-entry"),
    ({"__metadata__": {"k": 1}, "a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}},
     "safetensors-metadata"),
])
def test_safetensors_header_validation(tmp_path, header, code):
    res = scan_file(_safetensors(tmp_path, header, bytes(16)))
    assert res.format == "safetensors" and res.verdict == "suspicious"
    assert code in _codes(res)


def test_safetensors_with_broken_json_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(struct.pack("<Q", 10) + b"{not json}" + bytes(8))
    res = scan_file(path)
    assert res.verdict == "error" and "JSON" in res.error


def test_npy_structured_dtype_with_object_field(tmp_path):
    header = "{'descr': [('a', '<i4'), ('Obj', '|O')], 'fortran_order': False, 'shape': (1,), }"
    header = header.ljust(127) + "\n"
    inner = b"\x80\x02]q\x00."
    path = tmp_path / "s.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                     + inner)
    res = scan_file(path)
    assert res.format == "npy" and "npy-object-array" in _codes(res)
    numeric = "{'descr': [('Obj', '<f4')], 'fortran_order': False, 'shape': (1,), }"
    numeric = numeric.ljust(117) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(numeric)) + numeric.encode()
                     + bytes(4))
    assert scan_file(path).verdict == "safe"


@pytest.mark.parametrize("compress", [bz2.compress, lzma.compress])
def test_compressed_pickles(tmp_path, canary, compress):
    path = tmp_path / "model.joblib"
    path.write_bytes(compress(call("os", "system", touch_cmd(canary))))
    res = scan_file(path)
    assert (res.format, res.verdict) == ("compressed-pickle", "dangerous")


def test_seven_zip_is_never_safe(tmp_path):
    path = tmp_path / "a.7z"
    path.write_bytes(b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(24))
    res = scan_file(path)
    assert res.verdict == "suspicious" and "archive-partially-scanned" in _codes(res)


def test_seven_zip_streams_are_decoded(tmp_path, canary):
    import lzma

    payload = call("os", "system", touch_cmd(canary))
    stream = lzma.compress(b"README text\n" + payload, format=lzma.FORMAT_RAW,
                           filters=[{"id": lzma.FILTER_LZMA2}])
    path = tmp_path / "bundle.7z"
    path.write_bytes(b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(4)
                     + struct.pack("<QQ", len(stream), 0) + bytes(4) + stream)
    res = scan_file(path)
    assert (res.format, res.verdict) == ("7z", "dangerous")
    assert res.globals[0].members == ["<7z stream 0>"] and res.pickles == []


@pytest.mark.parametrize(("content", "message"), [
    (b"", "empty file"),
    (b"\x89PNG\r\n\x1a\n" + bytes(32), "not a model file"),
    (b"hello world, just text\n", "not a model file"),
])
def test_not_a_model(tmp_path, content, message):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    res = scan_file(path)
    assert res.verdict == "error" and message in res.error and "\n" not in res.error


def test_missing_file_and_directory(tmp_path):
    assert scan_file(tmp_path / "nope.pt").error.startswith("cannot read")
    assert scan_file(tmp_path).verdict == "error"


def test_scan_paths_walks_folders_whatever_the_extension(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "weights.txt").write_bytes(call("os", "system", "true"))
    (tmp_path / "a" / "readme").write_bytes(b"\x80\x02}q\x00.")
    results = {r.path.rsplit("/", 1)[-1]: r.verdict for r in scan_paths([tmp_path])}
    assert results == {"weights.txt": "dangerous", "readme": "safe"}


def test_zip_reader_tolerates_what_zipfile_refuses():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("arch/data.pkl", b"\x80\x02}q\x00.")
        z.writestr(zipfile.ZipInfo("arch/big"), b"x" * 10, compress_type=zipfile.ZIP_DEFLATED)
    data = bytearray(buf.getvalue())
    struct.pack_into("<I", data, 14, 0)  # wrong CRC in the first local header
    archive = zipread.read_zip(bytes(data))
    assert [m.name for m in archive.members] == ["arch/data.pkl", "arch/big"]
    assert zipread.member_bytes(bytes(data), archive.members[1], 100) == b"x" * 10
    with pytest.raises(zipread.MemberTooLarge):
        zipread.member_bytes(bytes(data), archive.members[1], 5)
    with pytest.raises(zipread.NotAZip):
        zipread.read_zip(b"not a zip at all")


def test_zip64_archives_are_read(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", allowZip64=True) as z, z.open("a/data.pkl", "w",
                                                                  force_zip64=True) as f:
        f.write(b"\x80\x02}q\x00.")
    path = tmp_path / "z64.pt"
    path.write_bytes(buf.getvalue())
    res = scan_file(path)
    assert res.format == "pytorch-zip" and res.pickles[0]["complete"]


def test_pickle_hidden_in_npz_member(tmp_path, canary):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("arr_0.npy", call("os", "system", touch_cmd(canary)))
    path = tmp_path / "x.npz"
    path.write_bytes(buf.getvalue())
    res = scan_file(path)
    assert res.verdict == "dangerous"


def test_informational_findings_do_not_change_a_safe_verdict(tmp_path):
    two = tmp_path / "two.pkl"
    two.write_bytes(b"\x80\x02}q\x00." + b"\x80\x02]q\x00.")
    res = scan_file(two)
    assert (res.verdict, len(res.pickles)) == ("safe", 2)
    assert "multiple-pickles" in _codes(res)


def test_tensor_record_right_after_the_main_pickle_is_not_walked(tmp_path):
    # Older torch wrote data/0 straight after data.pkl; a record must never be judged by the
    # bytes of the member read before it.
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.arange(12, dtype=torch.float32)}, buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    names = src.namelist()
    pkl = next(n for n in names if n.endswith("/data.pkl"))
    record = next(n for n in names if "/data/" in n and not n.endswith("serialization_id"))
    ordered = [pkl, record] + [n for n in names if n not in (pkl, record)]
    path = tmp_path / "old-order.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for name in ordered:
            out.writestr(name, src.read(name))
    res = scan_file(path)
    assert (res.verdict, _codes(res)) == ("safe", set())
