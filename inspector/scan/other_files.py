"""Files positively known to be something other than a checkpoint: text, JSON, images, media,
protocol buffers (tokenizer models), HDF5. GGUF and ONNX models are model files with their own
risks: their format modules (`formats.gguf`, `formats.onnx`) recognise and scan them.

A folder scan skips a file only when it is identified here *and* no loader's reading of it
yields a pickle or an archive; a file that is merely unreadable is an error, never skipped
(`scan.scan_found`).
"""

from __future__ import annotations

import json
import os

MAX_TEXT_BYTES = 64 << 20  # a text file longer than this is identified by its first part
_HEAD = 1 << 16

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "png image"), (b"\xff\xd8\xff", "jpeg image"),
    (b"GIF87a", "gif image"), (b"GIF89a", "gif image"), (b"BM", "bmp image"),
    (b"II*\x00", "tiff image"), (b"MM\x00*", "tiff image"), (b"\x00\x00\x01\x00", "icon"),
    (b"%PDF-", "pdf document"), (b"fLaC", "flac audio"), (b"OggS", "ogg media"),
    (b"ID3", "mp3 audio"), (b"\x89HDF\r\n\x1a\n", "hdf5 file"),
)


def identify(path: str | os.PathLike) -> str | None:
    """What the file is when it is positively not a checkpoint, else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
            if len(head) == _HEAD:
                rest = fh.read(MAX_TEXT_BYTES - _HEAD)
                whole = head + rest
            else:
                whole = head
    except OSError:
        return None
    return identify_bytes(whole)


def identify_bytes(data: bytes) -> str | None:
    """`identify` for content in memory (its first MAX_TEXT_BYTES at most)."""
    if not data:
        return "empty file"
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return what
    if data[:4] == b"RIFF" and data[8:12] in (b"WAVE", b"WEBP", b"AVI "):
        return "riff media"
    if data[4:8] == b"TFL3":
        return "tflite model"
    if b"\x00" not in data:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        try:
            json.loads(text)
            return "json"
        except (ValueError, RecursionError):
            return "text"
    return "protocol buffer" if _protobuf(data[:_HEAD], len(data) <= _HEAD) else None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _protobuf(data: bytes, whole: bool) -> bool:
    """Whether `data` reads as protobuf fields end to end (a cut prefix may end mid-field)."""
    pos, fields = 0, 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            wire, number = key & 7, key >> 3
            if number == 0 or wire not in (0, 1, 2, 5):
                return False
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                size, pos = _varint(data, pos)
                pos += size
            fields += 1
    except ValueError:
        return not whole and fields >= 2
    return fields >= 2 and (pos == len(data) or not whole)
