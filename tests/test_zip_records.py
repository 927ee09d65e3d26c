"""`sandbox.worker.zip_records.torch_refuses` is held to torch's own zip reader: wherever it is
certain that torch hands out nothing, torch's `PyTorchFileReader` hands out nothing, on the
corpus's damaged archives and on thousands of mutants (truncations, every byte of the central
directory and end record changed, names without a folder or a version record, names in other
cases, duplicate names, directory offsets moved, data descriptors, deflated records, zip64
records, bytes before and after). torch runs in the test."""

from __future__ import annotations

import io
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from inspector.sandbox.worker.zip_records import torch_pickles, torch_reading, torch_refuses

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "picklescan"
PICKLE = b"\x80\x02}q\x00."


class _Unseekable(io.RawIOBase):
    """A stream zipfile cannot seek back in: it writes data descriptors (flag bit 3)."""

    def __init__(self) -> None:
        self.out = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.out += b
        return len(b)


def _zip(names: list[str], method: int = zipfile.ZIP_STORED, descriptors: bool = False) -> bytes:
    sink = _Unseekable() if descriptors else io.BytesIO()
    with zipfile.ZipFile(sink, "w", method) as z:
        for name in names:
            z.writestr(name, b"3\n" if name.endswith("version") else PICKLE)
    return bytes(sink.out) if descriptors else sink.getvalue()


def _torch_save() -> bytes:
    import torch

    out = io.BytesIO()
    torch.save({"w": torch.ones(2)}, out)
    return out.getvalue()


def _with_zip64_records(data: bytes) -> bytes:
    """`data` with a zip64 end record and locator before its end record, as zip64 writers
    place them."""
    end = data.rfind(b"PK\x05\x06")
    _, _, _, total, size, start = struct.unpack_from("<HHHHII", data, end + 4)
    record = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, total, total, size,
                         start)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, end, 1)
    return data[:end] + record + locator + data[end:]


def _bases() -> list[bytes]:
    saved = _torch_save()
    return [
        saved,
        _with_zip64_records(saved),
        _zip(["archive/data.pkl", "archive/version"]),
        _zip(["archive/data.pkl", "archive/.data/version"]),
        _zip(["archive/data.pkl", "ARCHIVE/VERSION"]),
        _zip(["archive/data.pkl", "archive/data.pkl", "archive/version"]),
        _zip(["archive/data.pkl", "archive/version"], zipfile.ZIP_DEFLATED),
        _zip(["archive/data.pkl", "archive/version"], descriptors=True),
        _zip(["archive/data.pkl"]),
        _zip(["data.pkl", "archive/version"]),
        _zip(["archive/data.pkl", "archive/.data/serialization_id", "archive/version"]),
        _zip(["a/data.pkl", "a/version", "b/version"]),
    ]


def _mutants(data: bytes):
    """Cuts, a byte changed anywhere from the directory on, the directory offset moved, and
    bytes around the archive."""
    end = data.rfind(b"PK\x05\x06")
    start = struct.unpack_from("<I", data, end + 16)[0]
    for cut in range(0, len(data), max(1, len(data) // 300)):
        yield data[:cut]
    for i in range(min(start, end), len(data)):
        for value in {0, 0xFF, data[i] ^ 0x20, ord("/"), data[i] + 1 & 0xFF}:
            yield data[:i] + bytes([value]) + data[i + 1:]
    for delta in (-46, -1, 1, 46):
        yield data[:end + 16] + struct.pack("<I", (start + delta) % 2**32) + data[end + 20:]
    yield data + b"\0" * 30
    yield data + b"PK\x05\x06" + b"\0" * 18
    yield b"PK\x03\x04" + b"\0" * 26 + data


def _agrees(data: bytes) -> bool | None:
    """None where torch_refuses is not certain, else whether torch's reader agrees."""
    if not torch_refuses(data):
        return None
    return list(torch_reading(data)) == []


def test_certain_refusals_are_torchs():
    pytest.importorskip("torch")
    certain = disagreed = 0
    for base in _bases():
        for mutant in _mutants(base):
            verdict = _agrees(mutant)
            certain += verdict is not None
            disagreed += verdict is False
    assert disagreed == 0
    assert certain > 1000  # the shortcut is taken, not only ever declined


def test_archives_torch_reads_go_to_torch():
    pytest.importorskip("torch")
    saved = _torch_save()
    assert not torch_refuses(saved)
    assert [name for name, _ in torch_pickles(saved)] == ["data.pkl"]


def test_the_corpus_damaged_archives_are_certain():
    if not CORPUS.is_dir():
        pytest.skip(f"outside corpus not found at {CORPUS}")
    pytest.importorskip("torch")
    archives = sorted(CORPUS.rglob("*.zip"))
    assert archives
    for path in archives:
        data = path.read_bytes()
        assert torch_refuses(data), path.name
        assert list(torch_reading(data)) == [], path.name


def test_a_certain_refusal_imports_no_torch(python_exe):
    data = _zip(["data.pkl", "archive/version"])  # the first name lies in no folder
    code = ("import sys; from inspector.sandbox.worker.zip_records import torch_pickles;"
            f"assert list(torch_pickles({data!r})) == []; print('torch' in sys.modules)")
    out = subprocess.run([python_exe, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"
