"""Zip archives, read as torch's reader (miniz) and Python's `zipfile` (numpy.load) read them:
every member by its content (a pickle, a `.npy`, an archive inside), named by its members
(`sniffing.zip_kind`: `pytorch-zip`, `torchscript`, `torch-export`, `npz` or plain `zip`), and
back-to-back archives (`distcp`) through the ranges a DCP `.metadata` lists."""

from __future__ import annotations

import contextlib
import mmap
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inspector.core.map_io import MapIO
from inspector.core.vocabulary import Format, Severity
from inspector.formats.archives import (
    decompress,
    native_code,
    script_code,
    squeeze,
    torch_package,
    unpack,
    zipread,
)
from inspector.formats.numpy_files import scan_member_npy
from inspector.formats.pickle_stream import carve, fold_pickles, pickle_head, scan_stream
from inspector.formats.registry import FormatSpec, register
from inspector.formats.sniffing import NPY_MAGIC, PICKLE_FIRST_BYTES, is_archive, zip_kind
from inspector.formats.torch_zip import TORCH_READS, check_records
from inspector.scan.budget import MAX_MEMBER_BYTES
from inspector.scan.pickles.walker import imports, looks_like_pickle

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext


_PICKLE_STARTS = PICKLE_FIRST_BYTES | {0x80}


def scan_zip(ctx: FormatContext, buf) -> None:
    """Every archive in the file: one, or the back-to-back archives of a `.distcp` file."""
    if ctx.archives is None:
        spans = zipread.archive_spans(buf)
        if len(spans) == 1:
            # torch reads the archive as its end record places it; numpy too unless zipfile
            # shifts it (then numpy's is the other reading, `_scan_zipfile_view`)
            shift = zipread.zipfile_shift(buf)
            scan_archive(ctx, buf, zipread.read_zip(buf),
                         TORCH_READS_IT if shift else BOTH_READ_IT)
            _scan_zipfile_view(ctx, buf, shift)
            return
    else:
        if isinstance(buf, mmap.mmap):
            # only headers, directories and pickles are read: without this, each touch
            # reads a whole readahead window (8 MiB on some disks) of tensor data around it
            buf.madvise(mmap.MADV_RANDOM)
        spans = _listed_archives(ctx, buf, ctx.archives)
        if spans == [(0, len(buf))]:  # one item: a plain archive
            scan_archive(ctx, buf, zipread.read_zip(buf))
            return
    refuses, blockers = ctx.torch_refuses, list(ctx.result.weights_only_blockers)
    for start, end in spans:
        scan_archive(ctx, buf, zipread.read_zip(buf, start, end), span=(start, end))
    for start, end in _uncovered(spans, len(buf)):
        spans += scan_gap(ctx, buf, start, end)
    # what torch.load itself reads is decided below, not by every archive's content
    ctx.torch_refuses, ctx.result.weights_only_blockers[:] = refuses, blockers
    ctx.result.format = Format.DISTCP
    ctx.find(Severity.INFO, "zip-concatenated", f"{len(spans)} zip archives back to back (as "
             "torch.distributed.checkpoint writes its .distcp data files); all were scanned")
    _torch_view(ctx, buf, sorted(spans))


def _scan_zipfile_view(ctx: FormatContext, buf, shift: int) -> None:
    """An archive whose end record's directory offset is not where its directory lies: Python's
    zipfile (numpy.load) shifts every offset by the difference, torch's reader does not, so the
    archive zipfile reads is scanned too. torch.load reads only the unshifted one. `shift`:
    how far zipfile moves the offsets (`zipread.zipfile_shift`, 0 for none)."""
    if not shift:
        return
    ctx.find(Severity.SUSPICIOUS, "zip-offset-shift",
             f"the central directory lies {shift:+d} bytes from where the end record puts it: "
             "Python's zipfile (numpy.load) shifts every member by that much, torch does not; "
             "both readings were scanned")
    refuses, blockers = ctx.torch_refuses, list(ctx.result.weights_only_blockers)
    fmt = ctx.result.format
    try:
        scan_archive(ctx, buf, zipread.read_zip(buf, shift), NUMPY_READS_IT)
    except (ValueError, struct.error) as exc:
        ctx.find(Severity.SUSPICIOUS, "zip-unreadable",
                 f"the shifted reading could not be read: {exc}")
    ctx.torch_refuses, ctx.result.weights_only_blockers[:] = refuses, blockers
    ctx.result.format = fmt


def _listed_archives(ctx: FormatContext, buf,
                     listed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The archives `.metadata` lists (offset, length) that are each one whole archive: their
    directories are read, not every page of the file. A listed range that is not one is
    scanned in full, as DCP would load whatever it holds (`_uncovered` then finds any bytes
    no archive covers)."""
    spans = []
    for offset, length in sorted(set(listed)):
        end = offset + length
        if 0 <= offset < end <= len(buf) and zipread.is_whole_archive(buf, offset, end):
            spans.append((offset, end))
        else:
            scan_gap(ctx, buf, offset, end,
                      "the .metadata lists an item there that is not one whole archive")
    return spans


def _uncovered(spans: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The byte ranges of [0, size) that none of `spans` covers."""
    gaps, pos = [], 0
    for start, end in sorted(spans):
        if start > pos:
            gaps.append((pos, start))
        pos = max(pos, end)
    return gaps + ([(pos, size)] if pos < size else [])


def scan_gap(ctx: FormatContext, buf, start: int, end: int,
              why: str = "no archive covers them") -> list[tuple[int, int]]:
    """Bytes of a `.distcp` file outside its archives, read in full: DCP loads the bytes at
    any offset its `.metadata` gives, so a pickle or an archive there is scanned as such.
    Returns the archives found in them (offsets in the file). A range `.metadata` gives may
    reach outside the file: only its part inside is read."""
    start, end = max(start, 0), min(max(end, 0), len(buf))
    if start >= end:
        return []
    member = f"bytes {start}-{end}"
    ctx.find(Severity.SUSPICIOUS, "distcp-unlisted-bytes",
             f"{end - start} bytes at offset {start}: {why}; they were scanned in full", member)
    data = bytes(buf[start:end])
    try:
        found = [(start + s, start + e) for s, e in zipread.archive_spans(data)]
    except (ValueError, struct.error):
        found = []  # no end record at all: no archive to read
    for s, e in found:
        try:
            scan_archive(ctx, buf, zipread.read_zip(buf, s, e))
        except (ValueError, struct.error) as exc:
            ctx.not_fully_read("zip-unreadable", f"archive not read: {exc}", member)
    if not scan_stream(ctx, data, member, False):
        carve(ctx, data, member, 0)
    return found


def _torch_view(ctx: FormatContext, buf, spans: list[tuple[int, int]]) -> None:
    """torch.load of back-to-back archives: its reader takes the last end record's offsets as
    if that archive began the file, which lands on another archive's directory or on garbage."""
    try:
        view = zipread.read_zip(buf)
    except (ValueError, struct.error):
        view = None
    broken = view is None or not view.members or any(
        a.code in ("zip-central-directory", "zip-bad-offset") for a in view.anomalies)
    span = None if broken else next(
        (s for s in spans if s[0] <= view.members[0].header_offset < s[1]), None)
    if span is None:
        ctx.block("torch.load finds no consistent archive in back-to-back archives")
        return
    probe = ctx.sibling()
    probe.crc_budget = 0  # only its blockers are kept: the archive was checked above
    scan_archive(probe, buf, zipread.read_zip(buf, *span))
    for reason in probe.result.weights_only_blockers:
        ctx.block(reason)


def _record_may_be_pickle(ctx: FormatContext, buf, m: zipread.Member) -> bool:
    """Whether a tensor record's bytes parse as a pickle (a cheap walk in place, no copy)."""
    head = bytes(buf[m.data_offset:m.data_offset + 2])
    if pickle_head(head):
        return True
    if not head or head[0] not in PICKLE_FIRST_BYTES:
        return False
    return imports(ctx.probe(buf, m.data_offset))


_VERSION_RECORDS = ("/version", "/.data/version")
_WRITTEN_VERSION = re.compile(rb"[1-9]\n?")  # the versions torch.save has written

TORCH_PICKLES = (".pkl", ".debug_pkl")  # torch.load, DCP, torch.jit.load unpickle these
TORCH_READS_IT = frozenset({"torch"})  # its TORCH_PICKLES members
NUMPY_READS_IT = frozenset({"numpy"})  # its .npy members: numpy.load
BOTH_READ_IT = TORCH_READS_IT | NUMPY_READS_IT


def scan_archive(ctx: FormatContext, buf, archive: zipread.ZipArchive,
                 readers: frozenset[str] = BOTH_READ_IT, span: tuple[int, int] | None = None,
                 ) -> None:
    """Every member of one reading of an archive (the archive `buf[span]`, all of `buf` when
    None). `readers`: the loaders that read the archive this way. A member the loaders never
    hand out as a pickle is still walked and read, but its imports stay apart from the
    verdict's (`FormatContext.read_apart`). Where this reading finds the archive damaged (a
    structural anomaly, or a pickle member whose CRC or bytes are off), the loaders' own zip
    readers decide what they hand out: zipfile for numpy's .npy members (`_handed_out`),
    torch's own reader, in the jail, for torch's pickles (`FormatContext.ask_torch`); torch.load
    takes the zip path only for bytes that open with a local header."""
    members = archive.members
    start = span[0] if span else 0
    if any(_may_escape(m) for m in members):
        unpack.report(ctx, [_unpack_entry(buf, m) for m in members])
    # torch reads the folder of the first member and refuses members outside it.
    prefix = members[0].name.split("/", 1)[0] if members else ""
    reading = _Reading(
        readers=readers,
        torch_reads="torch" in readers and bytes(buf[start:start + 4]) == zipread.LOCAL_SIG,
        handed=_handed_out(buf, span) if archive.anomalies and "numpy" in readers else None,
        kind=_name_archive(ctx, archive), prefix=prefix,
        main=zipread.torch_member(members, f"{prefix}/data.pkl"),
        damaged=bool(archive.anomalies), package=torch_package.layout_of(buf, members))
    # a torch.package's sources are Python that PackageImporter runs, never a pickle
    sources = torch_package.not_pickles(buf, reading.package,
                                        members) if reading.package else set()
    if reading.torch_zip:
        outside = next((m.name for m in members if not m.name.startswith(prefix + "/")), None)
        if outside is not None:
            ctx.block(f"member {outside!r} lies outside the {prefix}/ folder")
    main = reading.main
    # The main pickle first: its storage references tell which members are tensor records.
    for m in ([main] if main else []) + [m for m in members if m is not main]:
        if m.name not in sources and not _read_before(ctx, m):
            _scan_member(ctx, buf, reading, m)
    _finish_reading(ctx, reading, members, span)
    if reading.package:
        torch_package.report(ctx, buf, reading.package, members)
    if reading.kind == Format.TORCHSCRIPT:  # its code, judged once every pickle is read
        script_code.report(ctx, buf, members)
    native_code.report(ctx, buf, members, reading.records)


_S_IFMT, _S_IFLNK, _S_IFDIR = 0o170000, 0o120000, 0o040000


def _may_escape(m: zipread.Member) -> bool:
    """Whether unpacking the member may reach outside its folder (a cheap test of every member,
    so that a torch zip of thousands of records pays almost nothing)."""
    return m.mode & _S_IFMT == _S_IFLNK or ".." in m.name or m.name.startswith(("/", "\\"))


def _unpack_entry(buf, m: zipread.Member) -> unpack.Entry:
    """A zip member as an extractor places it: its name cut at the first NUL (as zipfile cuts
    it), a backslash a separator (as Windows extractors read it), a Unix symlink entry's data
    its target (as unzip and libarchive make it)."""
    name = m.name.split("\x00", 1)[0].replace("\\", "/")
    if m.mode & _S_IFMT == _S_IFLNK:
        try:
            target = zipread.member_bytes(buf, m, MAX_LINK_BYTES)
        except ValueError:
            target = b""
        return unpack.Entry(name, unpack.Kind.SYMLINK, str(target, "utf-8", "replace"))
    folder = m.mode & _S_IFMT == _S_IFDIR or name.endswith("/")
    return unpack.Entry(name, unpack.Kind.FOLDER if folder else unpack.Kind.FILE)


MAX_LINK_BYTES = 4096  # PATH_MAX: a longer symlink target is refused by the kernel


@dataclass
class _Reading:
    """One reading of one archive (`scan_archive`): who reads it, and what its members gave."""

    readers: frozenset[str]
    torch_reads: bool  # torch.load takes the zip path: the bytes open with a local header
    handed: dict[str, bytes] | None  # the .npy members zipfile hands numpy.load (`_handed_out`)
    kind: str  # `sniffing.zip_kind`
    prefix: str  # the folder torch reads: the first member's
    main: zipread.Member | None  # `<prefix>/data.pkl`, read first
    damaged: bool  # a structural anomaly, or a pickle member whose CRC or bytes are off
    walked: dict[str, bytes] = field(default_factory=dict)  # member bytes walked, by name
    torch_walked: list[bytes] = field(default_factory=list)  # torch's pickles among them
    storages: list = field(default_factory=list)  # the storages the pickles reference
    records: set[str] = field(default_factory=set)  # the tensor records they name
    skipped_crc: int = 0  # tensor records whose CRC-32 the budget left unchecked
    package: torch_package.PackageLayout | None = None  # the archive read as a torch.package

    @property
    def torch_zip(self) -> bool:
        """Whether the archive is a `torch.save` zip."""
        return self.kind == Format.PYTORCH_ZIP

    def apart(self, ctx: FormatContext, m: zipread.Member, data: bytes,
              loader: str) -> contextlib.AbstractContextManager[None]:
        """`ctx.read_apart` for member bytes that `loader` ("torch", "numpy", "" for none)
        would read: apart where this reading is not how that loader gets them."""
        self.walked[m.name] = data
        if loader == "torch":  # decided once the whole archive is read
            self.torch_walked.append(data)
            return ctx.read_apart(data, not self.torch_reads)
        return ctx.read_apart(data, loader not in self.readers or (
            self.handed is not None and self.handed.get(m.name) != data))


def _name_archive(ctx: FormatContext, archive: zipread.ZipArchive) -> str:
    """The archive's kind, named by its members (`sniffing.zip_kind`), which becomes the file's
    format where it says more; its anomalies and what a code archive means are reported."""
    kind = zip_kind([m.name for m in archive.members])
    if ctx.result.format in (Format.UNKNOWN, Format.ZIP, Format.NPZ) or kind in (
            Format.TORCHSCRIPT, Format.TORCH_EXPORT):
        ctx.result.format = kind
    for a in archive.anomalies:
        ctx.find(a.severity, a.code, a.message, a.member)
    if kind == Format.TORCH_EXPORT:
        ctx.find(Severity.SUSPICIOUS, "torch-export",
                 "torch.export archive: torch.export.load rebuilds "
                 "and runs the graph in models/ (custom operators run native code), "
                 "aoti_load_package the model compiled in data/aotinductor/, and "
                 "torch.load refuses it")
    return kind


def _scan_member(ctx: FormatContext, buf, reading: _Reading, m: zipread.Member) -> None:
    """One member by its content: a `.npy`, a pickle, or an archive inside; a tensor record
    only where its bytes may be a pickle."""
    is_record = m.name in reading.records
    if is_record and m.method == zipread.STORED and m.data_offset >= 0:
        data = _stored_record(ctx, buf, reading, m)
    else:
        data = _member_bytes(ctx, buf, reading, m)
    if data is None or (is_record and not (pickle_head(data[:2]) or (
            data[:1] and data[0] in PICKLE_FIRST_BYTES))):
        return
    if data.startswith(NPY_MAGIC):
        with reading.apart(ctx, m, data, "numpy"):
            scan_member_npy(ctx, data, m.name)
        return
    main = reading.main
    ctx.member_of[id(data)] = m.name
    torch_name = zipread.torch_name(m.name)  # torch finds `X.PKL` for `x.pkl`
    with reading.apart(ctx, m, data, "torch" if torch_name.endswith(TORCH_PICKLES) else ""):
        scan = ctx.walk(data)
    if not is_record and is_archive(data):
        # a tar whose first name opens like a pickle ('./'): unpacked, its members load
        ctx.scan_nested(data, m.name)
    if not (imports(scan) if is_record else looks_like_pickle(scan)):
        if m.encrypted:
            ctx.find(Severity.SUSPICIOUS, "zip-encrypted", "encrypted member cannot be scanned",
                     m.name)
        if m is main:
            ctx.block(f"{m.name} is not a pickle")
        if not is_record and not is_archive(data):
            ctx.scan_nested(data, m.name)
        return
    fold_pickles(ctx, data, m.name, scan, 1 if reading.torch_zip and m is main else 0)
    reading.storages.extend(scan.storages)
    if m is main or torch_name.endswith(".pkl"):
        reading.records |= {f"{reading.prefix}/data/{s.key}" for s in scan.storages}
    if m.method != zipread.STORED and not torch_name.endswith(".debug_pkl"):
        ctx.find(Severity.SUSPICIOUS, "zip-compressed-pickle", "pickle member is compressed; "
                 "torch.save always stores pickles uncompressed", m.name)
    if m is not main and reading.torch_zip:
        ctx.find(Severity.SUSPICIOUS, "zip-extra-pickle",
                 "a pickle torch.load never reads; it was "
                 "scanned because other loaders may unpickle it", m.name)


def _stored_record(ctx: FormatContext, buf, reading: _Reading,
                   m: zipread.Member) -> bytes | None:
    """A tensor record stored in place: its CRC-32 checked within the file's budget, its bytes
    returned only where they may be a pickle (torch never unpickles a record)."""
    if m.compressed_size > ctx.crc_budget:
        reading.skipped_crc += 1
        return None
    ctx.crc_budget -= m.compressed_size
    actual = _crc32(buf, m.data_offset, m.compressed_size)
    if actual != m.crc:
        ctx.find(Severity.SUSPICIOUS, "zip-crc-mismatch",
                 f"CRC-32 {actual:08x} does not match "
                 f"{m.crc:08x} in the central directory (corrupted or tampered tensor "
                 "data)", m.name)
    # a record whose data lies past the end (zip-bad-offset) must not end the scan
    first = buf[m.data_offset] if m.compressed_size and m.data_offset < len(buf) else 0
    if first not in _PICKLE_STARTS or not _record_may_be_pickle(ctx, buf, m):
        return None
    return bytes(buf[m.data_offset:m.data_offset + m.compressed_size])


def _member_bytes(ctx: FormatContext, buf, reading: _Reading,
                  m: zipread.Member) -> bytes | None:
    """A member's bytes, inflated within the file's decode budget; None where they cannot be
    read. A member that cannot be read, fails its CRC-32 or holds a version torch.save never
    wrote makes the archive damaged."""
    stored = m.method == zipread.STORED
    limit = MAX_MEMBER_BYTES if stored else ctx.decoded_limit(MAX_MEMBER_BYTES)
    crc = None
    try:
        data = zipread.member_bytes(buf, m, limit)
    except zipread.MemberTooLarge as exc:
        streamed = _streamed_member(ctx, buf, m, limit) if limit < MAX_MEMBER_BYTES else None
        if streamed is None:
            if limit < MAX_MEMBER_BYTES:
                ctx.not_fully_read("scan-budget", f"member inflates past the file's decode "
                                   f"budget ({exc})", m.name)
            else:
                ctx.find(Severity.SUSPICIOUS, "zip-member-too-large",
                         f"member not scanned: {exc}", m.name)
            return None
        data, crc = streamed.data, streamed.crc
    except ValueError as exc:
        ctx.find(Severity.SUSPICIOUS, "zip-member-unreadable", f"member not scanned: {exc}",
                 m.name)
        reading.damaged = True
        if m is reading.main:
            ctx.block(f"{m.name} cannot be read")
        return None
    if not stored and crc is None:
        ctx.budget.decode(len(data))
    if not (zipread.crc_ok(data, m) if crc is None else crc == m.crc):
        reading.damaged = True
        ctx.find(Severity.SUSPICIOUS, "zip-crc-mismatch",
                 f"CRC-32 {zlib.crc32(data):08x} does "
                 f"not match {m.crc:08x} in the central directory (corrupted, tampered "
                 "or encrypted)", m.name)
    # torch's reader parses the version record as it opens the archive
    if zipread.torch_name(m.name).endswith(_VERSION_RECORDS) and not (
            _WRITTEN_VERSION.fullmatch(data)):
        reading.damaged = True
    return data


_STREAMED_METHODS = {zipread.DEFLATED: "deflate", zipread.BZIP2: "bz2"}


def _streamed_member(ctx: FormatContext, buf, m: zipread.Member,
                     limit: int) -> decompress.Decoded | None:
    """A compressed pickle member past the decode budget, read to its end as a stream
    (`squeeze.content`: long values passed over, never held); None where it is no pickle,
    cannot be squeezed or decodes past the scan's stream limit."""
    kind = _STREAMED_METHODS.get(m.method)
    if kind is None or m.data_offset < 0:
        return None
    with memoryview(buf) as whole, whole[m.data_offset:m.data_offset + m.compressed_size] as raw:
        decoded = squeeze.content(raw, kind, limit, ctx.budget.streamed, crc=True)
    ctx.budget.decode(len(decoded.data))
    ctx.budget.streamed = max(ctx.budget.streamed - len(decoded.data) - decoded.passed_over, 0)
    if decoded.over_limit or decoded.failed or decoded.crc is None:
        return None
    ctx.find(Severity.INFO, "stream-passed-over",
             f"{decoded.passed_over} bytes of long string or bytes values in the member were "
             "inflated and passed over (the scan keeps only their lengths)", m.name)
    return decoded


def _finish_reading(ctx: FormatContext, reading: _Reading, members: list[zipread.Member],
                    span: tuple[int, int] | None) -> None:
    """What the whole reading decides: the members zipfile hands numpy.load otherwise, torch's
    own reading of a damaged archive, the CRC checks left out, the flags torch cannot read,
    and the storage references against the records."""
    for name, data in (reading.handed or {}).items():
        if reading.walked.get(name) != data:
            _scan_handed_out(ctx, name, data)
    if reading.torch_reads and reading.damaged:
        ctx.ask_torch(span, reading.torch_walked)
    if reading.skipped_crc:
        ctx.find(Severity.INFO, "zip-crc-skipped",
                 f"CRC-32 of {reading.skipped_crc} large tensor records not "
                 "checked (scan budget); run `ckpt-inspector inspect` for a full check")
    prefix = reading.prefix
    if reading.torch_zip:
        for m in members:
            if m.unsupported_by_miniz and (m.name in reading.records or zipread.torch_name(
                    m.name[len(prefix) + 1:]) in TORCH_READS):
                ctx.block(f"{m.name} has encryption/patch flag bits torch cannot read")
    by_name = {m.name: m for m in members}
    if reading.package:  # PackageImporter reads storage KEY from .data/KEY.storage
        by_name |= torch_package.records(reading.package, by_name)
    check_records(ctx, reading.storages, by_name, prefix, reading.kind)


def _handed_out(buf, span: tuple[int, int] | None) -> dict[str, bytes]:
    """The .npy members numpy.load reads from a damaged archive, as its reader, zipfile, hands
    them out (CRC checked): none when it refuses the archive."""
    start, end = span or (0, len(buf))
    out: dict[str, bytes] = {}
    with memoryview(buf) as whole, MapIO(whole[start:end]) as fh:
        try:
            archive = zipfile.ZipFile(fh)
        except Exception:
            return out
        with archive:
            for info in archive.infolist()[:MAX_HANDED_OUT]:
                if info.filename.endswith(".npy") and info.file_size <= MAX_MEMBER_BYTES:
                    with contextlib.suppress(Exception):
                        out[info.filename] = archive.read(info)
    return out


def _scan_handed_out(ctx: FormatContext, name: str, data: bytes) -> None:
    """A member zipfile hands numpy.load with other bytes than the scan's own reading of the
    archive gave (or none): numpy reads these, so they are scanned too."""
    ctx.find(Severity.SUSPICIOUS, "zip-reader-differential",
             "Python's zipfile hands numpy.load other bytes for this member than the "
             "archive's own records give; both were scanned", name)
    if data.startswith(NPY_MAGIC):
        scan_member_npy(ctx, data, name)


MAX_HANDED_OUT = 1000
"""Directory entries of one damaged archive whose loader reading is compared."""


def _read_before(ctx: FormatContext, m: zipread.Member) -> bool:
    """Whether another directory entry of this file already pointed at `m`'s bytes: each
    distinct record is read (and decoded) once, however many entries name it."""
    if m.data_offset < 0:
        return False
    first = ctx.records.setdefault((m.data_offset, m.compressed_size, m.method), m)
    if first is m:
        return False
    ctx.find(Severity.SUSPICIOUS, "zip-shared-record",
             f"its directory entry points at the bytes of {first.name!r}, scanned once; "
             "a well-formed archive gives each member its own bytes", m.name)
    return True


def _crc32(buf, start: int, length: int) -> int:
    """CRC-32 of a slice without copying it: slicing an mmap copies under the GIL, while
    zlib.crc32 over a view releases the GIL, so a GUI thread keeps running meanwhile."""
    # read ahead even where the file is MADV_RANDOM; a record within a page or two gains
    # nothing from it (a 5,000-tensor file made 5,000 system calls)
    if isinstance(buf, mmap.mmap) and length > 2 * mmap.PAGESIZE:
        floor = start - start % mmap.PAGESIZE
        buf.madvise(mmap.MADV_WILLNEED, floor, start + length - floor)
    with memoryview(buf) as whole, whole[start:start + length] as part:
        return zlib.crc32(part)


def scan_listed_items(ctx: FormatContext, buf) -> None:
    """A DCP data file that is not back-to-back archives: DCP still loads whatever lies at each
    range its `.metadata` lists, so each is read in full (the whole file when none is known)."""
    why = "a data file that is not back-to-back archives (DCP loads any range .metadata lists)"
    listed = [(o, o + n) for o, n in sorted(set(ctx.archives))]
    for start, end in listed or [(0, len(buf))]:
        scan_gap(ctx, buf, start, end, why)


register(FormatSpec(Format.ZIP, "zip archive", loaders=("zipfile",), scan=scan_zip,
                    kinds=("zip",)))
