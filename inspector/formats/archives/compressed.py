"""Compressed streams: gzip, bz2, xz, LZMA-alone, raw zlib, lz4 and zstd (every member of a
multi-member file), each header by its real reader's rules (`formats.archives.decompress`).
Content that is a pickle is `compressed-pickle` (joblib style); content that is an archive (a
`.tar.gz` of a model folder) is `compressed-archive`, scanned as that archive. A file whose
first bytes are also a weak zlib or LZMA header is read that way too
(`scan_also_compressed`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.core.vocabulary import Format, Severity
from inspector.formats.archives import decompress, squeeze
from inspector.formats.pickle_stream import pickle_head, scan_also_as_pickle, scan_stream
from inspector.formats.registry import HEAD_BYTES, FormatSpec, register
from inspector.formats.sniffing import COMPRESSION_MAGIC, NESTED_KINDS, is_archive, sniff
from inspector.scan.budget import DECODED_BASE, DECODED_PER_BYTE, MAX_STREAMED, BudgetSpent
from inspector.scan.pickles.walker import imports

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext


def scan_compressed(ctx: FormatContext, buf, algo: str) -> None:
    res = ctx.result
    try:
        decoded = read_content(ctx, buf, algo)
    except decompress.CodecMissing as exc:
        res.format = Format.COMPRESSED_PICKLE
        ctx.not_fully_read("compressed-unreadable", f"{exc}; its content was not scanned")
        return
    scan_decoded(ctx, buf, decoded, algo)


def read_content(ctx: FormatContext, buf, algo: str) -> decompress.Decoded:
    """A compressed stream's content within the file's budget (`squeeze.content`): held whole
    where it fits the decode budget, a pickle past it read to its end as a stream, an archive
    past it spilled to a temporary file (counted as streamed, not held)."""
    budget = ctx.budget
    decoded = squeeze.content(buf, algo, ctx.decoded_limit(), budget.streamed)
    held = 0 if decoded.spilled else len(decoded.data)
    budget.decode(held)
    budget.streamed = max(budget.streamed - len(decoded.data) - decoded.passed_over, 0)
    return decoded


LIMITS = (f"the scan holds {DECODED_BASE >> 20} MiB + {DECODED_PER_BYTE} bytes per byte of "
          f"the file and streams {MAX_STREAMED >> 20} MiB per file")


def scan_decoded(ctx: FormatContext, buf, decoded: decompress.Decoded, algo: str) -> None:
    """The content of a compressed stream (`buf`): a pickle (joblib style) or an archive. Where
    a data error cut the stream, the scan reads all it could decode, but the loaders' reading
    is what the stdlib's own decoder hands them before the error (`decompress.handed_out`):
    the rest is read apart."""
    res = ctx.result
    if decoded.over_limit and not decoded.cap_reached:
        ctx.not_fully_read("scan-budget", f"{algo} {decoded.incomplete} ({LIMITS}); the rest "
                           "was not read")
    elif decoded.incomplete and not decoded.cap_reached:
        ctx.not_fully_read("compressed-unreadable", decoded.incomplete)
    if decoded.passed_over:
        ctx.find(Severity.INFO, "stream-passed-over",
                 f"{decoded.passed_over} bytes of long string or bytes values in the {algo} "
                 "content were decoded and passed over (the scan keeps only their lengths)")
    # content an archive reader takes is that archive first, as `sniff` orders a whole file: a
    # tar whose first name opens like a pickle (`tar czf x.tar.gz -C dir .` writes './') is
    # still unpacked member by member; its pickle reading counts only where it imports
    archive = is_archive(decoded.data)
    if archive:
        res.format = Format.COMPRESSED_ARCHIVE
    with ctx.read_apart(decoded.data, decoded.failed):
        streamed = (scan_also_as_pickle(ctx, decoded.data) if archive
                    else scan_stream(ctx, decoded.data, None, False))
    if decoded.failed:
        handed = decompress.handed_out(buf, algo, len(decoded.data))
        ctx.budget.decode(len(handed))
        ctx.read_also(handed, decoded.data)
    if archive and ctx.scan_nested(decoded.data, f"<{algo} content>"):
        res.format = Format.COMPRESSED_ARCHIVE
    elif not streamed:
        raise ValueError(f"{algo} content is not a pickle")
    else:
        res.format = Format.COMPRESSED_PICKLE
        members = f" ({decoded.members} members)" if decoded.members > 1 else ""
        # its imports decide as a plain pickle's do; a part left unread was reported above
        ctx.find(Severity.INFO, "compressed-pickle",
                 f"{algo}-compressed pickle{members}: loaders such "
                 "as joblib unpickle it with no weights_only protection")
    if decoded.cap_reached:  # the file's streams are spent: what was read is kept, then stop
        raise BudgetSpent(f"{algo} {decoded.incomplete} ({LIMITS})")


PREFIX_BYTES = 1 << 16  # content decoded to tell a stream from bytes that merely decode


def scan_also_compressed(ctx: FormatContext, buf) -> None:
    """A file whose first bytes are also a zlib or LZMA-alone header that the real decoder
    takes (weak magic numbers whose first byte is also an opcode, so `sniffing.sniff` read it as
    a pickle or as nothing): `zlib.decompress` and `lzma` read it as a stream, so where its
    content is a pickle or an archive that is scanned too, and the worst wins. Where the first
    reading found nothing at all, this reading is the file's."""
    res = ctx.result
    head = bytes(buf[:512])
    for algo in decompress.TRIED_KINDS:
        if not decompress.accepts(head, algo):
            continue
        prefix = ctx.decode(buf, algo, PREFIX_BYTES).data
        alone = res.error is not None and res.error.startswith("not a model file")
        if not _content_loads(ctx, prefix, alone):
            continue
        decoded = read_content(ctx, buf, algo)
        fmt, error = res.format, res.error
        res.error = None
        try:
            scan_decoded(ctx, buf, decoded, algo)
        except ValueError:
            res.error = error  # its content is no pickle after all
            continue
        if not alone:
            res.format = fmt
            ctx.find(Severity.SUSPICIOUS, "polyglot",
                     f"the {fmt} file is also a {algo} stream whose content loads: "
                     f"{algo} readers unpickle that, so it was scanned too")


def _content_loads(ctx: FormatContext, prefix: bytes, alone: bool) -> bool:
    """Whether decoded bytes open like a pickle or an archive a loader reads (not the noise a
    decoder makes of other bytes). `alone`: no other reading of the file found anything, so a
    pickle that walks cleanly through the prefix counts too."""
    if not prefix:
        return False
    kind = sniff(prefix[:512], len(prefix))
    if pickle_head(prefix[:2]) or kind in NESTED_KINDS:
        return True
    probe = ctx.probe(prefix)
    return imports(probe) or (alone and (probe.stopped or (
        len(prefix) == PREFIX_BYTES and (probe.error or "").startswith("truncated"))))


def scan_compressed_file(ctx: FormatContext, buf) -> None:
    """A whole compressed file, by the stream kind the built-in chain named."""
    kind = sniff(bytes(buf[:HEAD_BYTES]), len(buf))
    scan_compressed(ctx, buf, kind.split(":", 1)[1])


PICKLE_LOADERS = ("pickle.load", "torch.load(weights_only=False)", "joblib.load")
register(FormatSpec(Format.COMPRESSED_PICKLE, "compressed pickle (joblib)", (".joblib",),
                    holds_code=True, loaders=PICKLE_LOADERS, scan=scan_compressed_file,
                    kinds=tuple(f"compressed:{k}" for k in dict.fromkeys(
                        (*COMPRESSION_MAGIC.values(), *decompress.TRIED_KINDS)))))
register(FormatSpec(Format.COMPRESSED_ARCHIVE, "compressed archive", loaders=("tarfile",)))
