"""Format detection from a file's bytes (never its name), and the npy header parser.

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
  of a multi-member file) whose content is a pickle (joblib style); `compressed-archive`: one
  whose content is an archive (a `.tar.gz` of a model folder), scanned as that archive
- `distcp`: back-to-back torch.save zip archives (torch.distributed.checkpoint's data files)
- `safetensors`: u64 header length, JSON header, data buffer (read by `core.safetensors_header`)
- `npy`: NumPy array file; `npz`: zip archive of `.npy` members
- `zip`: any other zip archive (its members are scanned by content)
- `7z`: 7-Zip archive: members cannot be listed, its decoded LZMA streams are searched
- `unknown`: none of the above
"""

from __future__ import annotations

import re
import struct

from inspector.core.safetensors_header import length_error

TORCH_MAGIC_PICKLE = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e"
NPY_MAGIC = b"\x93NUMPY"
COMPRESSION_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz",
                     b"\x04\x22\x4d\x18": "lz4", b"\x28\xb5\x2f\xfd": "zstd",
                     b"\x5d\x00": "lzma", b"\x78": "zlib"}
_COMPRESSION_FIRST = frozenset(m[:1] for m in COMPRESSION_MAGIC)
SEVEN_ZIP_MAGIC = b"7z\xbc\xaf\x27\x1c"
# Opcodes a protocol 0/1 pickle (no PROTO opcode) can start with.
PICKLE_FIRST_BYTES = frozenset(b"(.0FIJKLMNPQRSTUVXabcdegijlopqrstu}])G")


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
        if length_error(n, size) is None:
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
