"""Format detection from a file's bytes (never its name), and header parsers needing no pickle.

Format names (the `format` key of the scan contract):

- `pytorch-zip`: zip archive with `<prefix>/data.pkl` (what `torch.save` writes since 1.6)
- `torchscript`: zip archive with `constants.pkl` and `code/` (what `torch.jit.save` writes)
- `torch-export`: zip archive with `archive_format` and `models/` (what `torch.export.save`
  writes, a `.pt2`)
- `pytorch-legacy`: stream of pickles starting with torch's magic number (pre-1.6 `torch.save`)
- `pickle`: any other pickle stream, protocol 0-5 (one or several pickles back to back)
- `pytorch-tar`: tar archive with torch's legacy `storages`/`tensors`/`pickle` members
  (torch.load reads it, never with weights_only=True); `tar`: any other tar archive
- `compressed-pickle`: a gzip, bz2, xz, LZMA-alone, raw zlib, lz4 or zstd stream (every member
  of a multi-member file) whose content is a pickle (joblib style)
- `distcp`: back-to-back torch.save zip archives (torch.distributed.checkpoint's data files)
- `safetensors`: u64 header length, JSON header, data buffer
- `npy`: NumPy array file; `npz`: zip archive of `.npy` members
- `zip`: any other zip archive (its members are scanned by content)
- `7z`: 7-Zip archive: members cannot be listed, its decoded LZMA streams are searched
- `unknown`: none of the above
"""

from __future__ import annotations

import itertools
import math
import re
import struct
from dataclasses import dataclass, field

from inspector.core.dtypes import SAFETENSORS_ITEMSIZE_BITS

TORCH_MAGIC_PICKLE = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e"
NPY_MAGIC = b"\x93NUMPY"
COMPRESSION_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz",
                     b"\x04\x22\x4d\x18": "lz4", b"\x28\xb5\x2f\xfd": "zstd",
                     b"\x5d\x00": "lzma", b"\x78": "zlib"}
_COMPRESSION_FIRST = frozenset(m[:1] for m in COMPRESSION_MAGIC)
SEVEN_ZIP_MAGIC = b"7z\xbc\xaf\x27\x1c"
# Opcodes a protocol 0/1 pickle (no PROTO opcode) can start with.
PICKLE_FIRST_BYTES = frozenset(b"(.0FIJKLMNPQRSTUVXabcdegijlopqrstu}])G")

SAFETENSORS_MAX_HEADER = 100_000_000


def sniff(head: bytes, size: int) -> str:
    """First guess from the leading bytes; zip and pickle kinds are refined by the scanner."""
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.startswith(SEVEN_ZIP_MAGIC):
        return "7z"
    if head[:1] in _COMPRESSION_FIRST:
        for magic, kind in COMPRESSION_MAGIC.items():
            if head.startswith(magic) and (kind != "zlib" or int.from_bytes(head[:2]) % 31 == 0):
                return "compressed:" + kind
    if is_tar(head):
        return "tar"
    if head.startswith(TORCH_MAGIC_PICKLE):
        return "pytorch-legacy"
    if len(head) >= 9 and head[8:9] == b"{":
        (n,) = struct.unpack_from("<Q", head)
        if n <= min(size - 8, SAFETENSORS_MAX_HEADER):
            return "safetensors"
    if head[:1] == b"\x80" and len(head) > 1 and head[1] <= 5:
        return "pickle"
    if head[:1] and head[0] in PICKLE_FIRST_BYTES:
        return "pickle?"
    return "unknown"


def is_tar(head: bytes) -> bool:
    """Whether a 512-byte block is a tar header (its checksum holds, as tarfile checks)."""
    if len(head) < 512 or head[0] == 0 or head[148:156].translate(None, b"01234567 \x00"):
        return False  # the checksum field holds octal digits, spaces and NULs only
    field = head[148:156].split(b"\x00", 1)[0].strip()
    try:
        stored = int(field, 8)
    except ValueError:
        return False
    computed = sum(head[:148]) + 8 * 32 + sum(head[156:512])
    signed = computed - 256 * sum(b >= 128 for b in head[:148] + head[156:512])
    return stored in (computed, signed)


def zip_kind(names: list[str]) -> str:
    """Which kind of zip archive a list of member names is."""
    # torch's reader finds members case-insensitively (miniz), so "A/DATA.PKL" is data.pkl
    if any(n.lower() == "data.pkl" or n.lower().endswith("/data.pkl") for n in names):
        if any(n.endswith("constants.pkl") for n in names) and any("/code/" in n for n in names):
            return "torchscript"
        return "pytorch-zip"
    if any(n.endswith("constants.pkl") for n in names):
        return "torchscript"
    if any(n.endswith("/archive_format") for n in names) and any("/models/" in n for n in names):
        return "torch-export"
    if names and all(n.endswith(".npy") for n in names):
        return "npz"
    return "zip"


@dataclass
class HeaderCheck:
    """Problems found in a safetensors or npy header: (severity, code, message)."""

    problems: list[tuple[str, str, str]] = field(default_factory=list)
    error: str | None = None
    info: dict = field(default_factory=dict)

    def add(self, severity: str, code: str, message: str) -> None:
        """Record one problem."""
        self.problems.append((severity, code, message))


def check_safetensors(buf, size: int) -> HeaderCheck:
    """Validate a safetensors header: JSON, dtypes, shapes, offsets in bounds, no overlap."""
    import json

    out = HeaderCheck()
    (n,) = struct.unpack_from("<Q", buf)
    try:
        header = json.loads(bytes(buf[8:8 + n]))
    except (ValueError, UnicodeDecodeError) as exc:
        out.error = f"safetensors header is not valid JSON: {exc}"
        return out
    if not isinstance(header, dict):
        out.error = "safetensors header is not a JSON object"
        return out
    data_len = size - 8 - n
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
        out.add("suspicious", "safetensors-metadata", "__metadata__ must map text to text")
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict):
            out.add("suspicious", "safetensors-entry", f"tensor {name!r} entry is not an object")
            continue
        dtype, shape, offs = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        bits = SAFETENSORS_ITEMSIZE_BITS.get(dtype)
        valid_shape = isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        valid_offs = isinstance(offs, list) and len(offs) == 2 and all(
            isinstance(o, int) and not isinstance(o, bool) for o in offs)
        if bits is None or not valid_shape or not valid_offs:
            out.add("suspicious", "safetensors-entry",
                    f"tensor {name!r} has an invalid dtype, shape or data_offsets")
            continue
        begin, end = offs
        if not 0 <= begin <= end <= data_len:
            out.add("suspicious", "safetensors-bounds",
                    f"tensor {name!r} offsets [{begin}, {end}] outside the {data_len}-byte buffer")
            continue
        expected = (math.prod(shape) * bits + 7) // 8
        if end - begin != expected:
            out.add("suspicious", "safetensors-size",
                    f"tensor {name!r} spans {end - begin} bytes, {dtype}{shape} needs {expected}")
        spans.append((begin, end, name))
    spans.sort()
    for (_, e1, n1), (b2, _, n2) in itertools.pairwise(spans):
        if b2 < e1:
            out.add("suspicious", "safetensors-overlap", f"tensors {n1!r} and {n2!r} overlap")
    covered = spans[-1][1] if spans else 0
    if covered < data_len:
        out.add("info", "safetensors-trailing",
                f"{data_len - covered} bytes after the last tensor are not part of any tensor")
    out.info["tensors"] = len(header)
    return out


def parse_npy_header(buf) -> tuple[dict, int]:
    """The header dict of a .npy file and the offset where its data starts; ValueError if bad."""
    import ast

    if bytes(buf[:6]) != NPY_MAGIC or len(buf) < 10:
        raise ValueError("not a .npy file")
    major = buf[6]
    if major == 1:
        (hlen,) = struct.unpack_from("<H", buf, 8)
        start = 10
    elif major in (2, 3):
        (hlen,) = struct.unpack_from("<I", buf, 8)
        start = 12
    else:
        raise ValueError(f"unknown .npy format version {major}")
    text = bytes(buf[start:start + hlen]).decode("utf-8" if major == 3 else "latin-1")
    header = ast.literal_eval(text)  # literals only: nothing can run
    if not isinstance(header, dict) or "descr" not in header:
        raise ValueError(".npy header lacks 'descr'")
    return header, start + hlen


# NumPy type strings that hold plain values (bool, numbers, bytes, text, void, datetimes);
# anything else ("O", "object", "i4,O", "(2,)O", unknown codes) may hold Python objects.
_NPY_PLAIN = re.compile(r"[<>|=!]?(?:[?bBhHiIlLqQpPefdgFDGSUVcu]\d*|[mM]8(?:\[\w+\])?)")


def npy_has_objects(descr: object) -> bool:
    """Whether a .npy `descr` may hold Python objects (then NumPy stores the data as a pickle).

    Follows `numpy.lib.format.descr_to_dtype`: a type string, a `(descr, shape)` subarray, or a
    list of `(name, descr[, shape])` fields, nested to any depth; anything it cannot prove plain
    counts as objects.
    """
    if isinstance(descr, str):
        return _NPY_PLAIN.fullmatch(descr) is None
    if isinstance(descr, tuple):
        return len(descr) != 2 or npy_has_objects(descr[0])
    if isinstance(descr, list):
        return any(not isinstance(f, tuple | list) or len(f) not in (2, 3)
                   or npy_has_objects(f[1]) for f in descr)
    return True
