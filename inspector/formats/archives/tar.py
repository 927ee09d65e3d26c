"""Tar archives: torch's legacy tar (`storages`, `tensors` and `pickle` members, which
`torch.load` unpickles and never reads with weights_only=True) and any other tar, every member
scanned by its content. A file Python's `tarfile` also takes as a tar (a checksum
`sniffing.is_tar` refuses) is read as one too (`scan_also_as_tar`)."""

from __future__ import annotations

import contextlib
import mmap
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Format, Severity
from inspector.formats.archives import unpack
from inspector.formats.pickle_stream import carve
from inspector.formats.registry import FormatSpec, register
from inspector.formats.sniffing import is_archive, tarfile_takes
from inspector.formats.torch_zip import storage_itemsize
from inspector.scan.budget import MAX_FORKS, MAX_MEMBER_BYTES
from inspector.scan.pickles.walker import PickleScan, looks_like_pickle

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext


_TORCH_TAR = frozenset({"storages", "tensors", "pickle"})


def scan_tar(ctx: FormatContext, buf) -> None:
    """A tar archive; torch's legacy tar format (`storages`, `tensors`, `pickle` members) is
    read by torch.load with weights_only=False: every member's pickles are scanned."""
    import io
    import tarfile

    res = ctx.result
    fileobj = buf if isinstance(buf, mmap.mmap) else io.BytesIO(buf)
    fileobj.seek(0)
    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        every = tar.getmembers()
    members = [m for m in every if _extracted_as_file(m)]
    names = {m.name for m in members}
    # torch.load extracts its legacy tar's members (no extraction filter) and unpickles them: a
    # link reads the file it points at (a hard link to an earlier member reads that member,
    # scanned below)
    links = [m for m in every if m.name in _TORCH_TAR and (
        m.issym() or (m.islnk() and m.linkname not in names))]
    torch_tar = names | {m.name for m in links} >= _TORCH_TAR
    res.format = Format.PYTORCH_TAR if torch_tar else Format.TAR
    if torch_tar:
        ctx.find(Severity.SUSPICIOUS, "torch-legacy-tar",
                 "torch's legacy tar format: torch.load unpickles "
                 "its storages, tensors and pickle members and refuses weights_only=True")
        ctx.block("torch.load refuses weights_only=True for the legacy tar format")
    for m in links:
        ctx.find(Severity.SUSPICIOUS, "tar-link",
                 f"member is a link to {m.linkname!r}: extracting it reads that file, which lies "
                 "outside the archive and was not scanned", m.name)
        ctx.block(f"tar member {m.name} is a link")
    escaped = unpack.report(ctx, [_entry(m) for m in every])
    found = 0
    for m in members:
        if m.size > MAX_MEMBER_BYTES:
            ctx.not_fully_read("tar-member-too-large", f"{m.size}-byte member", m.name)
            continue
        if m.sparse is not None:
            # a GNU sparse file: extracted (as torch.load extracts it), its holes are zeros
            # between the stored pieces; read raw, the pieces run together and a string's
            # length can swallow the opcodes after a hole
            if m.size > ctx.decoded_limit(MAX_SPARSE_BYTES):
                ctx.not_fully_read("tar-member-too-large", f"{m.size}-byte sparse member",
                                   m.name)
                continue
            data = _tar_extract(fileobj, m)
            ctx.budget.decode(len(data))
        else:
            data = bytes(buf[m.offset_data:m.offset_data + m.size])
        walked, covered = _tar_member_pickles(ctx, data, m.name)
        found += walked
        # a nested tar whose first name opens like a pickle ('./') is still an archive
        if is_archive(data) and ctx.scan_nested(data, m.name):
            found += 1
            continue  # its pickles were found inside it
        carve(ctx, data, m.name, covered)
    if not found and not ctx.uses and not links and not escaped:
        raise ValueError("tar archive without pickles")


def _extracted_as_file(m) -> bool:
    """Whether tarfile extracts the member as a regular file and `extractfile` hands out its
    bytes: the regular types (contiguous and GNU sparse files among them) and every type flag
    tarfile does not know (its `makeunknown` writes them as regular files)."""
    import tarfile

    return m.isreg() or m.type not in tarfile.SUPPORTED_TYPES


def _entry(m) -> unpack.Entry:
    """A tar member as `tarfile.extractall` places it."""
    if m.issym():
        return unpack.Entry(m.name, unpack.Kind.SYMLINK, m.linkname)
    if m.islnk():
        return unpack.Entry(m.name, unpack.Kind.HARDLINK, m.linkname)
    return unpack.Entry(m.name, unpack.Kind.FOLDER if m.isdir() else unpack.Kind.FILE)


MAX_SPARSE_BYTES = 64 << 20  # a sparse member expands from a few stored bytes: kept small


def _tar_extract(fileobj, member) -> bytes:
    """A member's content as tarfile extracts it (holes of a sparse file filled)."""
    import tarfile

    fileobj.seek(0)
    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        handle = tar.extractfile(member)
        return handle.read() if handle is not None else b""


def _tar_member_pickles(ctx: FormatContext, data: bytes, member: str, pos: int = 0,
                        count: int = 0) -> tuple[int, int]:
    """Walk a tar member's pickles as torch's legacy_load reads them: back to back, and in
    `storages` / `tensors` past the raw record after each storage's or tensor's pickle.
    `count`: pickles read before `pos`. Returns (pickles walked, where the walk stopped)."""
    walked = 0
    while pos < len(data):
        scan = ctx.walk(data, pos)
        if not looks_like_pickle(scan):
            break
        ctx.add_pickle(scan, member, False)
        walked, count, pos = walked + 1, count + 1, scan.end
        if not scan.stopped:
            break
        after = _after_record(data, member, scan, count)
        if not after:
            continue
        for other in after[1:]:  # where a reading with another element size goes on
            if ctx.forks >= MAX_FORKS:
                ctx.not_fully_read("tar-storage-ambiguous", "more storages of unclear element "
                                   "size than the scan follows", member)
                break
            ctx.forks += 1
            walked += _tar_member_pickles(ctx, data, member, other, count)[0]
        pos = after[0]
        if pos < scan.end:
            break  # a negative count: the walk cannot follow
    return walked, pos


def _after_record(data: bytes, member: str, scan: PickleScan, count: int) -> list[int]:
    """Where torch reads its next pickle after the raw record that follows `scan` (the first
    is the likeliest); [] where no record follows. A storage's record is an int64 element count
    and that many elements of `storage_type._dtype`, the third item of the pickled (key,
    location, storage_type): any storage class the pickle names may be that item, so each
    element size it names is one reading."""
    pos = scan.end
    if member == "storages" and pos + 8 <= len(data):
        numel = int.from_bytes(data[pos:pos + 8], "little", signed=True)
        sizes = [s for g in reversed(scan.globals) if (s := storage_itemsize(g.key))]
        return [pos + 8 + size * numel for size in dict.fromkeys(sizes)]
    if member == "tensors" and count > 1 and pos + 4 <= len(data):
        # after (key, storage id, type): int32 ndim, 4 bytes, sizes, strides, offset
        return [pos + 16 + 16 * int.from_bytes(data[pos:pos + 4], "little", signed=True)]
    return []


def scan_also_as_tar(ctx: FormatContext, buf) -> None:
    """torch.load's legacy path opens anything Python's tarfile accepts as its tar format, and
    tarfile takes headers `sniffing.is_tar` does not (a checksum written '0_123456' or after a
    tab): such a file is scanned as a tar too, its own format kept; the worst wins."""
    import tarfile

    if not tarfile_takes(bytes(buf[:512])):
        return
    fmt = ctx.result.format
    ctx.find(Severity.SUSPICIOUS, "polyglot", f"the {fmt} file is also a tar archive to Python's "
             "tarfile: shutil.unpack_archive unpacks its members (and torch.load, where it "
             "takes its tar path, unpickles them), so it was scanned as one too")
    with contextlib.suppress(tarfile.TarError, ValueError):  # no member pickles: it stands
        scan_tar(ctx, buf)
    ctx.result.format = fmt


register(FormatSpec(Format.PYTORCH_TAR, "PyTorch checkpoint, legacy tar", holds_code=True,
                    loaders=("torch.load",)))
register(FormatSpec(Format.TAR, "tar archive", (".tar",), loaders=("tarfile",), scan=scan_tar,
                    kinds=("tar",)))
