"""Red-team round: files crafted so the static scan calls them safe while a loader runs code.

DCP's own loader (`dcp.load`) unpickles `.metadata` with plain pickle and loads each bytes
item with `torch.load(weights_only=False)`, so a payload anywhere a `.metadata` can point runs
there: each sample is first proven under it (`_runs_under_dcp`, a canary appears), then
scanned. The scan reads only the ranges its own walk of `.metadata` finds
(`layout.dcp_items`): a range that walk misses, or a file it cannot map, must not leave hidden
bytes unread.
"""

from __future__ import annotations

import copyreg
import io
import json
import pickle
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING
from unittest import mock

import factories
import pytest

from inspector.cli import main
from inspector.formats import safetensors_header
from inspector.formats.archives import zipread
from inspector.layout import dcp_items
from inspector.scan.dcp_folder import scan_folder
from inspector.scan.engine import scan_file

# DCP's classes are imported in the functions that use them: torch.distributed.checkpoint adds
# over a second to every collection of the suite
if TYPE_CHECKING:
    from torch.distributed.checkpoint.filesystem import _StorageInfo

DATA = factories.DCP_DATA


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A real dcp.save folder of a nested state dict of several dtypes and plain values."""
    return factories.dcp_save(factories.dcp_state(), tmp_path / "ckpt")



def _hide_payload(folder: Path, canary: Path) -> tuple[int, int]:
    """Write an os.system pickle inside a tensor's data (not at its start, where the scan
    looks for a pickle in a record) with the record's CRC-32 updated to match; returns its
    (offset, length) in the data file."""
    payload = factories.call("os", "system", factories.touch_cmd(canary))
    metadata = factories.dcp_metadata(folder)
    info = next(v for k, v in metadata.storage_data.items() if k.fqn == "model.embed.weight")
    raw = bytearray((folder / DATA).read_bytes())
    end = info.offset + info.length
    (record,) = [m for m in zipread.read_zip(bytes(raw), info.offset, end).members
                 if m.compressed_size == 16 * 8 * 4]
    start = record.data_offset + 8
    raw[start:start + len(payload)] = payload
    crc = struct.pack("<I", zlib.crc32(raw[record.data_offset:record.data_offset + 512]))
    raw[record.header_offset + 14:record.header_offset + 18] = crc  # the local header's
    central = raw.index(b"PK\x01\x02", record.data_offset, end)
    while raw[central + 46:central + 46 + len(record.name)] != record.name.encode():
        central = raw.index(b"PK\x01\x02", central + 4, end)
    raw[central + 16:central + 20] = crc  # and the central directory's
    (folder / DATA).write_bytes(bytes(raw))
    (again,) = [m for m in zipread.read_zip(bytes(raw), info.offset, end).members
                if m.name == record.name]
    assert zipread.crc_ok(zipread.member_bytes(bytes(raw), again, 1 << 20), again)
    return start, len(payload)


def _add_item(metadata, fqn: str, info: _StorageInfo) -> None:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    metadata.state_dict_metadata[fqn] = BytesStorageMetadata()
    metadata.storage_data[MetadataIndex(fqn)] = info


# What a user converting the folder runs: every item, bytes items through torch.load.
DCP_LOAD = ("import sys; from torch.distributed.checkpoint.format_utils import dcp_to_torch_save; "
            "dcp_to_torch_save(sys.argv[1], sys.argv[2])")


def _runs_under_dcp(folder: Path, canary: Path) -> None:
    """DCP's own loader, in a throwaway process, runs the folder's payload (the canary
    appears); the canary is removed again, so what the scan leaves is judged alone."""
    out = folder.parent / "converted.pt"
    run = subprocess.run([sys.executable, "-c", DCP_LOAD, str(folder), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert canary.exists(), f"DCP's loader did not run the payload: {run.stderr[-800:]}"
    canary.unlink()
    out.unlink(missing_ok=True)


def _not_safe(folder: Path, canary: Path) -> None:
    """DCP's loader runs the payload; the folder's scan is not safe, and inspect neither
    succeeds nor runs it."""
    _runs_under_dcp(folder, canary)
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] not in ("safe", "skipped"), scan["findings"]
    assert main(["scan", str(folder)]) != 0
    assert main(["scan", str(folder / DATA)]) != 0
    assert main(["inspect", str(folder)]) != 0
    assert not canary.exists()


def test_a_storage_info_named_by_a_dotted_qualname_is_listed(folder, canary):
    """pickle and torch's weights_only unpickler both resolve ('torch.distributed.checkpoint',
    'filesystem._StorageInfo') to _StorageInfo; a walk comparing the pair missed the item."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex

    offset, length = _hide_payload(folder, canary)
    metadata = factories.dcp_metadata(folder)
    _add_item(metadata, "evil", _StorageInfo(DATA, offset, length))
    saved = _StorageInfo.__module__, _StorageInfo.__qualname__
    _StorageInfo.__module__, _StorageInfo.__qualname__ = (
        "torch.distributed.checkpoint", "filesystem._StorageInfo")
    try:
        data = pickle.dumps(metadata, protocol=4)
    finally:
        _StorageInfo.__module__, _StorageInfo.__qualname__ = saved
    assert b"filesystem._StorageInfo" in data
    (folder / ".metadata").write_bytes(data)
    assert pickle.loads(data).storage_data[MetadataIndex("evil")].offset == offset
    assert (offset, length) in dcp_items.item_ranges(data)[DATA]
    _not_safe(folder, canary)


def _marked(metadata, info: _StorageInfo) -> bytes:
    """`metadata` pickled (protocol 2, no frames) with `info`'s state and its version (pickled
    after storage_data) left as marker strings, for a test to replace with opcodes of its own."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    class Marking(pickle.Pickler):
        def reducer_override(self, obj):
            if obj is info:
                return copyreg.__newobj__, (_StorageInfo,), "STATE_MARKER"
            return NotImplemented

    metadata.version = "AFTER_MARKER"
    _add_item(metadata, "evil", info)
    out = io.BytesIO()
    Marking(out, protocol=2).dump(metadata)
    return out.getvalue()


def _unicode(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _long(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def test_a_storage_info_state_changed_after_build_is_read_as_build_saw_it(folder, canary):
    """BUILD copies its state dict into the object; the walk kept a reference to the dict, so
    SETITEMs on it later (through the memo) moved the item the walk reported elsewhere."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex

    offset, length = _hide_payload(folder, canary)
    metadata = factories.dcp_metadata(folder)
    whole = next(iter(metadata.storage_data.values()))
    data = _marked(metadata, _StorageInfo(DATA, 0, 1))
    memo = struct.pack("<I", 100_000)
    state = (b"}r" + memo + b"(" + _unicode("relative_path") + _unicode(DATA)
             + _unicode("offset") + _long(offset) + _unicode("length") + _long(length) + b"u")
    moved = (b"j" + memo + b"(" + _unicode("offset") + _long(whole.offset)
             + _unicode("length") + _long(whole.length) + b"u")
    data = data.replace(_unicode("STATE_MARKER"), state).replace(_unicode("AFTER_MARKER"), moved)
    (folder / ".metadata").write_bytes(data)
    real = pickle.loads(data).storage_data[MetadataIndex("evil")]
    assert (real.offset, real.length) == (offset, length)
    assert (offset, length) in dcp_items.item_ranges(data)[DATA]
    _not_safe(folder, canary)


def test_a_metadata_the_walk_does_not_follow_leaves_the_data_file_unsafe(folder, canary):
    """A set (EMPTY_SET, ADDITEMS) anywhere in `.metadata` stops the walk: no ranges, so the
    data file's hidden item is a range nobody listed to the scan."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    offset, length = _hide_payload(folder, canary)
    metadata = factories.dcp_metadata(folder)
    _add_item(metadata, "evil", _StorageInfo(DATA, offset, length))
    metadata.planner_data = {"tags": {"a"}}
    data = pickle.dumps(metadata, protocol=4)
    (folder / ".metadata").write_bytes(data)
    with pytest.raises(dcp_items.NotFollowed):
        dcp_items.item_ranges(data)
    _not_safe(folder, canary)


def test_a_data_file_named_another_way_in_metadata_is_still_mapped(folder, canary):
    """DCP opens folder / relative_path: './__0_0.distcp' is the same file under another name."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    offset, length = _hide_payload(folder, canary)
    metadata = factories.dcp_metadata(folder)
    _add_item(metadata, "evil", _StorageInfo(f"./{DATA}", offset, length))
    (folder / ".metadata").write_bytes(pickle.dumps(metadata, protocol=4))
    _not_safe(folder, canary)


def test_a_listed_item_inside_a_data_file_that_is_a_pickle_is_read(folder, canary):
    """A data file that is one benign pickle whose bytes value holds the payload: the scan
    read it as a pickle and never looked at the range the `.metadata` lists inside it."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    payload = factories.call("os", "system", factories.touch_cmd(canary))
    blob = pickle.dumps(b"\0" * 8 + payload, protocol=2)
    offset = blob.index(payload)
    metadata = factories.dcp_metadata(folder)
    _add_item(metadata, "evil", _StorageInfo("__1_0.distcp", offset, len(payload)))
    (folder / ".metadata").write_bytes(pickle.dumps(metadata, protocol=4))
    (folder / "__1_0.distcp").write_bytes(blob)
    _runs_under_dcp(folder, canary)
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] not in ("safe", "skipped"), scan["findings"]
    assert main(["scan", str(folder / "__1_0.distcp")]) != 0
    assert main(["inspect", str(folder)]) != 0
    assert not canary.exists()


@pytest.mark.parametrize("absolute", [False, True])
def test_an_item_in_a_file_outside_the_folder_is_reported(folder, canary, absolute):
    """DCP opens folder / relative_path, so '../evil.distcp' or an absolute path reads a file
    the folder's scan never sees: the `.metadata` that lists it is not safe."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    payload = factories.call("os", "system", factories.touch_cmd(canary))
    evil = folder.parent / "evil.distcp"
    evil.write_bytes(payload)
    metadata = factories.dcp_metadata(folder)
    name = str(evil) if absolute else "../evil.distcp"
    _add_item(metadata, "evil", _StorageInfo(name, 0, len(payload)))
    (folder / ".metadata").write_bytes(pickle.dumps(metadata, protocol=4))
    _runs_under_dcp(folder, canary)
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] not in ("safe", "skipped"), scan["findings"]
    assert "dcp-outside-file" in {f["code"] for f in scan["findings"]}
    assert main(["scan", str(folder)]) != 0
    assert main(["inspect", str(folder)]) != 0
    assert not canary.exists()


def _tar_polyglot(canary: Path) -> bytes:
    """A valid safetensors file (no tensors) whose first 512 bytes are also a tar header that
    Python's tarfile accepts (checksum written '0_NNNNNN'): torch.load's legacy path opens it
    as its tar format and unpickles the `storages` member, which holds the payload."""
    blocks = 3
    length = 512 * blocks - 8  # the data region starts on a tar block
    head = bytearray(b" " * 512)
    head[:8] = struct.pack("<Q", length)
    opening = b'{"__metadata__":{"a":"'
    head[8:8 + len(opening)] = opening
    size = b"%011o " % (512 * (blocks - 1))  # the first member is the rest of the header
    head[100:157] = b"0000644 0000000 0000000 " + size + b"00000000000 " + b" " * 8 + b"0"
    checksum = sum(head)  # with the checksum field as spaces, as tarfile computes it
    head[148:156] = b"0_%06o" % checksum
    header = bytes(head[8:]) + b" " * (length - 504 - 3) + b'"}}'
    member = tarfile.TarInfo("storages")
    payload = factories.call("os", "system", factories.touch_cmd(canary))
    member.size = len(payload)
    tail = member.tobuf(tarfile.USTAR_FORMAT) + payload + b"\0" * (-len(payload) % 512 + 1024)
    return bytes(head[:8]) + header + tail


def test_a_safetensors_file_that_tarfile_reads_as_torchs_tar_format_is_scanned_as_one(
        tmp_path, canary):
    """`formats.is_tar` accepts octal digits, spaces and NULs in the checksum field; Python's
    tarfile (torch.load's legacy path) also takes int('0_123456', 8)."""
    path = tmp_path / "model.pt"
    path.write_bytes(_tar_polyglot(canary))
    with tarfile.open(path) as tar:
        assert "storages" in tar.getnames()
    assert json.loads(path.read_bytes()[8:512 * 3]) == {"__metadata__": {"a": mock.ANY}}
    scan = scan_file(path)
    assert scan.verdict == "dangerous", scan.to_json()
    assert main(["scan", str(path)]) == 2
    assert main(["inspect", str(path)]) == 2
    assert not canary.exists()


def _safetensors(header: bytes, data: bytes = b"\0" * 8) -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@pytest.mark.parametrize("entry", [
    b'{"dtype":"F32","shape":[true],"data_offsets":[0,4]}',  # True == 1 to Python
    b'{"dtype":"F32","shape":[2],"data_offsets":[false,8]}',
    b'{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}',  # a float equal to an int
    b'{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}',
    b'{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}',
])
def test_safetensors_numbers_that_only_python_calls_integers_are_refused(tmp_path, entry):
    """serde (the safetensors library) reads no boolean or float as a usize; a reader that
    took them would check one tensor while another reader refuses or reads another."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(_safetensors(b'{"w":' + entry + b"}"))
    with open(path, "rb") as fh:
        header = safetensors_header.read_header(fh, path.stat().st_size)
    assert header.refusal() is not None and not header.entries
    assert scan_file(path).verdict == "suspicious"
    assert main(["inspect", str(path)]) != 0


def test_a_safetensors_header_with_whitespace_before_its_brace_is_refused(tmp_path):
    """json.loads skips leading whitespace (and the scan's sniff would not see '{' at byte 8)."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(_safetensors(b' {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'))
    with open(path, "rb") as fh:
        header = safetensors_header.read_header(fh, path.stat().st_size)
    assert header.error is not None
    assert main(["inspect", str(path)]) != 0
