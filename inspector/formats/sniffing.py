"""Format detection from a file's bytes (never its name) by the built-in chain, and the npy header

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
  of a multi-member file) whose content is a pickle (joblib style); zlib and LZMA-alone are
  known by their real decoder accepting the first bytes (any window size, any properties);
  `compressed-archive`: one whose content is an archive (a `.tar.gz` of a model folder),
  scanned as that archive
- `distcp`: back-to-back torch.save zip archives (torch.distributed.checkpoint's data files)
- `safetensors`: u64 header length, JSON header, data buffer (read by `formats.safetensors_header`)
- `npy`: NumPy array file; `npz`: zip archive of `.npy` members
- `zip`: any other zip archive (its members are scanned by content)
- `7z`: 7-Zip archive: members cannot be listed, its decoded LZMA streams are searched
- `unknown`: none of the above
"""

from __future__ import annotations

import pickletools
import re
import struct
from dataclasses import dataclass

from inspector.formats.archives import decompress, zipread
from inspector.formats.safetensors_header import length_error

TORCH_MAGIC_PICKLE = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e"
NPY_MAGIC = b"\x93NUMPY"
COMPRESSION_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz",
                     b"\x04\x22\x4d\x18": "lz4", b"\x28\xb5\x2f\xfd": "zstd",
                     b"\x5d\x00": "lzma", b"\x78": "zlib"}
_COMPRESSION_FIRST = frozenset(m[:1] for m in COMPRESSION_MAGIC)
SEVEN_ZIP_MAGIC = b"7z\xbc\xaf\x27\x1c"
# Every byte the C unpickler reads as an opcode.
OPCODE_BYTES = frozenset(op.code.encode("latin-1")[0] for op in pickletools.opcodes)
# Opcodes a protocol 0/1 pickle (no PROTO opcode) can start with.
PICKLE_FIRST_BYTES = frozenset(b"(.0FIJKLMNPQRSTUVXabcdegijlopqrstu}])G")
# kinds known by a magic number or a checksum (zlib's and LZMA's two bytes are too weak a sign):
# content of these kinds inside an archive or a stream is opened as a file of its own
NESTED_KINDS = frozenset({"zip", "tar", "7z", "compressed:gzip", "compressed:bz2",
                          "compressed:xz", "compressed:zstd", "compressed:lz4"})


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
    if head[:1] and head[0] not in OPCODE_BYTES:
        # zlib with any window, LZMA-alone with any properties: weak magic numbers, so the
        # real decoder decides (a first byte that is also an opcode is read both ways, by
        # the scanner's second readings)
        for kind in decompress.TRIED_KINDS:
            if decompress.accepts(head, kind):
                return "compressed:" + kind
    if head[:1] == b"\x80" and len(head) > 1 and head[1] <= 5:
        return "pickle"
    if head[:1] and head[0] in PICKLE_FIRST_BYTES:
        return "pickle?"
    return "unknown"


def is_archive(data) -> bool:
    """Whether an archive or compression reader takes `data` (a kind `NESTED_KINDS` names),
    whatever else its bytes read as: a tar's first member name ('./', '.hidden', 'l.txt')
    opens like a pickle to a walk, and `tarfile` still unpacks every member."""
    head = bytes(data[:512])
    return sniff(head, len(data)) in NESTED_KINDS or tarfile_takes(head)


def tarfile_takes(head: bytes) -> bool:
    """Whether Python's `tarfile` reads a 512-byte block as a header: it also takes checksums
    `is_tar` refuses ('0_123456', after a tab: `int(s, 8)` reads them), so `tarfile.open`
    and `shutil.unpack_archive` unpack such a file."""
    import tarfile

    try:
        tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


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
    # torch's reader looks its records up case-insensitively (miniz), so "A/DATA.PKL" is
    # data.pkl and "A/CODE/m.py" the code torch.jit.load compiles; numpy's zipfile does not
    torch = [zipread.torch_name(n) for n in names]
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in torch):
        if any(n.endswith("constants.pkl") for n in torch) and any("/code/" in n for n in torch):
            return "torchscript"
        return "pytorch-zip"
    if any(n.endswith("constants.pkl") for n in torch):
        return "torchscript"
    # a .pt2: torch.export.save's (its graph in models/) or AOTInductor's package (its model
    # compiled, or to compile, in data/aotinductor/), both read by torch's reader
    if any(n.endswith("/archive_format") for n in torch) and any(
            "/models/" in n or "/data/aotinductor/" in n for n in names):
        return "torch-export"
    if names and all(n.endswith(".npy") for n in names):
        return "npz"
    return "zip"


@dataclass(frozen=True)
class NpyHeader:
    """What NumPy's own header reader takes from a .npy file."""

    shape: tuple
    fortran_order: bool
    objects: bool  # the dtype may hold Python objects: NumPy stores the data as a pickle


def parse_npy_header(buf) -> tuple[NpyHeader, int]:
    """The header of a .npy file as `numpy.load` reads it, and the offset where its data starts;
    ValueError if NumPy refuses it. NumPy's own reader decides every header but the exact text
    `numpy.save` writes for a numeric array, so whatever it accepts is accepted here: Python 2
    headers (`1L`), any header size (`allow_pickle=True` lifts the bound), every dtype
    descriptor."""
    import io
    import warnings

    if bytes(buf[:6]) != NPY_MAGIC or len(buf) < 10:
        raise ValueError("not a .npy file")
    start = 10 if buf[6] == 1 else 12
    (hlen,) = struct.unpack_from("<H" if start == 10 else "<I", buf, 8)
    if (written := _as_numpy_writes_it(buf, start, hlen)) is not None:
        return written
    from numpy.lib import format as npformat

    fp = io.BytesIO(bytes(buf[:start + hlen]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy warns when it filters a Python 2 header
        version = npformat.read_magic(fp)
        shape, fortran, dtype = _numpy_header_reader(version)(fp, version, max_header_size=2**64)
    return NpyHeader(shape, fortran, bool(dtype.hasobject)), fp.tell()


# A header exactly as `numpy.save` writes one for a plain numeric or object array: `repr` of
# its sorted dict, padding spaces, one newline. NumPy's literal_eval of such text has one answer,
# read off the groups (`|O` is the one descr whose dtype holds objects); any other header
# (however harmless) goes to NumPy's own reader. Importing NumPy costs a folder scan about
# 0.1-0.2 s: a fifth of the CLI's time over 100 mixed checkpoints, most of the walk's time over
# the picklescan corpus folder (two object arrays).
_DIM = rb"(?:0|[1-9][0-9]{0,17})"
_WRITTEN_HEADER = re.compile(
    rb"\{'descr': '(\|O|\|[biu]1|[<>](?:[iu][248]|f[248]|c8|c16))', "
    rb"'fortran_order': (True|False), "
    rb"'shape': \((|" + _DIM + rb",|" + _DIM + rb"(?:, " + _DIM + rb")+)\), "
    rb"\} *\n")


def _as_numpy_writes_it(buf, start: int, hlen: int) -> tuple[NpyHeader, int] | None:
    """The header when it is one `numpy.save` writes for a plain numeric or object array (NumPy
    would read exactly this from it), else None."""
    if bytes(buf[6:8]) not in (b"\x01\x00", b"\x02\x00", b"\x03\x00") or (
            len(buf) < start + hlen):
        return None
    match = _WRITTEN_HEADER.fullmatch(bytes(buf[start:start + hlen]))
    if match is None:
        return None
    shape = tuple(int(n) for n in match[3].split(b",") if n.strip())
    return NpyHeader(shape, match[2] == b"True", match[1] == b"|O"), start + hlen


def _numpy_header_reader(version: tuple[int, int]):
    """NumPy's header reader for a format version: the one numpy.load calls (version 3 has no
    public entry, so its module's own function is taken)."""
    from numpy.lib import format as npformat

    impl = getattr(npformat, "_read_array_header", None)
    if impl is None:
        from numpy.lib import _format_impl  # NumPy 2 keeps the reader here

        impl = _format_impl._read_array_header
    return impl


def npy_has_objects(descr: object) -> bool:
    """Whether a .npy `descr` may hold Python objects (then NumPy stores the data as a pickle):
    the dtype NumPy's `descr_to_dtype` builds from it holds objects, or NumPy cannot build one
    (anything not proven plain counts as objects)."""
    from numpy.lib import format as npformat

    try:
        return bool(npformat.descr_to_dtype(descr).hasobject)
    except (TypeError, ValueError, KeyError, IndexError, RecursionError):
        return True
