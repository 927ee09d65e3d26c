"""One safetensors header reader (`formats.safetensors_header`) for every consumer.

Crafted headers go through everything that reads one: the static scan, the jailed `inspect`
load, the jailed `diff` (the digests' reader), the jailed `convert` and the shard check. A file
one of them refuses must be refused or flagged by all of them: readers that disagree are how a
crafted file gets checked as one thing and loaded as another. A real file from the
safetensors library reads the same through the reader as through the library.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from inspector.formats.safetensors_header import MAX_HEADER, read_buffer, read_header
from inspector.integrity.shard_index import ShardError, safetensors_contents
from inspector.sandbox.host.client import SandboxError, convert_file, diff_files, inspect_file
from inspector.scan.engine import scan_file

pytest_plugins = ("forkserver_fixtures", "sandbox_fixtures")  # forked, unchanged

F32_PAIR = '"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'


def _raw(header: str | bytes, data: bytes = bytes(16), length: int | None = None) -> bytes:
    text = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(text) if length is None else length) + text + data


# name -> (file bytes, the finding the scan must report; None where the header cannot be read)
CRAFTED = {
    "length beyond the file": (_raw("{}", b"", length=64), None),
    "absurd length": (_raw("{}", b"", length=(1 << 64) - 1), None),
    "truncated to 5 bytes": (_raw(f'{{"a": {{{F32_PAIR}}}}}')[:5], None),
    "JSON array": (_raw("[1, 2]"), None),
    "not JSON": (_raw("{not json}"), None),
    "invalid UTF-8": (_raw(f'{{"a\xff": {{{F32_PAIR}}}}}'.encode("latin-1")), None),
    "NaN in a shape": (_raw('{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 8]}}'),
                       None),
    "duplicate tensor key": (
        _raw(f'{{"a": {{{F32_PAIR}}}, '
             '"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}'),
        "safetensors-duplicate-key"),
    "duplicate field in an entry": (
        _raw(f'{{"a": {{{F32_PAIR}, "data_offsets": [8, 16]}}}}'), "safetensors-duplicate-key"),
    "unknown dtype": (_raw('{"a": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}'),
                      "safetensors-entry"),
    "negative shape": (_raw('{"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}'),
                       "safetensors-entry"),
    "float shape": (_raw('{"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}'),
                    "safetensors-entry"),
    "offsets beyond the buffer": (
        _raw('{"a": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}'),
        "safetensors-bounds"),
    "end before begin": (_raw('{"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}'),
                         "safetensors-bounds"),
    "overlap": (_raw(f'{{"a": {{{F32_PAIR}}}, '
                     '"b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}'),
                "safetensors-overlap"),
    "size against dtype and shape": (
        _raw('{"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}}'),
        "safetensors-size"),
    "metadata not text": (
        _raw('{"__metadata__": {"k": 1}, "a": {"dtype": "U8", "shape": [16], '
             '"data_offsets": [0, 16]}}'), "safetensors-metadata"),
}


def _outcomes(path: Path, tmp_path: Path) -> dict[str, str]:
    """What each consumer did with the file: `flagged`/`refused`, or `safe`/`read`."""
    out = {"scan": "safe" if scan_file(path).verdict == "safe" else "flagged"}
    with path.open("rb") as fh:
        out["reader"] = "read" if read_header(fh, path.stat().st_size).refusal() is None \
            else "refused"
    out["inspect"] = "read" if inspect_file(path).error is None else "refused"
    for name, use in (("diff", lambda: diff_files(path, path)),
                      ("convert", lambda: convert_file(path, tmp_path / "out.safetensors")),
                      ("shards", lambda: safetensors_contents(path))):
        try:
            use()
            out[name] = "read"
        except (SandboxError, ShardError):
            out[name] = "refused"
    return out


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_every_consumer_refuses_a_crafted_header(name, tmp_path, forked, unchanged):
    data, code = CRAFTED[name]
    path = tmp_path / "crafted.safetensors"
    path.write_bytes(data)
    unchanged(path)
    outcomes = _outcomes(path, tmp_path)
    assert outcomes == {"scan": "flagged", "reader": "refused", "inspect": "refused",
                        "diff": "refused", "convert": "refused", "shards": "refused"}
    assert not (tmp_path / "out.safetensors").exists()
    if code is not None:
        result = scan_file(path)
        assert result.format == "safetensors" and result.verdict == "suspicious"
        assert code in {f.code for f in result.findings}


# bytes no tensor covers: the safetensors library refuses each (issue 22), so every consumer does
UNCOVERED = {
    "gap before": (_raw('{"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}'),
                   "safetensors-gap"),
    "gap between": (_raw(f'{{"a": {{{F32_PAIR}}}, '
                         '"b": {"dtype": "U8", "shape": [4], "data_offsets": [12, 16]}}'),
                    "safetensors-gap"),
    "trailing bytes": (_raw(f'{{"__metadata__": {{"k": "v"}}, "a": {{{F32_PAIR}}}}}',
                            struct.pack("<2f", 1.5, -2.0) + bytes(8)), "safetensors-trailing"),
}


@pytest.mark.parametrize("name", sorted(UNCOVERED))
def test_bytes_no_tensor_covers_are_refused_as_the_library_refuses_them(name, tmp_path, forked,
                                                                       unchanged):
    from safetensors.torch import load

    data, code = UNCOVERED[name]
    with pytest.raises(Exception, match=r"invalid offset|not fully covered"):
        load(data)  # the reference reader
    path = tmp_path / "uncovered.safetensors"
    path.write_bytes(data)
    unchanged(path)
    assert _outcomes(path, tmp_path) == {"scan": "flagged", "reader": "refused",
                                         "inspect": "refused", "diff": "refused",
                                         "convert": "refused", "shards": "refused"}
    assert not (tmp_path / "out.safetensors").exists()
    result = scan_file(path)
    assert result.verdict == "suspicious" and code in {f.code for f in result.findings}


def test_a_file_the_library_writes_has_no_uncovered_bytes(tmp_path):
    import torch
    from safetensors.torch import save

    data = save({"a": torch.ones(3), "b": torch.zeros(2, 2, dtype=torch.float16)})
    assert read_buffer(data, len(data)).problems == []


def test_a_tensor_inside_a_larger_one_overlaps_it_whatever_lies_between():
    data = _raw('{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, '
                '"b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}, '
                '"c": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}}')
    header = read_buffer(data, len(data))
    assert [(p.severity, p.code, p.message) for p in header.problems] == [
        ("suspicious", "safetensors-overlap", "tensors 'a' and 'b' overlap"),
        ("suspicious", "safetensors-overlap", "tensors 'a' and 'c' overlap")]
    assert [(e.key, e.begin - header.base, e.end - header.base) for e in header.entries] == [
        ("a", 0, 16), ("b", 2, 4), ("c", 6, 8)]


def test_a_header_longer_than_the_limit_is_refused_before_it_is_read():
    class Unread:
        def __init__(self) -> None:
            self.asked: list[int] = []

        def read(self, n: int) -> bytes:
            self.asked.append(n)
            return struct.pack("<Q", MAX_HEADER + 1)

    fh = Unread()
    header = read_header(fh, 1 << 40)
    assert header.error == f"header length {MAX_HEADER + 1} exceeds the {MAX_HEADER}-byte limit"
    assert fh.asked == [8]


def test_a_library_file_reads_the_same_through_the_reader_and_the_library(tmp_path):
    state = {
        "f32": torch.randn(3, 4),
        "f16": torch.randn(5).half(),
        "bf16": torch.randn(2, 2).bfloat16(),
        "f64": torch.randn(1, 1, 3).double(),
        "i64": torch.arange(7),
        "i8": torch.tensor([-1, 2, -3], dtype=torch.int8),
        "u8": torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "f8": torch.randn(4).to(torch.float8_e4m3fn),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }
    path = tmp_path / "lib.safetensors"
    save_file(state, path, metadata={"format": "pt", "note": "x"})
    data = path.read_bytes()
    with path.open("rb") as fh:
        header = read_header(fh, len(data))
    assert header.refusal() is None and header.problems == []
    assert header == read_buffer(data, len(data))
    raw_header = json.loads(data[8:header.base])
    with safe_open(path, framework="pt") as lib:
        assert [e.key for e in header.entries] == [k for k in raw_header if k != "__metadata__"]
        assert sorted(e.key for e in header.entries) == sorted(lib.keys())
        assert header.metadata == lib.metadata() == {"format": "pt", "note": "x"}
        for e in header.entries:
            sliced = lib.get_slice(e.key)
            assert e.dtype.safetensors == sliced.get_dtype()
            assert e.shape == sliced.get_shape() == list(state[e.key].shape)
            assert [e.begin - header.base, e.end - header.base] == \
                raw_header[e.key]["data_offsets"]
            tensor = lib.get_tensor(e.key)
            assert data[e.begin:e.end] == tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
