"""Static scan of one file or many: format, imports, findings, verdict. Nothing is executed.

`scan_file(path)` reads the file (memory-mapped), detects its format from the bytes and hands
it to that format's module (`formats`), which walks every pickle it holds through the scan
context (`scan.context`); this module is the orchestration: the run, the budget, the
fallback and second readings every file gets, folders and the loaders' own readings.
"""

from __future__ import annotations

import gc
import mmap
import os
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from inspector import formats
from inspector.core.verdict import worst
from inspector.core.vocabulary import Format, Severity, Verdict
from inspector.formats.archives import squeeze, zipread
from inspector.formats.archives.compressed import scan_also_compressed
from inspector.formats.archives.tar import scan_also_as_tar
from inspector.formats.archives.zip_archive import scan_listed_items
from inspector.formats.pickle_stream import scan_also_as_pickle, scan_stream
from inspector.layout.dcp_items import METADATA_NAME, listed_archives
from inspector.scan import readings, remote_code
from inspector.scan.budget import (  # noqa: F401 (MAX_LISTED_PICKLES: part of the interface)
    CRC_BUDGET,
    MAX_DECOMPRESSED,
    MAX_LISTED_PICKLES,
    MAX_MEMBER_BYTES,
    MAX_STREAMED,
    BudgetSpent,
    ScanBudget,
)
from inspector.scan.context import ScanContext, not_a_checkpoint
from inspector.scan.discover import Found, discover, discover_entries, outside_items
from inspector.scan.pickles.policy import weights_only_rules
from inspector.scan.readings import SMALL_FILE, batch_full, file_size
from inspector.scan.result import Finding, GlobalUse, ScanResult  # noqa: F401 (re-exported)


def _scan_buffer(ctx: ScanContext, buf, size: int) -> None:
    """Read `buf` as its format's module reads it (a module's own sniff first, then the built-in
    chain, `formats.sniff`, whose first guess names the record that reads it), then the
    readings every file gets: the raw pickle reading where that fails, and the second readings
    of a polyglot. Nested content comes back here through `ScanContext.scan_nested`."""
    res = ctx.result
    head = bytes(buf[:formats.HEAD_BYTES])
    spec = formats.detect(head, size)
    if spec is not None:  # a module's own sniff names the format
        kind = res.format = spec.format
    else:
        kind = formats.sniff(head, size)
        spec = formats.by_kind(kind)
    try:
        spec.scan(ctx, buf)
    except BudgetSpent:
        raise
    except Exception as exc:  # any parser failure: try the raw pickle reading
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        if scan_stream(ctx, buf, None, False):
            res.format = Format.PICKLE
            ctx.find(Severity.SUSPICIOUS, "format-fallback",
                     f"{kind} parse failed ({reason}); the bytes "
                     "were scanned as a raw pickle")
        elif not res.findings and not ctx.uses and kind == Format.ZIP:
            # zip magic without an end record: the tail is gone (an interrupted save, a
            # partial download), which is damage, not an unknown format
            res.error = f"damaged zip file: {reason}"
            ctx.find(Severity.SUSPICIOUS, "zip-truncated",
                     "the archive starts as a zip but has no end record: the file was cut "
                     f"short (an interrupted save or a partial download); {reason}")
        elif not res.findings and not ctx.uses:
            res.error = f"not a readable {kind} file: {reason}"
        else:
            ctx.not_fully_read("format-unreadable", f"{kind} parse failed: {reason}")
        if kind != Format.TAR:
            # a tar whose first member name opens with another format's magic ('BZh...',
            # 'PK\x03\x04...'): that format's parse fails, and tarfile unpacks it all the same
            scan_also_as_tar(ctx, buf)
        return
    # torch.load and numpy.load take a zip's own path; pickle.load stops at its first byte
    if kind != Format.ZIP and res.format not in (Format.PICKLE, Format.PYTORCH_LEGACY,
                                                 Format.UNKNOWN):
        scan_also_as_pickle(ctx, buf)
    if kind != Format.TAR:  # a zip too: tarfile reads a tar header at the start, the zip's end
        scan_also_as_tar(ctx, buf)
    if kind != Format.ZIP and not kind.startswith("compressed:"):
        scan_also_compressed(ctx, buf)
    if kind != Format.ZIP and ctx.archives is not None:
        scan_listed_items(ctx, buf)


def scan_bytes(data: bytes, path: str = "<bytes>") -> ScanResult:
    """Scan in-memory file content."""
    return _run(path, len(data), lambda: data)


def _run(path: str, size: int, load, archives: list[tuple[int, int]] | None = None,
         crc_budget: int = CRC_BUDGET) -> ScanResult:
    t0 = time.perf_counter()
    res = ScanResult(path=path, size=size)
    ctx = ScanContext(res, weights_only_rules(), archives, dispatch=_scan_buffer)
    ctx.crc_budget = crc_budget
    # The walk allocates many small acyclic objects; cyclic GC passes over a host process's
    # heap (torch, Qt) would cost more than the scan itself.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if size == 0:
            res.error = "empty file"
        else:
            _scan_buffer(ctx, load(), size)
            ctx.budget.check()  # the last walk may have spent it
    except BudgetSpent as exc:  # fast and bounded: what was found stays, the rest is unread
        ctx.not_fully_read("scan-budget", f"{exc}; the scan stopped there")
    except Exception as exc:  # a scanner bug must not hide what was found so far
        res.error = " ".join(f"scan stopped: {type(exc).__name__}: {exc}".split())[:300]
    finally:
        if gc_was_enabled:
            gc.enable()
    ctx.finish()
    if size:
        res._blobs = readings.blobs_of(ctx.blobs.values(), load(), path, size,
                                       ctx.torch_archives)
        if not readings.is_deferred():
            readings.read([res])
    res.elapsed_ms = (time.perf_counter() - t0) * 1000
    return res


def scan_file(path: str | os.PathLike, archives: list[tuple[int, int]] | None = None,
              crc_budget: int = CRC_BUDGET) -> ScanResult:
    """Statically scan one file; never raises for a bad file (the result carries the error).

    `crc_budget`: tensor record bytes whose CRC-32 is checked (the app's full check passes
    more than the file holds).

    `archives`: the (offset, length) of each item a DCP `.metadata` lists in this `.distcp`
    file (`layout.dcp_items`); checked, they spare the search of every page for archive ends.

    With a reader, its jailed worker starts while the file is walked (`readings.read_while`)."""
    p = os.fspath(path)
    if readings.is_deferred() or readings.current_reader() is None:
        return _scan_file(p, archives, crc_budget)
    in_place = [p] if file_size(p) > SMALL_FILE else []
    return readings.read_while(map(_scan_file, [p], [archives], [crc_budget]), in_place)[0]


def _scan_file(p: str, archives: list[tuple[int, int]] | None, crc_budget: int) -> ScanResult:
    """`scan_file` of the walk alone (readings as `_run` leaves them)."""
    try:
        # no file object: this is most of a small file's cost; O_NONBLOCK so that a named
        # pipe in a folder cannot hang the scan (it has no effect on regular files)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return ScanResult(path=p, verdict=Verdict.ERROR,
                                  error="cannot read: not a regular file")
            size = st.st_size
            if size <= SMALL_FILE:
                chunks = []
                while chunk := os.read(fd, SMALL_FILE + 1 - sum(map(len, chunks))):
                    chunks.append(chunk)
                data = b"".join(chunks)
                return _run(p, len(data), lambda: data, archives, crc_budget)
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
                return _run(p, size, lambda: mm, archives, crc_budget)
        finally:
            os.close(fd)
    except OSError as exc:
        return ScanResult(path=p, verdict=Verdict.ERROR,
                          error=f"cannot read: {exc.strerror or exc}")


def iter_files(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    """Every file under the given paths, as `scan.discover` lists them."""
    for found in discover(paths):
        yield found.path


def scan_paths(paths: Iterable[str | os.PathLike]) -> Iterator[ScanResult]:
    """Scan files and folders (recursively, every file whatever its extension). A folder's
    file that is not a checkpoint at all (JSON, text, tokenizer files, images) is `skipped`;
    a file that cannot even be scanned is reported, never left out."""
    batch: list[Found] = []
    size = 0
    for found in discover_entries(paths):
        batch.append(found)
        size += file_size(found.path)
        if batch_full(len(batch), size):
            yield from scan_batch(batch)
            batch, size = [], 0
    yield from scan_batch(batch)


def scan_batch(founds: list[Found]) -> list[ScanResult]:
    """`scan_found` of each file, with the loaders' readings of all of them in one jailed job
    whose worker starts while they are walked (`readings.read_batch`)."""
    return readings.read_batch(founds, scan_found)


def scan_found(found: Found) -> ScanResult:
    """Scan one discovered file; `skipped` when a folder's file is no checkpoint at all. A
    folder entry the walk did not enter gets its line with the walk's reason."""
    if found.unwalked is not None:
        return _unwalked(found)
    try:
        res = scan_dcp_aware(found.path)
        _check_index(res)
        remote_code.judge(res)  # a JSON naming code, a .py as code: never skipped
        for other in found.also:  # the same file under its other names: a loader's too
            _merge_name(res, found.path, other)
    except Exception as exc:  # scan_file never raises for a bad file; a bug must not hide
        res = ScanResult(path=os.fspath(found.path), verdict=Verdict.ERROR,
                         error=" ".join(f"scan failed: {type(exc).__name__}: {exc}"
                                        .split())[:300])
    # skipped only when positively something else (text, JSON, an image...); a reading that
    # then yields a pickle takes that back (`reading_apply.apply`)
    if found.in_folder and not_a_checkpoint(res) and _other(found.path, res):
        res.verdict = Verdict.SKIPPED
    if found.outside is not None:
        res.findings.append(Finding(Severity.INFO, "outside-folder",
                                    f"reached through a link, it lies at {found.outside}, "
                                    "outside the scanned folder: a loader given the folder "
                                    "reads it, so it was scanned"))
    if found.also:
        _name_also(res, found.path, found.also)
    return res


def _relative(path: Path, primary: Path) -> str:
    """`path` as seen from the folder of the line's own name."""
    return os.path.relpath(path, primary.parent)


def _reads_alike(primary: Path, other: Path) -> bool:
    """Whether a scan of the file's bytes reads the same under either name: the same folder
    (an ONNX file's external data, a DCP folder's `.metadata`) and the same suffix (the DCP
    data files, `*.safetensors`), neither a DCP `.metadata`. Only the name's own judges
    (`remote_code`) then tell them apart."""
    return (primary.parent == other.parent and primary.suffix == other.suffix
            and METADATA_NAME not in (primary.name, other.name))


def _as_named(res: ScanResult, primary: Path, other: Path) -> ScanResult:
    """The file judged as a loader opening it by `other` judges it: its bytes scanned again
    only where that name reads them differently (`_reads_alike`)."""
    if _reads_alike(primary, other):
        alias = ScanResult(path=os.fspath(other), format=res.format, verdict=res.verdict,
                           error=res.error)
    else:
        alias = scan_dcp_aware(other)
        _check_index(alias)
    remote_code.judge(alias)
    return alias


def _merge_name(res: ScanResult, primary: Path, other: Path) -> None:
    """Fold into the line of `primary` what the file means under its other name `other`
    (a `config.json` hard-linked to `notes.txt` names code to `from_pretrained`): each import
    and finding the line lacks, the finding saying which name it is about, and the verdict."""
    alias = _as_named(res, primary, other)
    have = {(g.module, g.name) for g in res.globals}
    imports = [g for g in alias.globals if (g.module, g.name) not in have]
    seen = {(f.code, f.message) for f in res.findings}
    name = _relative(other, primary)
    findings = [Finding(f.severity, f.code, f"as {name}: {f.message}", f.member, f.offset, f.call)
                for f in alias.findings if (f.code, f.message) not in seen]
    if not imports and not findings:
        return
    cleared = not_a_checkpoint(res)  # no checkpoint under this name; under the other, these
    if cleared:
        res.error = None
    res.globals += imports
    res.findings += findings
    verdict = worst(([] if cleared else [res.verdict]) + [g.severity for g in res.globals]
                    + [f.severity for f in res.findings])
    res.verdict = Verdict.ERROR if res.error and verdict != Verdict.DANGEROUS else verdict


def _name_also(res: ScanResult, primary: Path, also: tuple[Path, ...]) -> None:
    """Say on the line every other name of its file (none is left out of the report): in the
    reason of a line that has one (a skipped file stays skipped), else as an `info` finding."""
    names = ", ".join(_relative(p, primary) for p in also)
    what = f"the same file is also named {names} (each name judged as a loader opens it)"
    if res.error:
        res.error = f"{res.error}; {what}"
    else:
        res.findings.append(Finding(Severity.INFO, "same-file", what))


def _unwalked(found: Found) -> ScanResult:
    """The line of a folder entry the walk did not enter (a loop, a link too far out, a folder
    it could not read): its reason, and the verdict the walk gave it."""
    why, verdict = found.unwalked.why, found.unwalked.verdict
    res = ScanResult(path=os.fspath(found.path), format=Format.UNKNOWN, verdict=verdict)
    if verdict == Verdict.SUSPICIOUS:
        res.findings.append(Finding(Severity.SUSPICIOUS, "folder-not-walked", why))
        res.weights_only_blockers.append(f"folder not scanned: {why}")
    else:
        res.error = why
    return res


def _other(path, res: ScanResult) -> bool:
    """Whether the file is positively no checkpoint (`other_files`); a file that cannot be
    read as a regular file (a pipe, a dangling link) is none either."""
    from inspector.scan.other_files import identify

    if res.error and res.error.startswith(("cannot read: not a regular file",
                                           "cannot read: No such file", "empty file")):
        return True
    what = identify(path)
    if what is not None:
        res.error = f"{res.error} ({what})" if res.error else what
    return what is not None


MAX_INDEX_BYTES = 64 << 20


def index_outside_files(path: str | os.PathLike) -> list[str]:
    """The shard names a `*.index.json` maps weights to that lie outside its folder (absolute,
    with a `..` part, or behind a folder link): transformers joins the folder and the name as
    given and loads them."""
    import json

    name = os.fspath(path)
    if not name.endswith(".index.json"):
        return []
    try:
        with open(name, "rb") as fh:
            raw = fh.read(MAX_INDEX_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_INDEX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return []
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        return []
    folder = os.path.dirname(name)
    return sorted({v for v in weight_map.values() if isinstance(v, str) and _leaves(folder, v)})


def _leaves(folder: str, name: str) -> bool:
    """Whether `folder`/`name` lies outside `folder` or behind a folder link (which the folder
    walk follows only within its bounds, `scan.discover`)."""
    if zipread.unsafe_name(name):
        return True
    parts = name.replace("\\", "/").split("/")
    return any(os.path.islink(os.path.join(folder, *parts[:i])) for i in range(1, len(parts)))


def _check_index(res: ScanResult) -> None:
    """An index that maps weights to files outside its folder is suspicious: those files are
    loaded with the checkpoint, and a scan of the folder never reads them."""
    outside = index_outside_files(res.path)
    if not outside:
        return
    if not_a_checkpoint(res):  # the JSON itself is no pickle: its one problem is this
        res.error, res.verdict = None, Verdict.SAFE
    names = ", ".join(repr(n) for n in outside[:3])
    res.findings.append(Finding(Severity.SUSPICIOUS, "index-outside-file",
                                f"weight_map names {names}, outside its folder or behind a folder "
                                "link: transformers loads them with this checkpoint, and a scan "
                                "of this file alone never reads them"))
    res.verdict = worst([res.verdict, Verdict.SUSPICIOUS])


def scan_dcp_aware(path: str | os.PathLike) -> ScanResult:
    """`scan_file` of a file that may belong to a DCP folder: a data file through the archives
    its `.metadata` lists (checked, `layout.dcp_items`), a `.metadata` that lists items in files
    outside its folder suspicious (DCP loads them; a scan of the folder never reads them)."""
    res = scan_file(path, listed_archives(path))
    outside = outside_items(path)
    if outside:
        names = ", ".join(repr(n) for n in outside[:3])
        res.findings.append(Finding(Severity.SUSPICIOUS, "dcp-outside-file",
                                    f"lists items in {names}, outside its folder: DCP loads "
                                    "them, and they were not scanned"))
        res.verdict = worst([res.verdict, Verdict.SUSPICIOUS])
    return res


def pickle_source(path: str | os.PathLike, member: str | None) -> bytes:
    """Bytes that a `ScanResult.pickles` entry's offsets point into (for `disassemble`): the
    zip member named `member`, the content of a compressed pickle, or the file itself."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if member is not None:
                found = [m for m in zipread.read_zip(buf).members if m.name == member]
                if not found:
                    raise KeyError(f"{member} is not in {path}")
                return zipread.member_bytes(buf, found[0], MAX_MEMBER_BYTES)
            kind = formats.sniff(bytes(buf[:512]), len(buf))
            if kind.startswith("compressed:"):
                # as the scan read it (`squeeze.content`), so the walk's offsets point into it
                hold = min(MAX_DECOMPRESSED, ScanBudget.for_size(len(buf)).decoded)
                return squeeze.content(buf, kind.split(":", 1)[1], hold, MAX_STREAMED).data
            return bytes(buf)
