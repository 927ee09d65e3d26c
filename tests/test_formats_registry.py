"""The format registry (`inspector.formats`): every list derives from it, the desktop files
are what it renders, and DEVELOPING.md's "Add a format" recipe works end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from inspector import formats
from inspector.core.vocabulary import Format, Severity
from inspector.formats import desktop, registry
from inspector.formats.archives import decompress
from inspector.formats.sniffing import COMPRESSION_MAGIC
from inspector.scan import readings
from inspector.scan.engine import scan_file

ROOT = Path(__file__).resolve().parent.parent
TOY_MAGIC = b"TOYF\x01\x00"


def test_the_checked_in_desktop_files_are_what_the_registry_renders():
    assert (ROOT / desktop.MIME_FILE).read_text() == desktop.mime_xml(), (
        "run scripts/gen_desktop_files.py")
    entry = (ROOT / desktop.DESKTOP_FILE).read_text()
    assert entry == desktop.desktop_entry(entry), "run scripts/gen_desktop_files.py"


def test_every_first_guess_of_the_built_in_chain_has_one_record_that_scans_it():
    chain = {"zip", "npy", "7z", "tar", "pytorch-legacy", "safetensors", "pickle", "pickle?",
             "unknown", *(f"compressed:{k}" for k in COMPRESSION_MAGIC.values()),
             *(f"compressed:{k}" for k in decompress.TRIED_KINDS)}
    for kind in chain:
        owners = [s for s in formats.all_specs() if kind in s.kinds]
        assert len(owners) == 1 and owners[0].scan is not None, kind


def test_the_lists_derive_from_the_records():
    from inspector.cli.manifest_cmd import CHECKPOINT_FORMATS
    from inspector.report.checklist import SAFE_FORMATS
    from inspector.shards.shard_set import CHECKPOINT_SUFFIXES

    assert set(CHECKPOINT_SUFFIXES) == {".safetensors", ".pt", ".pth", ".bin", ".ckpt"}
    assert SAFE_FORMATS == (Format.SAFETENSORS,)
    assert Format.DCP not in CHECKPOINT_FORMATS and Format.PYTORCH_ZIP in CHECKPOINT_FORMATS
    assert not any(formats.spec_of(f).holds_code for f in SAFE_FORMATS)
    assert all(formats.spec_of(f).holds_code for f in (Format.PICKLE, Format.PYTORCH_ZIP,
                                                       Format.TORCHSCRIPT, Format.NPY))


def sniff_toy(head: bytes, size: int) -> bool:
    """The toy's magic number."""
    return head.startswith(TOY_MAGIC)


def scan_toy(ctx, buf) -> None:
    """The toy's own check: a count byte past the file's end is a finding."""
    if buf[6] > len(buf):
        ctx.find(Severity.SUSPICIOUS, "toy-count", f"count {buf[6]} runs past the file")


def read_toy(path: str) -> dict:
    """The toy's tensors: its bytes after the header, as one uint8 tensor."""
    import torch

    data = Path(path).read_bytes()[8:]
    return {"payload": torch.frombuffer(bytearray(data), dtype=torch.uint8)}


@pytest.fixture
def toy(monkeypatch):
    """A format module's one registration, on a copy of the registry (restored afterwards).
    The vocabulary is closed, so the toy borrows the GGUF member and takes its place."""
    monkeypatch.setattr(registry, "_SPECS", {f: s for f, s in registry._SPECS.items()
                                             if f != Format.GGUF})
    return formats.register(formats.FormatSpec(
        Format.GGUF, "Toy tensor file", (".toy",), "application/x-toy", loaders=("toy.load",),
        sniff=sniff_toy, scan=scan_toy, tensors=f"{__name__}:read_toy"))


def test_a_registered_format_reaches_every_list_the_scan_and_the_worker(toy, tmp_path):
    from inspector.sandbox.host.client import check_loadable
    from inspector.tensors.by_format import load_request

    assert "*.toy" in formats.dialog_filter()
    assert formats.mime_types()["application/x-toy"] == ("Toy tensor file", (".toy",))
    assert "application/x-toy;" in desktop.desktop_entry("MimeType=\n")
    assert '<glob pattern="*.toy"/>' in desktop.mime_xml()
    path = tmp_path / "model.toy"
    path.write_bytes(TOY_MAGIC + bytes([200, 0]) + bytes(range(16)))
    assert formats.detect(path.read_bytes()[:formats.HEAD_BYTES], 24) is toy
    with readings.using(None):
        res = scan_file(path)
    assert res.format == Format.GGUF and res.error is None
    assert [f.code for f in res.findings] == ["toy-count"] and res.verdict == "suspicious"
    check_loadable(res, [], False)  # a suspicious file of a loadable format
    loaded = load_request({"path": str(path), "format": res.format})
    assert loaded["payload"].tolist() == list(range(16))

