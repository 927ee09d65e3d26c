"""Small files that cost a scanner without a per-file budget seconds and gigabytes (issue 22):
compression bombs, many directory entries pointing at one compressed record, millions of
one-byte opcodes, thousands of tiny gzip members, nested archives. Each builder takes a scale
`n` (the file grows about linearly with it) and returns the file's bytes;
`tests/test_scan_budget.py` checks the scan's answer on them and
`benchmarks/bench_scan_hostile.py` times them.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import zlib
from collections.abc import Callable

from factories import _tar

PROTO2 = b"\x80\x02"
PROTO4 = b"\x80\x04"


def _big_bytes(size: int) -> bytes:
    """A protocol 4 pickle of one `size`-byte BINBYTES8 of zeros (decodes to `size` bytes)."""
    return PROTO4 + b"\x8e" + struct.pack("<Q", size) + bytes(size) + b"."


def bz2_opcodes(n: int) -> bytes:
    """bzip2 of a pickle of 2n one-byte opcodes (NONE, POP): 5 million pairs fit in ~400 bytes."""
    return bz2.compress(PROTO2 + b"N0" * n + b"N.", 9)


def bz2_bomb(n: int) -> bytes:
    """bzip2 of a pickle holding one n-megabyte bytes value (n = 1024: a gibibyte)."""
    return bz2.compress(_big_bytes(n << 20), 9)


def zlib_bomb(n: int) -> bytes:
    """Raw zlib (joblib's compress='zlib') of an n-megabyte pickle."""
    return zlib.compress(_big_bytes(n << 20), 9)


def lzma_bomb(n: int) -> bytes:
    """LZMA-alone of an n-megabyte pickle."""
    return lzma.compress(_big_bytes(n << 20), format=lzma.FORMAT_ALONE)


def gzip_members(n: int) -> bytes:
    """n gzip members of one byte each, back to back (each member ~21 bytes)."""
    member = gzip.compress(b"N", mtime=0)
    return gzip.compress(PROTO2, mtime=0) + member * n + gzip.compress(b".", mtime=0)


def _zip_entries(data: bytes, method: int, names: list[str]) -> bytes:
    """A zip whose central directory gives every name the one local record holding `data`
    (compressed with `method`: 12 bzip2, 8 deflate)."""
    if method == 12:
        packed = bz2.compress(data, 9)
    else:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        packed = c.compress(data) + c.flush()
    crc = zlib.crc32(data)
    first = names[0].encode()
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 46, 0, method, 0, 0, crc, len(packed),
                        len(data), len(first), 0) + first + packed
    central = b""
    for name in names:
        raw = name.encode()
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 46, 46, 0, method, 0, 0,
                               crc, len(packed), len(data), len(raw), 0, 0, 0, 0, 0, 0) + raw
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(names), len(names), len(central),
                      len(local), 0)
    return local + central + end


def zip_shared_bzip2(n: int) -> bytes:
    """A torch-style zip whose n directory entries (data.pkl and n - 1 others) all point at one
    bzip2 record of a 256 MiB pickle: read once per entry, it costs n times that."""
    names = ["archive/data.pkl"] + [f"archive/extra{i}.pkl" for i in range(n - 1)]
    return _zip_entries(_big_bytes(256 << 20), 12, names)


def zip_deflate_opcodes(n: int) -> bytes:
    """A zip whose data.pkl is deflate of 2n one-byte opcodes."""
    return _zip_entries(PROTO2 + b"N0" * n + b"N.", 8, ["archive/data.pkl"])


def nested_bomb(n: int) -> bytes:
    """gzip of a tar holding a zip whose member is bzip2 of an n-megabyte pickle: three
    nesting levels, each decoded."""
    inner = _zip_entries(bz2.compress(_big_bytes(n << 20), 9), 8, ["model/weights.bz2"])
    return gzip.compress(_tar({"model.zip": inner}, "gnu"), mtime=0)


def marks(n: int) -> bytes:
    """A protocol 2 pickle of n MARKs and nothing else."""
    return PROTO2 + b"(" * n + b"."


def memo_puts(n: int) -> bytes:
    """bzip2 of n distinct memo entries (LONG_BINPUT of one value under keys 0 .. n - 1)."""
    puts = b"".join(b"r" + struct.pack("<I", i) for i in range(n))
    return bz2.compress(PROTO2 + b"N" + puts + b".", 9)


def legacy_tar_storages(n: int) -> bytes:
    """A legacy torch tar whose `storages` member holds n storage records, each pickle naming
    two storage classes of different element sizes (every reading is followed)."""
    args = (PROTO2 + b"X\x01\x00\x00\x000" + b"ctorch\nByteStorage\n0" + b"X\x03\x00\x00\x00cpu"
            + b"ctorch\nDoubleStorage\n" + b"\x87.")  # ('0', 'cpu', DoubleStorage)
    record = args + struct.pack("<q", 1) + bytes(8)
    storages = PROTO2 + b"J" + struct.pack("<i", n) + b"." + record * n + b"\x80\x02]."
    return _tar({"storages": storages, "tensors": b"\x80\x02K\x00.", "pickle": b"\x80\x02}."},
                "gnu")


HOSTILE: dict[str, Callable[[int], bytes]] = {
    "bz2_opcodes": bz2_opcodes,
    "bz2_bomb": bz2_bomb,
    "zlib_bomb": zlib_bomb,
    "lzma_bomb": lzma_bomb,
    "gzip_members": gzip_members,
    "zip_shared_bzip2": zip_shared_bzip2,
    "zip_deflate_opcodes": zip_deflate_opcodes,
    "nested_bomb": nested_bomb,
    "marks": marks,
    "memo_puts": memo_puts,
    "legacy_tar_storages": legacy_tar_storages,
}
"""name -> builder(n) -> bytes."""

# the scale of each builder that matches the issue's file (or a file of up to 1 MB)
ISSUE_SCALE = {"bz2_opcodes": 5_000_000, "bz2_bomb": 1024, "zlib_bomb": 256, "lzma_bomb": 256,
               "gzip_members": 40_000, "zip_shared_bzip2": 4, "zip_deflate_opcodes": 5_000_000,
               "nested_bomb": 512, "marks": 1_000_000, "memo_puts": 2_000_000,
               "legacy_tar_storages": 2_000}
