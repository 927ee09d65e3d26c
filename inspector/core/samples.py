"""Built-in samples: a small benign checkpoint and a harmless malicious demo.

Both are written as the exact bytes `torch.save` produces (a zip archive holding a protocol-2
pickle and one record per storage), so the app can offer them without importing torch. The
pickle opcodes are emitted by hand: the standard pickler would import `torch` to check the
globals it writes.
"""

from __future__ import annotations

import io
import os
import random
import struct
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from inspector.core.atomic import write_bytes_atomic

BENIGN_NAME = "sample-benign.pt"
MALICIOUS_NAME = "sample-malicious-demo.pt"
MARKER_NAME = "MALICIOUS_DEMO_PAYLOAD_RAN"
"""The only thing the demo's payload does, were it ever run, is create this empty file."""

_ALIGNMENT = 64
_PADDING_EXTRA_ID = 0x4246  # the extra-field id torch's writer uses for record padding


@dataclass(frozen=True)
class Samples:
    """Paths of the written samples and of the marker the demo payload would create."""

    benign: Path
    malicious: Path
    marker: Path


@dataclass(frozen=True)
class _Tensor:
    key: str
    storage: str  # torch storage class name, e.g. "FloatStorage"
    fmt: str  # struct format of one element
    shape: tuple[int, ...]
    values: tuple[float | int, ...]


def default_cache_dir() -> Path:
    """The per-user cache folder of the app, following each platform's convention."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "checkpoint-inspector"


def write_samples(folder: str | os.PathLike[str] | None = None) -> Samples:
    """Write both samples into `folder` (default: the cache folder's `samples/`)."""
    target = Path(folder) if folder is not None else default_cache_dir() / "samples"
    target.mkdir(parents=True, exist_ok=True)
    marker = target / MARKER_NAME
    tensors = _benign_tensors()
    benign_pickle = _training_checkpoint(tensors, extra=b"")
    payload = _str("payload") + _call("builtins", "open", _str(str(marker)) + _str("w"))
    samples = Samples(target / BENIGN_NAME, target / MALICIOUS_NAME, marker)
    _write_if_changed(samples.benign, _archive("sample_benign", benign_pickle, tensors))
    malicious_pickle = _training_checkpoint(tensors, extra=payload)
    _write_if_changed(samples.malicious, _archive("sample_malicious", malicious_pickle, tensors))
    return samples


def _benign_tensors() -> list[_Tensor]:
    """A tiny two-layer MLP with batch norm, with reproducible weights."""
    rng = random.Random(20261129)

    def floats(*shape: int, scale: float = 0.5) -> tuple[float, ...]:
        n = _numel(shape)
        return tuple(round(rng.gauss(0.0, scale), 6) for _ in range(n))

    return [
        _Tensor("encoder.weight", "FloatStorage", "<f", (16, 8), floats(16, 8)),
        _Tensor("encoder.bias", "FloatStorage", "<f", (16,), floats(16, scale=0.1)),
        _Tensor("norm.weight", "FloatStorage", "<f", (16,), (1.0,) * 16),
        _Tensor("norm.bias", "FloatStorage", "<f", (16,), (0.0,) * 16),
        _Tensor("norm.num_batches_tracked", "LongStorage", "<q", (), (1200,)),
        _Tensor("decoder.weight", "FloatStorage", "<f", (4, 16), floats(4, 16)),
        _Tensor("decoder.bias", "FloatStorage", "<f", (4,), floats(4, scale=0.1)),
    ]


def _training_checkpoint(tensors: list[_Tensor], extra: bytes) -> bytes:
    """Pickle {"model": OrderedDict(state dict), "epoch": 12, "lr": 0.001, ...extra}."""
    state = b"".join(
        _str(t.key) + _rebuild_tensor(str(i), t) for i, t in enumerate(tensors)
    )
    items = (
        _str("model")
        + _ordered_dict(state)
        + _str("epoch")
        + _int(12)
        + _str("lr")
        + b"G"
        + struct.pack(">d", 0.001)
        + extra
    )
    return b"\x80\x02" + b"}" + b"(" + items + b"u" + b"."


def _archive(name: str, data_pkl: bytes, tensors: list[_Tensor]) -> bytes:
    """A zip archive laid out as torch.save writes it, records aligned to 64 bytes."""
    members: list[tuple[str, bytes]] = [
        ("data.pkl", data_pkl),
        (".format_version", b"1"),
        (".storage_alignment", str(_ALIGNMENT).encode()),
        ("byteorder", b"little"),
    ]
    members += [
        (f"data/{i}", struct.pack(f"<{len(t.values)}{t.fmt[1]}", *t.values))
        for i, t in enumerate(tensors)
    ]
    members += [("version", b"3\n"), (".data/serialization_id", b"0" * 40)]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for member, data in members:
            info = zipfile.ZipInfo(f"{name}/{member}", date_time=(2026, 1, 1, 0, 0, 0))
            if member.startswith("data/"):
                info.extra = _padding(buf.tell(), len(info.filename))
            zf.writestr(info, data)
    return buf.getvalue()


def _padding(header_offset: int, name_len: int) -> bytes:
    """An extra field that puts the record's first byte on an alignment boundary."""
    start = header_offset + 30 + name_len + 4
    pad = -start % _ALIGNMENT
    return struct.pack("<HH", _PADDING_EXTRA_ID, pad) + b"Z" * pad


def _write_if_changed(path: Path, data: bytes) -> None:
    """Rewrite a sample only when its bytes differ (an older version, or tampering)."""
    if path.is_file() and path.read_bytes() == data:
        return
    write_bytes_atomic(path, data, overwrite=True)


def _rebuild_tensor(storage_key: str, t: _Tensor) -> bytes:
    """torch._utils._rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict())."""
    persistent_id = _tuple(
        _str("storage") + _global("torch", t.storage) + _str(storage_key) + _str("cpu")
        + _int(len(t.values))
    )
    args = (
        persistent_id + b"Q" + _int(0) + _tuple(*map(_int, t.shape))
        + _tuple(*map(_int, _contiguous_stride(t.shape))) + b"\x89" + _ordered_dict(b"")
    )
    return _global("torch._utils", "_rebuild_tensor_v2") + _tuple(args) + b"R"


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, step = [], 1
    for dim in reversed(shape):
        stride.append(step)
        step *= dim
    return tuple(reversed(stride))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def _call(module: str, name: str, args: bytes) -> bytes:
    return _global(module, name) + _tuple(args) + b"R"


def _ordered_dict(items: bytes) -> bytes:
    empty = _global("collections", "OrderedDict") + b")R"
    return empty + (b"(" + items + b"u" if items else b"")


def _tuple(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"(" + body + b"t" if body else b")"


def _str(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(n: int) -> bytes:
    if 0 <= n < 0x100:
        return b"K" + bytes([n])
    if 0 <= n < 0x10000:
        return b"M" + struct.pack("<H", n)
    return b"J" + struct.pack("<i", n)
