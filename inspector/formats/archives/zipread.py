"""A relaxed zip reader that accepts what torch's reader accepts and reports what is odd.

`zipfile` refuses archives torch still loads (a bad CRC, flag bits 0x1/0x20/0x40, a local
header whose name differs from the central directory's), which lets a payload slip past a
scanner built on it. This reader trusts the central directory for names and offsets (as
torch's miniz-based reader does), reads member bytes straight from the local headers, and
returns every oddity as an `Anomaly` instead of failing.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from inspector.core.vocabulary import Severity

LOCAL_SIG = b"PK\x03\x04"
CENTRAL_SIG = b"PK\x01\x02"
EOCD_SIG = b"PK\x05\x06"
ZIP64_LOCATOR_SIG = b"PK\x06\x07"
ZIP64_EOCD_SIG = b"PK\x06\x06"
FLAG_ENCRYPTED = 0x1
FLAG_PATCHED = 0x20
FLAG_STRONG_ENCRYPTION = 0x40
FLAG_MASKED_DIRECTORY = 0x2000  # miniz refuses the whole archive for it
# what zip writers set as a matter of course: deflate options, a data descriptor, UTF-8 names
FLAGS_WRITTEN = 0x2 | 0x4 | 0x8 | 0x800
STORED, DEFLATED, BZIP2, LZMA = 0, 8, 12, 14


@dataclass(frozen=True, slots=True)
class Anomaly:
    """Something a well-formed torch archive never has."""

    severity: str
    code: str
    message: str
    member: str | None = None


class Member(NamedTuple):
    """One central-directory entry and where its bytes are."""

    name: str
    local_name: str | None
    header_offset: int
    data_offset: int
    method: int
    flags: int  # central directory flags (what torch's miniz reader checks)
    local_flags: int
    crc: int
    compressed_size: int
    size: int
    mode: int  # the Unix file mode, where a Unix host made the entry (a symlink's S_IFLNK), else 0

    @property
    def encrypted(self) -> bool:
        """Whether either header claims the data is encrypted."""
        return bool((self.flags | self.local_flags) & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION))

    @property
    def unsupported_by_miniz(self) -> bool:
        """Whether torch's reader refuses to open it (encryption or patch-data flag bits)."""
        return bool(self.flags & (FLAG_ENCRYPTED | FLAG_PATCHED | FLAG_STRONG_ENCRYPTION))


@dataclass
class ZipArchive:
    """Members in central-directory order, and the anomalies found while reading them."""

    members: list[Member] = field(default_factory=list)
    anomalies: list[Anomaly] = field(default_factory=list)


class NotAZip(ValueError):
    """The bytes have no usable zip structure."""


# miniz reads 4,096-byte chunks back from the end, each 3 bytes over the one after it, and gives
# up after the first chunk that starts 65,557 bytes (a record and the longest comment) or more
# from the end: it searches the last 4,096 + 16 * 4,093 bytes
_MINIZ_EOCD_WINDOW = 4096 + 4093 * -(-(0xFFFF + 22 - 4096) // 4093)


def _find_eocd(buf, base: int = 0, end: int | None = None) -> int:
    end = len(buf) if end is None else end
    # as miniz (torch.load) does: the last signature with a whole 22-byte record after it
    i = buf.rfind(EOCD_SIG, max(base, end - _MINIZ_EOCD_WINDOW), end - 18)
    if i < 0:
        raise NotAZip("no end-of-central-directory record")
    return i


def _zip64_extra(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, i)
        body = extra[i + 4:i + 4 + size]
        if tag == 1:
            vals = [struct.unpack_from("<Q", body, j)[0] for j in range(0, len(body) - 7, 8)]
            if usize == 0xFFFFFFFF and vals:
                usize = vals.pop(0)
            if csize == 0xFFFFFFFF and vals:
                csize = vals.pop(0)
            if offset == 0xFFFFFFFF and vals:
                offset = vals.pop(0)
        i += 4 + size
    return usize, csize, offset


def _central_directory(buf, eocd: int, base: int = 0) -> tuple[int, int, int, int]:
    """(offset, entry count, size, end) of the central directory, following zip64 records;
    offsets are relative to the archive's first byte at `base`; `end` is where the records
    after the directory sit, so a well-formed archive has offset + size == end."""
    _, _, _, total, cd_size, cd_offset, _ = struct.unpack_from("<HHHHIIH", buf, eocd + 4)
    after = eocd - base
    z64 = eocd - 76
    # a zip64 end record without extensible data sits right before its locator, where zipfile
    # reads it (a locator pointing elsewhere is a `zip64-records` anomaly)
    if z64 >= base and buf[z64 + 56:z64 + 60] == ZIP64_LOCATOR_SIG and (
            buf[z64:z64 + 4] == ZIP64_EOCD_SIG):
        after = z64 - base
        total, _, cd_size, cd_offset = struct.unpack_from("<QQQQ", buf, z64 + 24)
    return cd_offset, total, cd_size, after


def archive_spans(buf) -> list[tuple[int, int]]:
    """(start, end) of each zip archive written back to back in `buf`, as
    torch.distributed.checkpoint's `.distcp` files hold them; one span for a plain archive."""
    try:
        eocd = _find_eocd(buf)
    except NotAZip:  # no end record near the end: back-to-back archives may still begin it
        eocd = None
    if eocd is not None:
        cd_offset, _, cd_size, after = _central_directory(buf, eocd)
        if cd_offset + cd_size == after:
            return [(0, len(buf))]
    spans: list[tuple[int, int]] = []
    start, pos = 0, 0
    while (i := buf.find(EOCD_SIG, pos)) >= 0 and i + 22 <= len(buf):
        pos = i + 1
        (comment,) = struct.unpack_from("<H", buf, i + 20)
        end = min(i + 22 + comment, len(buf))
        # the item is the bytes up to this record's comment's end, read as a zip reader reads
        # an archive: from the last end record in it
        if not _ends_item(buf, _find_eocd(buf, start, end), start):
            continue  # the signature's bytes inside member data
        spans.append((start, end))
        start = pos = i + 22 + comment
        if buf[start:start + 4] != LOCAL_SIG:
            break
    return spans if len(spans) > 1 else [(0, len(buf))]


def _ends_item(buf, eocd: int, start: int) -> bool:
    """Whether the end record at `eocd` closes an archive that began at `start`: its
    directory ends right before it or right before a zip64 end record, and its zip64 locator,
    if any, names one disk (as zipfile, which opens each item, requires)."""
    cd_offset, _, cd_size, after = _central_directory(buf, eocd, start)
    loc = eocd - 20
    if loc >= start and buf[loc:loc + 4] == ZIP64_LOCATOR_SIG:
        disk, _, disks = struct.unpack_from("<IQI", buf, loc + 4)
        if disk != 0 or disks > 1:
            return False
    end = start + cd_offset + cd_size
    # zipfile takes a directory that ends right before the end record, or before zip64 records
    return end - start in (after, eocd - start) or buf[end:end + 4] == ZIP64_EOCD_SIG


def is_whole_archive(buf, start: int, end: int) -> bool:
    """Whether `buf[start:end]` is exactly one archive: a local header first, and an end
    record at its end whose directory ends where the records after it begin (read from the
    end, so the member data in between is not touched)."""
    if buf[start:start + 4] != LOCAL_SIG or end - start < 22:
        return False
    try:
        eocd = _find_eocd(buf, start, end)
        cd_offset, _, cd_size, after = _central_directory(buf, eocd, start)
    except (NotAZip, struct.error):
        return False
    (comment,) = struct.unpack_from("<H", buf, eocd + 20)
    return eocd + 22 + comment == end and cd_offset + cd_size == after


def zipfile_shift(buf) -> int:
    """How far Python's zipfile (numpy.load) moves every offset of the archive ending `buf`:
    it takes the bytes between where the end record says the central directory starts and
    where it does start as data prepended to the archive. torch's miniz reader takes the
    offsets as written, so a nonzero shift gives the two readers two different archives
    (`read_zip(buf, shift)` is zipfile's)."""
    cd_offset, _, cd_size, after = _central_directory(buf, _find_eocd(buf))
    return after - cd_size - cd_offset


def unsafe_name(name: str) -> bool:
    """An absolute path, a drive, or a `..` part: joined to a folder, it leaves the folder."""
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ".." in parts or name[1:2] == ":"


_CENTRAL = struct.Struct("<4xH2xHH4xIIIHHH4xII").unpack_from
_UNIX_HOST = 3  # "version made by" high byte: the external attributes' high half is st_mode
_LOCAL = struct.Struct("<2xH18xHH").unpack_from


def _zip64_fault(buf, eocd: int, base: int) -> str | None:
    """What is off in the zip64 records before the end record at `eocd`, against how torch
    writes them (one disk, a 44-byte record right before its locator, the same counts and
    offsets as the end record where that one holds no 0xFFFF placeholder); None if nothing
    is, or there are none. miniz and zipfile each refuse some of these their own way."""
    loc = eocd - 20
    if loc < base or buf[loc:loc + 4] != ZIP64_LOCATOR_SIG:
        return None
    disk, z64, disks = struct.unpack_from("<IQI", buf, loc + 4)
    at = base + z64
    if disk != 0 or disks != 1:
        return f"its locator names disk {disk} of {disks}"
    if at != loc - 56 or buf[at:at + 4] != ZIP64_EOCD_SIG:
        return "its locator does not point at a zip64 end record right before it"
    size, _, _, this_disk, cd_disk, here, total, cd_size, cd_offset = struct.unpack_from(
        "<QHHIIQQQQ", buf, at + 4)
    if size != 44 or this_disk or cd_disk or here != total:
        return "its zip64 end record names other disks or counts, or extensible data"
    if base + cd_offset + cd_size > at:
        return "its zip64 end record lies inside the directory"
    short = struct.unpack_from("<HHHHII", buf, eocd + 4)
    for value, wide in zip(short, (0, 0, here, total, cd_size, cd_offset), strict=True):
        if value not in (wide, 0xFFFF, 0xFFFFFFFF):
            return "its zip64 end record disagrees with the end record"
    return None


def _entry_fault(buf, pos: int, method: int, csize: int, usize: int,
                 cd_end: int) -> str | None:
    """What is off in the fields of the directory entry at `pos` that the scan's reading does
    not otherwise use (None: nothing): a stored member whose sizes differ, data with no
    compressed bytes, another disk, an entry running past the directory's size, a member with
    bytes marked as a folder (miniz then hands out none of them)."""
    disk, _, external = struct.unpack_from("<HHI", buf, pos + 34)
    nlen, xlen, clen = struct.unpack_from("<HHH", buf, pos + 28)
    if 0xFFFFFFFF not in (csize, usize) and (
            (method == STORED and csize != usize) or (usize and not csize)):
        return f"gives {csize} stored bytes for {usize}"
    if disk != 0:
        return f"starts on disk {disk}"
    if pos + 46 + nlen + xlen + clen > cd_end:
        return "runs past the end record's directory size"
    if usize and (external & _DOS_FOLDER or buf[pos + 46 + nlen - 1:pos + 46 + nlen] == b"/"):
        return "marks a member that holds bytes as a folder"
    return None


_DOS_FOLDER = 0x10  # the directory bit of the DOS attributes, which miniz reads on any host


def read_zip(buf, base: int = 0, end: int | None = None) -> ZipArchive:
    """Parse the archive in `buf[base:end]` (bytes or mmap; offsets in the result are the
    buffer's); raises NotAZip when there is no zip at all."""
    archive = ZipArchive()
    add = archive.anomalies.append
    n = len(buf) if end is None else end  # a member past its archive's end lies outside it
    eocd = _find_eocd(buf, base, n)
    (comment,) = struct.unpack_from("<H", buf, eocd + 20)
    if eocd + 22 + comment < n:
        add(Anomaly(Severity.SUSPICIOUS, "zip-trailing-bytes",
                    f"{n - eocd - 22 - comment} bytes follow "
                    "the end record; torch never writes them, and zip readers disagree on "
                    "where such an archive starts"))
    disk, cd_disk, here, listed = struct.unpack_from("<HHHH", buf, eocd + 4)
    if disk or cd_disk or here != listed:
        add(Anomaly(Severity.SUSPICIOUS, "zip-end-record",
                    f"the end record names disk {disk} (directory on disk {cd_disk}) and counts "
                    f"{here} entries here of {listed}; torch writes one disk, and its reader "
                    "refuses others"))
    if (fault := _zip64_fault(buf, eocd, base)) is not None:
        add(Anomaly(Severity.SUSPICIOUS, "zip64-records", f"the archive's zip64 records are "
                    f"not as torch writes them: {fault}; zip readers disagree on such archives"))
    cd_offset, total, cd_size, _ = _central_directory(buf, eocd, base)
    if cd_size < 46 * total or base + cd_offset + cd_size > eocd:
        add(Anomaly(Severity.SUSPICIOUS, "zip-directory-bounds",
                    f"the end record's directory ({total} entries, {cd_size} bytes at offset "
                    f"{cd_offset}) does not fit before it"))
    pos = base + cd_offset
    # Python's zipfile (numpy.load) reads entries until the directory's size is used up, not
    # the end record's count: entries past the count are members to it, so they are read too
    cd_end = pos + cd_size
    members = archive.members
    for i in range(10_000_000):
        if i >= total and (pos >= cd_end or buf[pos:pos + 4] != CENTRAL_SIG):
            break
        if pos < 0 or buf[pos:pos + 4] != CENTRAL_SIG:
            add(Anomaly(Severity.SUSPICIOUS, "zip-central-directory",
                        f"central directory entry missing at offset {pos}"))
            break
        if i == total:
            add(Anomaly(Severity.SUSPICIOUS, "zip-entry-count",
                        f"the end record counts {total} entries but the central directory "
                        "holds more; Python's zipfile (numpy.load) lists them all"))
        made_by, flags, method, crc, csize, usize, nlen, xlen, clen, attrs, offset = _CENTRAL(
            buf, pos)
        mode = attrs >> 16 if made_by >> 8 == _UNIX_HOST else 0
        fault = _entry_fault(buf, pos, method, csize, usize, cd_end)
        raw_name = buf[pos + 46:pos + 46 + nlen]
        if xlen:
            extra = bytes(buf[pos + 46 + nlen:pos + 46 + nlen + xlen])
            usize, csize, offset = _zip64_extra(extra, usize, csize, offset)
        pos += 46 + nlen + xlen + clen
        offset += base
        try:
            name = str(raw_name, "utf-8")
        except UnicodeDecodeError:  # torch's reader refuses to list such an archive
            name = str(raw_name, "utf-8", "replace")
            add(Anomaly(Severity.SUSPICIOUS, "zip-name-encoding",
                        "member name is not UTF-8; torch.load refuses to list such an archive",
                        name))
        local_name = None
        data_offset = -1
        lflags = 0
        if offset >= 0 and buf[offset:offset + 4] == LOCAL_SIG:
            lflags, lnlen, lxlen = _LOCAL(buf, offset + 4)
            local_raw = buf[offset + 30:offset + 30 + lnlen]
            local_name = name if local_raw == raw_name else str(local_raw, "utf-8", "replace")
            data_offset = offset + 30 + lnlen + lxlen
        members.append(tuple.__new__(Member, (name, local_name, offset, data_offset, method,
                                               flags, lflags, crc, csize, usize, mode)))
        if fault is not None:
            add(Anomaly(Severity.SUSPICIOUS, "zip-entry-fields", f"its directory entry {fault}, "
                        "which torch never writes; zip readers disagree on such entries", name))
        if data_offset < 0 or data_offset + csize > n:
            add(Anomaly(Severity.SUSPICIOUS, "zip-bad-offset",
                        "member's local header or data lies outside the file", name))
        elif local_name != name:
            add(Anomaly(Severity.SUSPICIOUS, "zip-name-mismatch",
                        f"local header names it {local_name!r}, central directory {name!r}",
                        name))
        odd = (flags | lflags) & ~FLAGS_WRITTEN
        if odd:
            add(Anomaly(Severity.SUSPICIOUS, "zip-flag-bits",
                        f"general-purpose flag bits {odd:#x} set (encryption, patch data or "
                        "a masked directory); scanners that trust them skip the member, and "
                        "torch's reader refuses some", name))
    for name, count in Counter(m.name for m in archive.members).items():
        if count > 1:
            add(Anomaly(Severity.SUSPICIOUS, "zip-duplicate-name",
                        f"{count} members share the name {name!r}; readers disagree on "
                        "which one counts", name))
    return archive


class MemberTooLarge(ValueError):
    """The member would inflate past the caller's bound."""


def member_bytes(buf, member: Member, max_size: int) -> bytes:
    """The member's uncompressed bytes, bounded by `max_size`; raises ValueError if unreadable."""
    if member.data_offset < 0:
        raise ValueError("member has no local header")
    raw = buf[member.data_offset:member.data_offset + member.compressed_size]
    if member.method == STORED:
        if len(raw) > max_size:
            raise MemberTooLarge(f"{len(raw)} bytes")
        return bytes(raw)
    import lzma

    try:
        out = _decoder(member.method, raw).decompress(raw[_skip(member.method, raw):],
                                                      max_size + 1)
    except (zlib.error, lzma.LZMAError, OSError, EOFError, struct.error, LookupError) as exc:
        raise ValueError(f"undecodable member data: {exc}") from None
    if len(out) > max_size:
        raise MemberTooLarge(f"inflates past {max_size} bytes")
    return out


_HEAD_INPUT = 1 << 16  # compressed bytes read for a member's first few bytes


def member_head(buf, member: Member, size: int) -> bytes:
    """The member's first `size` uncompressed bytes (fewer where it is shorter or cannot be
    decoded): enough to tell what it is without inflating all of it."""
    if member.data_offset < 0:
        return b""
    # a bounded slice: a stored tensor record may be gigabytes, and slicing a map copies
    start = member.data_offset
    if member.method == STORED:
        return bytes(buf[start:start + min(size, member.compressed_size)])
    raw = buf[start:start + min(member.compressed_size, _HEAD_INPUT)]
    import lzma

    try:
        return _decoder(member.method, raw).decompress(raw[_skip(member.method, raw):], size)
    except (zlib.error, lzma.LZMAError, OSError, EOFError, struct.error, LookupError,
            ValueError):
        return b""


def _skip(method: int, raw) -> int:
    """Bytes before the compressed stream: zip's LZMA header (version, properties)."""
    return 4 + struct.unpack_from("<H", raw, 2)[0] if method == LZMA else 0


def _decoder(method: int, raw):
    """Decompressor of a member; bzip2 and LZMA too, which numpy.load's zipfile reads."""
    import bz2
    import lzma

    if method == DEFLATED:
        return zlib.decompressobj(-15)
    if method == BZIP2:
        return bz2.BZ2Decompressor()
    if method == LZMA and len(raw) >= 4:
        props = bytes(raw[4:_skip(method, raw)])
        filt = lzma._decode_filter_properties(lzma.FILTER_LZMA1, props)  # as zipfile does
        return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[filt])
    raise ValueError(f"compression method {method} is not supported")


def crc_ok(data: bytes, member: Member) -> bool:
    """Whether `data` matches the CRC-32 the central directory records."""
    return zlib.crc32(data) & 0xFFFFFFFF == member.crc


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def torch_name(name: str) -> str:
    """A member name as torch's reader compares it when it looks a record up (`getRecord`,
    `hasRecord`: miniz's locate with no flags): ASCII letters lowercased, nothing else, so
    `A/CODE/x.PY` is the record `a/code/x.py` names. Every test of a name torch looks up
    compares these (its `get_all_records` list and PackageImporter's module tree keep the
    names as written)."""
    return name.translate(_ASCII_LOWER)


def _miniz_key(name: str) -> bytes:
    # miniz compares names byte by byte with ASCII-only lowercasing (MZ_TOLOWER)
    return name.encode("utf-8", "surrogateescape").lower()


def _miniz_sorted(keys: list[bytes]) -> list[int]:
    """Central-directory indices in the order miniz's (unstable) heapsort leaves them (bytes
    compare as mz_zip_reader_filename_less does: lexicographic, a prefix first)."""
    idx = list(range(len(keys)))
    size = len(idx)
    if size <= 1:
        return idx

    def sift(root: int, end: int) -> None:
        while (child := 2 * root + 1) < end:
            if child + 1 < end and keys[idx[child]] < keys[idx[child + 1]]:
                child += 1
            if not keys[idx[root]] < keys[idx[child]]:
                return
            idx[root], idx[child] = idx[child], idx[root]
            root = child

    for start in range((size - 2) >> 1, -1, -1):
        sift(start, size)
    for end in range(size - 1, 0, -1):
        idx[end], idx[0] = idx[0], idx[end]
        sift(0, end)
    return idx


def torch_member(members: list[Member], name: str) -> Member | None:
    """The member torch's reader (miniz: sorted central directory, case-insensitive binary
    search) opens for `name`; with duplicate names that is not simply the first or last."""
    target, size, lowered = _miniz_key(name), len(name), name.lower()
    # str.lower equality is a superset of miniz's ASCII-only one, and cheap to test first
    matches = [m for m in members if len(m.name) == size and m.name.lower() == lowered
               and _miniz_key(m.name) == target]
    if len(matches) <= 1:
        return matches[0] if matches else None
    keys = [_miniz_key(m.name) for m in members]
    order = _miniz_sorted(keys)
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        mid = lo + ((hi - lo) >> 1)
        key = keys[order[mid]]
        if key == target:
            return members[order[mid]]
        if key < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return None
