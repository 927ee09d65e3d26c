"""The static scan of a torch.distributed.checkpoint folder reads the archives its `.metadata`
lists, and still finds a payload wherever DCP could be made to load one.

DCP loads the bytes at each (offset, length) its `.metadata` gives; a bytes item with
weights_only=False. So the scan checks each listed range is one whole archive (its directory
read from its end, its tensor data not searched) and reads in full every byte no checked
archive covers, and every listed range that is not one whole archive.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import factories
import pytest
import torch

from inspector.cli import main
from inspector.formats.archives import zipread
from inspector.layout.dcp_items import NotFollowed, item_ranges
from inspector.layout.torch_save import describe_archive
from inspector.scan.dcp_folder import scan_folder
from inspector.scan.engine import scan_file, scan_paths

DATA = factories.DCP_DATA


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A real dcp.save folder of a nested state dict of several dtypes and plain values."""
    return factories.dcp_save(factories.dcp_state(), tmp_path / "ckpt")



def _list_item(folder: Path, fqn: str, offset: int, length: int) -> None:
    """Make `.metadata` list a bytes item at [offset, offset + length) of the data file, as an
    attacker would to have DCP load what lies there."""
    # imported here: torch.distributed.checkpoint adds over a second to every collection
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    metadata = factories.dcp_metadata(folder)
    metadata.state_dict_metadata[fqn] = BytesStorageMetadata()
    metadata.storage_data[MetadataIndex(fqn)] = _StorageInfo(DATA, offset, length)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))


def _refused(folder: Path, canary: Path) -> None:
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] == "dangerous", scan["findings"]
    assert any(g["module"] in ("os", "posix") for g in scan["globals"])
    assert main(["inspect", str(folder)]) == 2
    assert not canary.exists()


def test_the_listed_ranges_are_the_archives_dcp_wrote(folder):
    data = (folder / DATA).read_bytes()
    listed = item_ranges((folder / ".metadata").read_bytes())
    assert set(listed) == {DATA}
    spans = sorted((o, o + n) for o, n in listed[DATA])
    assert spans == zipread.archive_spans(data)
    assert all(zipread.is_whole_archive(data, s, e) for s, e in spans)


def test_a_real_folder_scans_safe_without_searching_its_data_files(folder, monkeypatch):
    plain = scan_file(folder / DATA)
    assert (plain.format, plain.verdict) == ("distcp", "safe")

    def no_search(buf):
        raise AssertionError("the data file was searched for archive ends")

    monkeypatch.setattr(zipread, "archive_spans", no_search)
    scan = scan_folder(folder).to_json()
    (data,) = [f for f in scan["files"] if f["path"].endswith(DATA)]
    assert (data["format"], data["verdict"]) == ("distcp", "safe"), data["findings"]
    assert {f["code"] for f in data["findings"]} == {f.code for f in plain.findings}
    assert data["weights_only_ok"] == plain.weights_only_ok


def test_scan_dir_and_a_data_file_named_alone_use_the_listed_archives(folder, monkeypatch,
                                                                      capsys):
    def no_search(buf):
        raise AssertionError("the data file was searched for archive ends")

    monkeypatch.setattr(zipread, "archive_spans", no_search)
    results = {Path(r.path).name: r for r in scan_paths([folder])}
    assert (results[DATA].format, results[DATA].verdict) == ("distcp", "safe")
    assert main(["scan", str(folder / DATA)]) == 0
    assert main(["scan", str(folder)]) == 0


def test_a_data_file_over_a_mebibyte_is_read_through_its_mapping_too(tmp_path, monkeypatch,
                                                                     canary):
    """Files over scan.SMALL_FILE are memory-mapped: read sparsely, a payload still found."""
    state = {"w": torch.zeros(1024, 1024), "b": torch.ones(300, 1024), "step": 3}
    folder = factories.dcp_save(state, tmp_path / "big")
    assert (folder / DATA).stat().st_size > 5 << 20
    monkeypatch.setattr(zipread, "archive_spans", lambda buf: [])  # no search: hints only
    (data,) = [f for f in scan_folder(folder).to_json()["files"] if f["path"].endswith(DATA)]
    assert (data["format"], data["verdict"]) == ("distcp", "safe"), data["findings"]
    payload = factories.call("os", "system", factories.touch_cmd(canary))
    with open(folder / DATA, "ab") as fh:
        fh.write(payload)
    assert scan_folder(folder).verdict == "dangerous"


def test_a_pickle_appended_after_the_last_archive_is_found(folder, canary):
    payload = factories.call("os", "system", factories.touch_cmd(canary))
    size = (folder / DATA).stat().st_size
    with open(folder / DATA, "ab") as fh:
        fh.write(payload)
    # unlisted: bytes no archive covers are read in full, with or without the metadata
    assert scan_file(folder / DATA).verdict == "dangerous"
    _refused(folder, canary)
    _list_item(folder, "evil", size, len(payload))  # listed, DCP would torch.load it
    _refused(folder, canary)


def test_a_pickle_inserted_between_two_archives_is_found(folder, canary):
    payload = factories.call("os", "system", factories.touch_cmd(canary))
    data = (folder / DATA).read_bytes()
    metadata = factories.dcp_metadata(folder)
    cut = sorted(info.offset for info in metadata.storage_data.values())[1]
    (folder / DATA).write_bytes(data[:cut] + payload + data[cut:])
    for info in metadata.storage_data.values():
        if info.offset >= cut:
            info.offset += len(payload)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    _refused(folder, canary)
    _list_item(folder, "evil", cut, len(payload))
    _refused(folder, canary)


def test_an_item_listed_inside_another_items_tensor_data_is_read(folder, canary):
    payload = factories.call("os", "system", factories.touch_cmd(canary))
    metadata = factories.dcp_metadata(folder)
    info = next(v for k, v in metadata.storage_data.items() if k.fqn == "model.embed.weight")
    raw = bytearray((folder / DATA).read_bytes())
    (layout,) = describe_archive(bytes(raw), info.offset, info.offset + info.length)
    start = layout.data_offset
    assert len(payload) < 16 * 8 * 4  # inside the tensor's 512 bytes
    raw[start:start + len(payload)] = payload
    (folder / DATA).write_bytes(bytes(raw))
    _list_item(folder, "evil", start, len(payload))
    _refused(folder, canary)


def test_a_listed_range_past_the_file_or_metadata_not_followed_falls_back(folder, canary):
    size = (folder / DATA).stat().st_size
    _list_item(folder, "past", size - 10, 100)
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] == "suspicious"
    assert "distcp-unlisted-bytes" in {f["code"] for f in scan["findings"]}
    with pytest.raises(NotFollowed):  # a set: an opcode the walk does not follow
        item_ranges(pickle.dumps({"relative_path", "offset"}, protocol=4))
