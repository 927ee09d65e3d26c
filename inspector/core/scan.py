"""Static scan of one file or many: format, imports, findings, verdict. Nothing is executed.

`scan_file(path)` reads the file (memory-mapped), detects its format from the bytes, walks
every pickle it holds (every zip member whose bytes are a pickle, every pickle of a legacy
stream, the pickle inside object .npy arrays and compressed pickles), classifies each import
and reports what torch.load(weights_only=True) would do with it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import mmap
import os
import stat
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

from inspector.core import decompress, formats, readings, safetensors_header, zipread
from inspector.core.dcp_items import listed_archives, outside_items
from inspector.core.discover import Found, discover
from inspector.core.dtypes import STORAGE_CLASSES
from inspector.core.pickle_scan import (
    Call,
    Limits,
    PickleScan,
    imports,
    imports_or_stops,
    looks_like_pickle,
    scan_pickle,
)
from inspector.core.policy import (
    WeightsOnlyRules,
    call_verdict,
    classify,
    looks_like_code,
    numpy_dtype_class,
    real_name,
    weights_only_rules,
)
from inspector.core.scan_budget import BudgetSpent, ScanBudget
from inspector.core.verdict import rank, worst
from inspector.core.vocabulary import Severity, Verdict

MAX_MEMBER_BYTES = 1 << 30  # a pickle member larger than this is reported, not read
MAX_DECOMPRESSED = 1 << 30
CRC_BUDGET = 64 << 20  # tensor record bytes CRC-checked per file; pickles are always checked
MAX_LISTED_PICKLES = 1000  # `pickles` entries kept for the GUI; every pickle is scanned
SMALL_FILE = 1 << 20  # read whole; larger files are memory-mapped
MAX_NESTING = 3  # pickles inside call arguments inside pickles
MAX_FORKS = 64  # next pickles where a reader without peek() goes on, followed per file
_PROBE = Limits(max_opcodes=100_000)  # a quick look at bytes that are rarely a pickle
_PICKLE_STARTS = formats.PICKLE_FIRST_BYTES | {0x80}
TORCH_WEIGHTS_FORMATS = ("pytorch-zip", "pytorch-legacy", "distcp")
# Members of a torch zip (below its folder) that torch.load opens besides the tensor records.
TORCH_READS = frozenset({"data.pkl", "version", ".data/version", "byteorder",
                         ".data/serialization_id", ".format_version", ".storage_alignment"})
LEGACY_MAGIC_LONG = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
STORAGE_ITEMSIZE = {
    name.removesuffix("Storage"): d.itemsize for name, d in STORAGE_CLASSES.items()
} | {"Untyped": 1}


@dataclass
class GlobalUse:
    """One imported `module.name`, how often the file imports it, and what it means."""

    module: str
    name: str
    count: int
    severity: str
    reason: str
    members: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # pseudo-Python, e.g. `os.system("id")`
    # where each of `calls` is made: {member, offset} of its opcode (offset None in decoded bytes)
    call_sites: list[dict] = field(default_factory=list)

    @property
    def import_name(self) -> str:
        """The import as a user writes it (`os.system` for a pickle's `posix.system`)."""
        return real_name(self.module, self.name)

    def to_json(self) -> dict:
        """Contract form: module, name, count, severity (+ reason, members, import, calls,
        call_sites)."""
        return {"module": self.module, "name": self.name, "count": self.count,
                "severity": self.severity, "reason": self.reason, "members": self.members,
                "import": self.import_name, "calls": self.calls, "call_sites": self.call_sites}


@dataclass
class Finding:
    """A problem other than an import: structure, anomalies, code in arguments."""

    severity: str
    code: str
    message: str
    member: str | None = None
    offset: int | None = None
    call: str | None = None  # the call it concerns, as pseudo-Python

    def to_json(self) -> dict:
        """Contract form (+ call)."""
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "member": self.member, "offset": self.offset, "call": self.call}


@dataclass
class ScanResult:
    """Everything the static scan learned about one file."""

    path: str
    format: str = "unknown"
    verdict: str = Verdict.SAFE
    weights_only_ok: bool = False
    globals: list[GlobalUse] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    weights_only_blockers: list[str] = field(default_factory=list)
    weights_only_source: str = ""
    pickles: list[dict] = field(default_factory=list)
    size: int = 0
    elapsed_ms: float = 0.0
    # what the loaders' own readers still have to read (`core.readings`); never serialised
    _blobs: list = field(default_factory=list, repr=False, compare=False)

    def to_json(self) -> dict:
        """The `scan` contract (README), plus blockers, pickles walked, size and timing."""
        return {
            "path": self.path,
            "format": self.format,
            "verdict": self.verdict,
            "weights_only_ok": self.weights_only_ok,
            "globals": [g.to_json() for g in self.globals],
            "findings": [f.to_json() for f in self.findings],
            "error": self.error,
            "weights_only_blockers": self.weights_only_blockers,
            "weights_only_source": self.weights_only_source,
            "pickles": self.pickles,
            "size": self.size,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }

    @classmethod
    def from_json(cls, data: dict) -> ScanResult:
        """The result back from its contract form (a batch's results file)."""
        known = {f.name for f in fields(cls)} - {"globals", "findings"}
        return cls(**{k: v for k, v in data.items() if k in known},
                   globals=[_from_fields(GlobalUse, g) for g in data.get("globals", ())],
                   findings=[_from_fields(Finding, f) for f in data.get("findings", ())])


def _from_fields(cls: type, data: dict):
    """A dataclass from a contract dict, ignoring keys that are derived, not stored."""
    return cls(**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}})


class _Scan:
    """Accumulates globals, findings and weights_only blockers while one file is walked."""

    def __init__(self, result: ScanResult, rules: WeightsOnlyRules,
                 archives: list[tuple[int, int]] | None = None) -> None:
        self.result = result
        self.rules = rules
        self.uses: dict[tuple[str, str], GlobalUse] = {}
        self.torch_refuses = False
        # shared by every archive of the file: a .distcp file holds one archive per item
        self.crc_budget = CRC_BUDGET
        self.archives = archives
        self.nesting = 0  # archives this file lies inside (`_scan_nested`)
        self.forks = 0  # second readings of pickles followed (`_fold_pickles`)
        # shared with every nested scan: one budget per file (`core.scan_budget`)
        self.budget = ScanBudget.for_size(result.size)
        self.records: dict[tuple[int, int, int], zipread.Member] = {}  # zip records read
        self.blobs: dict[int, readings.Blob] = {}  # every buffer walked, for the real readers
        self.member_of: dict[int, str] = {}  # archive members' buffers, by id, and their names

    def find(self, severity: str, code: str, message: str, member: str | None = None,
             offset: int | None = None, call: str | None = None) -> None:
        findings = self.result.findings
        if len(findings) < 2000 or (severity == Severity.DANGEROUS and len(findings) < 4000):
            findings.append(Finding(severity, code, message, member, offset, call))

    def block(self, reason: str) -> None:
        self.torch_refuses = True
        blockers = self.result.weights_only_blockers
        if reason not in blockers and len(blockers) < 200:
            blockers.append(reason)

    def walk(self, data: bytes, start: int = 0, through: bool = False) -> PickleScan:
        rules, budget = self.rules, self.budget
        budget.check()
        scan = scan_pickle(data, start, allowed=rules.allowed, wo_opcodes=rules.opcodes,
                           through=through, limits=Limits(max_opcodes=budget.opcodes))
        budget.walked(scan.opcodes)
        if scan.frame_misaligned:
            # a FRAME that ends inside an opcode or past STOP: a reader without peek() (torch.load
            # reads data.pkl through io.BytesIO) reads other bytes; what it reads counts too
            budget.check()
            other = scan_pickle(data, start, allowed=rules.allowed, wo_opcodes=rules.opcodes,
                                through=through, unbuffered=True,
                                limits=Limits(max_opcodes=budget.opcodes))
            budget.walked(other.opcodes)
            scan.globals += other.globals
            scan.calls += other.calls
            scan.issues += other.issues
            scan.storages += other.storages
            scan.wo_blockers += [b for b in other.wo_blockers if b not in scan.wo_blockers]
            scan.next_start = other.next_start
        self._keep(data, start, scan)
        return scan

    def _keep(self, data, start: int, scan: PickleScan) -> None:
        """Keep the walked buffer and start for the loaders' own readers (`core.readings`)."""
        blob = self.blobs.get(id(data))
        if blob is None:
            # holding the buffer keeps its id this buffer's while the scan runs
            member = self.member_of.get(id(data))
            blob = self.blobs[id(data)] = readings.Blob(
                member, set(), data=data, kinds=("c", "c-nopeek") if member else
                ("c", "c-nopeek", "py"))
        if len(blob.starts) < 4096:
            blob.starts.add(start)
        blob.walker.update((g.module, g.name) for g in scan.globals)

    def add_pickle(self, scan: PickleScan, member: str | None, torch_reads: bool,
                   depth: int = 0) -> None:
        """Fold one walked pickle into the result; `torch_reads`: torch.load unpickles it.

        Pickles nested in call arguments or decoded from a 7z stream (`depth` > 0) are not
        listed in `pickles`: their offsets point into decoded bytes, not the file or a member.
        """
        if depth == 0 and len(self.result.pickles) < MAX_LISTED_PICKLES:
            self.result.pickles.append({"member": member, "offset": scan.start, "end": scan.end,
                                        "protocol": scan.protocol, "opcodes": scan.opcodes,
                                        "complete": scan.stopped})
        for ref in scan.globals:
            self._use(ref.module, ref.name, member)
            if torch_reads and (ref.key not in self.rules.allowed
                                or ref.module in self.rules.blocked_modules):
                self.block(f"{ref.opcode} {ref.key}")
        for call in scan.calls:
            allowed = call.func is not None and call.func.key in self.rules.allowed
            known = call.func and self.uses.get((call.func.module, call.func.name))
            text = _call_text(call, known)
            if known and known.severity != Severity.SAFE and call.opcode != "BUILD" and (
                    len(known.calls) < 4 and text not in known.calls):
                known.calls.append(text)
                known.call_sites.append({"member": member,
                                         "offset": call.offset if depth == 0 else None})
            # BUILD hands state to __setstate__ (data such as logged command lines, not code);
            # a callable already judged dangerous needs no second reason
            code = None if (allowed or call.opcode == "BUILD"
                            or (known and known.severity == Severity.DANGEROUS)) else next(
                (s for s in call.strings if looks_like_code(s)), None)
            if code is not None:
                target = call.func.key if call.func else "a computed callable"
                self.find(Severity.DANGEROUS, "code-in-arguments",
                          f"{call.opcode} of {target} with an argument that reads like code: "
                          f"{code[:120]!r}", member, call.offset, text)
            judged = known and known.severity == Severity.DANGEROUS  # its call is shown there
            if call.func is not None and not allowed and not judged and (
                    call.opcode == "REDUCE" or (call.opcode in ("INST", "OBJ") and call.args)):
                verdict = call_verdict(call.func.key, False, [f"{call.func.key}({call.args})"],
                                       self.rules)
                if verdict is not None:
                    self.find(verdict.severity, "call-outside-allowlist", verdict.reason,
                              member, call.offset if depth == 0 else None, text)
            if not allowed and depth < MAX_NESTING:
                self._nested(call, member, depth)
            if call.opcode == "REDUCE" and call.func is not None and call.strings and (
                    call.func.key == "numpy.dtype"):
                self._needs_dtype_class(call.strings[0], member)
        for issue in scan.issues:
            severity = Severity.DANGEROUS if issue.dangerous else Severity.SUSPICIOUS
            self.find(severity, issue.code, issue.message, member, issue.offset)
        if torch_reads:
            for reason in scan.wo_blockers:
                self.block(reason)
            if not scan.stopped:
                self.block("pickle does not end cleanly")

    def _needs_dtype_class(self, code: str, member: str | None) -> None:
        """A pickled numpy.dtype(code) also needs its class allowed (torch checks the class of
        what it BUILDs): list that class as a global, so one round of allowing suffices."""
        dotted = numpy_dtype_class(code)
        if dotted is not None:
            module, _, name = dotted.rpartition(".")
            self._use(module, name, member,
                      why=f"the class of numpy.dtype({code!r}) objects, which this file builds")

    def _use(self, module: str, name: str, member: str | None, why: str = "") -> None:
        """Count one use of `module.name` (classified on first sight); `why` prefixes the
        reason of a global that is not safe."""
        use = self.uses.get((module, name))
        if use is None:
            verdict = classify(module, name, self.rules)
            reason = verdict.reason
            if why and verdict.severity != Severity.SAFE:
                reason = f"{why}: {reason}"
            use = GlobalUse(module, name, 0, verdict.severity, reason)
            self.uses[(module, name)] = use
        use.count += 1
        if member is not None and member not in use.members and len(use.members) < 8:
            use.members.append(member)

    def _nested(self, call: Call, member: str | None, depth: int) -> None:
        """Scan pickles passed as call arguments (pickle.loads(b"..."), decoders, configs)."""
        for text in call.strings:
            if len(text) > 2 and text[0] == "\x80" and ord(text[1]) <= 5:
                inner = self.walk(text.encode("latin-1"))
                if looks_like_pickle(inner):
                    target = call.func.key if call.func else "a computed callable"
                    self.find(Severity.SUSPICIOUS, "nested-pickle",
                              f"{call.opcode} of {target} receives a "
                              "pickle as an argument; it was scanned too", member, call.offset)
                    self.add_pickle(inner, member, False, depth + 1)

    def probe(self, data, start: int = 0) -> PickleScan:
        """A quick bounded walk (`_PROBE`, within the budget) of bytes rarely a pickle."""
        self.budget.check()
        scan = scan_pickle(data, start, limits=Limits(
            max_opcodes=min(_PROBE.max_opcodes, self.budget.opcodes)))
        self.budget.walked(scan.opcodes)
        return scan

    def decoded_limit(self, cap: int) -> int:
        """How many bytes the next decode may produce: `cap`, or less if the budget says so."""
        self.budget.check()
        return min(cap, self.budget.decoded)

    def not_fully_read(self, code: str, why: str, member: str | None = None) -> None:
        """Part of the file was not scanned (a bound, a missing library): never safe."""
        self.find(Severity.SUSPICIOUS, code, f"not fully scanned: {why}", member)
        self.block(f"not fully scanned: {why}")

    def finish(self) -> None:
        res = self.result
        order = sorted(self.uses.values(), key=lambda g: (-rank(g.severity), g.module, g.name))
        res.globals = order
        # torch.load hands a path named *.safetensors to safetensors.torch.load_file, which
        # refuses any header the check finds fault with; the name decides, not the content
        by_name = res.path.endswith(".safetensors")
        if by_name and (res.format != "safetensors" or res.findings):
            self.block("torch.load reads a *.safetensors path with safetensors, which refuses it")
        elif not by_name and res.format not in TORCH_WEIGHTS_FORMATS:
            res.weights_only_blockers.insert(0, f"torch.load does not read {res.format} files "
                                                "(it needs a torch zip archive or legacy stream)")
        res.weights_only_ok = (res.format in TORCH_WEIGHTS_FORMATS or by_name) and (
            not self.torch_refuses)
        res.weights_only_source = self.rules.source
        res.verdict = worst([g.severity for g in order] + [f.severity for f in res.findings])
        # what was found stays found: a dangerous import is reported even in a broken file
        if res.error and res.verdict != Verdict.DANGEROUS:
            res.verdict = Verdict.ERROR


def _call_text(call: Call, use: GlobalUse | None) -> str:
    """A call as pseudo-Python, named by its real import: `os.system("touch x")`."""
    name = use.import_name if use else (call.func.key if call.func else "<computed>")
    if call.opcode == "BUILD":
        return f"{name}(…).__setstate__({call.args})"
    return f"{name}({call.args})"


def _scan_stream(ctx: _Scan, buf, member: str | None, torch_format: bool, start: int = 0) -> bool:
    """Walk back-to-back pickles from `start`; False if the first is not a pickle.

    `torch_format`: the bytes are a whole file torch.load may read (legacy stream or not).
    """
    first = ctx.walk(buf, start)
    # a PROTO opcode first makes it a pickle to every unpickler, however broken the rest is
    if not (looks_like_pickle(first) or (first.protocol >= 2 and _pickle_head(
            bytes(buf[start:start + 2])))):
        return False
    # The magic-number pickle, whatever protocol wrote it: a lone LONG1 of torch's magic.
    legacy = (torch_format and first.stopped and not first.globals and first.end <= 40
              and LEGACY_MAGIC_LONG in bytes(buf[:first.end]))
    # torch's legacy loader unpickles five pickles: magic, protocol, sys_info, data, keys.
    count = _fold_pickles(ctx, buf, member, first, 5 if legacy else 0)
    if torch_format:
        ctx.result.format = "pytorch-legacy" if legacy else "pickle"
        if legacy and count < 5:
            ctx.block("legacy stream has fewer than five pickles")
        refusal = _legacy_refusal(buf, ctx.result.pickles) if legacy else None
        if refusal is not None:
            ctx.find(Severity.SUSPICIOUS, "legacy-refused", f"torch.load refuses this legacy "
                     f"stream: {refusal}")
            ctx.block(f"torch.load refuses the legacy stream: {refusal}")
    return True


LEGACY_NUMBERS = (0x1950A86A20F9469CFC6C, 1001)  # torch's magic number, its protocol version
_NUMBER_OPCODES = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
                             "FLOAT", "BINFLOAT"})


def _legacy_refusal(buf, pickles: list[dict]) -> str | None:
    """Why torch's legacy loader refuses a stream the walk reads without fault: its first two
    pickles are not exactly the magic number and protocol version torch compares them with, or
    one of the five it unpickles cannot finish (a stray STOP on an empty stack, a missing memo
    key: `pickletools.dis` follows the stack without running anything). None if it loads."""
    import io
    import pickletools

    chain, pos = [], 0
    for p in pickles:
        if p["member"] is None and p["offset"] == pos and len(chain) < 5:
            chain.append(p)
            pos = p["end"]
    for i, p in enumerate(chain):
        if i == 3 and p["end"] - p["offset"] > SMALL_FILE:
            continue  # the data pickle itself: the walk read it
        data = bytes(buf[p["offset"]:p["end"]])
        try:
            pickletools.dis(data, out=io.StringIO())
        except ValueError as exc:
            if "stack not empty after STOP" not in str(exc):  # unpicklers ignore what is left
                return f"pickle {i + 1} cannot be unpickled ({exc})"
        if i < 2:
            values = [(op.name, arg) for op, arg, _ in pickletools.genops(data)
                      if op.name not in ("PROTO", "FRAME", "STOP")]
            name, value = values[0] if len(values) == 1 else ("", None)
            # torch compares with ==: 1001.0 passes, (1001,) and "1001" do not
            if name not in _NUMBER_OPCODES or value != LEGACY_NUMBERS[i]:
                what = ("magic number", "protocol version")[i]
                return f"its {what} pickle is not {LEGACY_NUMBERS[i]}"
    return None


def _fold_pickles(ctx: _Scan, buf, member: str | None, first: PickleScan,
                  torch_pickles: int, depth: int = 0) -> int:
    """Fold `first` and every pickle appended after it; torch unpickles the first
    `torch_pickles` of them. Returns how many pickles there were. A pickle whose FRAME runs
    past its STOP has a second next pickle, where a reader without peek() goes on: that chain
    is folded too (`depth` bounds how many such forks are followed)."""
    ctx.add_pickle(first, member, torch_pickles > 0)
    scan, count = first, 1
    while True:
        if (scan.stopped and scan.end != scan.next_start < len(buf) and depth < 8
                and ctx.forks < MAX_FORKS):
            ctx.forks += 1
            fork = ctx.walk(buf, scan.next_start)
            if count < torch_pickles or looks_like_pickle(fork):
                _fold_pickles(ctx, buf, member, fork, max(torch_pickles - count, 0), depth + 1)
        if not (scan.stopped and scan.end < len(buf)):
            break
        # past the listed ones, the rest is walked in one pass (a million tiny pickles)
        through = count >= MAX_LISTED_PICKLES
        nxt = ctx.walk(buf, scan.end, through)
        if not (count < torch_pickles or looks_like_pickle(nxt)):
            break
        ctx.add_pickle(nxt, member, count < torch_pickles)
        scan, count = nxt, count + nxt.count
        if through:
            break
    if count > 1 and torch_pickles <= 1:
        # back-to-back pickles are plausible in a raw file, odd inside an archive member
        ctx.find(Severity.INFO if member is None else Severity.SUSPICIOUS, "multiple-pickles",
                 f"{count} pickles back to back; all were scanned", member, scan.start)
    return count


def _scan_npy(ctx: _Scan, buf, member: str | None) -> None:
    header, data_start = formats.parse_npy_header(buf)
    if header.objects:
        ctx.find(Severity.SUSPICIOUS, "npy-object-array",
                 "object array: NumPy stores it as a pickle and "
                 "only loads it with allow_pickle=True", member)
        if not _scan_stream(ctx, buf, member, False, data_start):
            ctx.find(Severity.SUSPICIOUS, "npy-object-array",
                     "object array data is not a readable pickle",
                     member)


@functools.lru_cache(maxsize=256)
def _storage_itemsize(storage_type: str) -> int | None:
    leaf = storage_type.rsplit(".", 1)[-1]
    return STORAGE_ITEMSIZE.get(leaf[: -len("Storage")]) if leaf.endswith("Storage") else None


def _scan_zip(ctx: _Scan, buf) -> None:
    """Every archive in the file: one, or the back-to-back archives of a `.distcp` file."""
    if ctx.archives is None:
        spans = zipread.archive_spans(buf)
        if len(spans) == 1:
            _scan_archive(ctx, buf, zipread.read_zip(buf))
            _scan_zipfile_view(ctx, buf)
            return
    else:
        if isinstance(buf, mmap.mmap):
            # only headers, directories and pickles are read: without this, each touch
            # reads a whole readahead window (8 MiB on some disks) of tensor data around it
            buf.madvise(mmap.MADV_RANDOM)
        spans = _listed_archives(ctx, buf, ctx.archives)
        if spans == [(0, len(buf))]:  # one item: a plain archive
            _scan_archive(ctx, buf, zipread.read_zip(buf))
            return
    refuses, blockers = ctx.torch_refuses, list(ctx.result.weights_only_blockers)
    for start, end in spans:
        _scan_archive(ctx, buf, zipread.read_zip(buf, start, end))
    for start, end in _uncovered(spans, len(buf)):
        spans += _scan_gap(ctx, buf, start, end)
    # what torch.load itself reads is decided below, not by every archive's content
    ctx.torch_refuses, ctx.result.weights_only_blockers[:] = refuses, blockers
    ctx.result.format = "distcp"
    ctx.find(Severity.INFO, "zip-concatenated", f"{len(spans)} zip archives back to back (as "
             "torch.distributed.checkpoint writes its .distcp data files); all were scanned")
    _torch_view(ctx, buf, sorted(spans))


def _scan_zipfile_view(ctx: _Scan, buf) -> None:
    """An archive whose end record's directory offset is not where its directory lies: Python's
    zipfile (numpy.load) shifts every offset by the difference, torch's reader does not, so the
    archive zipfile reads is scanned too. torch.load reads only the unshifted one."""
    shift = zipread.zipfile_shift(buf)
    if not shift:
        return
    ctx.find(Severity.SUSPICIOUS, "zip-offset-shift",
             f"the central directory lies {shift:+d} bytes from where the end record puts it: "
             "Python's zipfile (numpy.load) shifts every member by that much, torch does not; "
             "both readings were scanned")
    refuses, blockers = ctx.torch_refuses, list(ctx.result.weights_only_blockers)
    fmt = ctx.result.format
    try:
        _scan_archive(ctx, buf, zipread.read_zip(buf, shift))
    except (ValueError, struct.error) as exc:
        ctx.find(Severity.SUSPICIOUS, "zip-unreadable",
                 f"the shifted reading could not be read: {exc}")
    ctx.torch_refuses, ctx.result.weights_only_blockers[:] = refuses, blockers
    ctx.result.format = fmt


def _listed_archives(ctx: _Scan, buf, listed: list[tuple[int, int]]) -> list[tuple[int, int]]:
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
            _scan_gap(ctx, buf, offset, end,
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


def _scan_gap(ctx: _Scan, buf, start: int, end: int,
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
            _scan_archive(ctx, buf, zipread.read_zip(buf, s, e))
        except (ValueError, struct.error) as exc:
            ctx.not_fully_read("zip-unreadable", f"archive not read: {exc}", member)
    if not _scan_stream(ctx, data, member, False):
        _carve(ctx, data, member, 0)
    return found


def _torch_view(ctx: _Scan, buf, spans: list[tuple[int, int]]) -> None:
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
    probe = _Scan(ScanResult(ctx.result.path), ctx.rules)
    probe.budget = ctx.budget
    probe.crc_budget = 0  # only its blockers are kept: the archive was checked above
    _scan_archive(probe, buf, zipread.read_zip(buf, *span))
    for reason in probe.result.weights_only_blockers:
        ctx.block(reason)


def _record_may_be_pickle(ctx: _Scan, buf, m: zipread.Member) -> bool:
    """Whether a tensor record's bytes parse as a pickle (a cheap walk in place, no copy)."""
    head = bytes(buf[m.data_offset:m.data_offset + 2])
    if _pickle_head(head):
        return True
    if not head or head[0] not in formats.PICKLE_FIRST_BYTES:
        return False
    return imports(ctx.probe(buf, m.data_offset))


def _scan_archive(ctx: _Scan, buf, archive: zipread.ZipArchive) -> None:
    members = archive.members
    kind = formats.zip_kind([m.name for m in members])
    if ctx.result.format in ("unknown", "zip", "npz") or kind in ("torchscript", "torch-export"):
        ctx.result.format = kind
    for a in archive.anomalies:
        ctx.find(a.severity, a.code, a.message, a.member)
    if kind == "torchscript":
        ctx.find(Severity.SUSPICIOUS, "torchscript",
                 "TorchScript archive: torch.jit.load runs the code "
                 "inside it, and torch.load(weights_only=True) refuses it")
    if kind == "torch-export":
        ctx.find(Severity.SUSPICIOUS, "torch-export",
                 "torch.export archive: torch.export.load rebuilds "
                 "and runs the graph in models/ (custom operators run native code), and "
                 "torch.load refuses it")
    # torch reads the folder of the first member and refuses members outside it.
    prefix = members[0].name.split("/", 1)[0] if members else ""
    by_name = {m.name: m for m in members}
    main = zipread.torch_member(members, f"{prefix}/data.pkl")
    torch_zip = kind == "pytorch-zip"
    if torch_zip:
        outside = next((m.name for m in members if not m.name.startswith(prefix + "/")), None)
        if outside is not None:
            ctx.block(f"member {outside!r} lies outside the {prefix}/ folder")
    storages: list = []
    records: set[str] = set()
    skipped_crc = 0
    # The main pickle first: its storage references tell which members are tensor records.
    for m in ([main] if main else []) + [m for m in members if m is not main]:
        if _read_before(ctx, m):
            continue
        is_record = m.name in records
        if is_record and m.method == zipread.STORED and m.data_offset >= 0:
            # tensor bytes: torch never unpickles a record; check its CRC within the budget
            if m.compressed_size > ctx.crc_budget:
                skipped_crc += 1
                continue
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
                continue  # tensor bytes: torch never unpickles a record
            data = bytes(buf[m.data_offset:m.data_offset + m.compressed_size])
        else:
            stored = m.method == zipread.STORED
            limit = MAX_MEMBER_BYTES if stored else ctx.decoded_limit(MAX_MEMBER_BYTES)
            try:
                data = zipread.member_bytes(buf, m, limit)
            except zipread.MemberTooLarge as exc:
                if limit < MAX_MEMBER_BYTES:
                    ctx.not_fully_read("scan-budget", f"member inflates past the file's decode "
                                       f"budget ({exc})", m.name)
                else:
                    ctx.find(Severity.SUSPICIOUS, "zip-member-too-large",
                             f"member not scanned: {exc}", m.name)
                continue
            except ValueError as exc:
                ctx.find(Severity.SUSPICIOUS, "zip-member-unreadable", f"member not scanned: {exc}",
                         m.name)
                if m is main:
                    ctx.block(f"{m.name} cannot be read")
                continue
            if not stored:
                ctx.budget.decode(len(data))
            if not zipread.crc_ok(data, m):
                ctx.find(Severity.SUSPICIOUS, "zip-crc-mismatch",
                         f"CRC-32 {zlib.crc32(data):08x} does "
                         f"not match {m.crc:08x} in the central directory (corrupted, tampered "
                         "or encrypted)", m.name)
        if is_record and not (_pickle_head(data[:2]) or (data[:1]
                              and data[0] in formats.PICKLE_FIRST_BYTES)):
            continue
        if data.startswith(formats.NPY_MAGIC):
            _scan_member_npy(ctx, data, m.name)
            continue
        ctx.member_of[id(data)] = m.name
        scan = ctx.walk(data)
        if not (imports(scan) if is_record else looks_like_pickle(scan)):
            if m.encrypted:
                ctx.find(Severity.SUSPICIOUS, "zip-encrypted", "encrypted member cannot be scanned",
                         m.name)
            if m is main:
                ctx.block(f"{m.name} is not a pickle")
            if not is_record:
                _scan_nested(ctx, data, m.name)
            continue
        _fold_pickles(ctx, data, m.name, scan, 1 if torch_zip and m is main else 0)
        storages.extend(scan.storages)
        if m is main or m.name.endswith(".pkl"):
            records |= {f"{prefix}/data/{s.key}" for s in scan.storages}
        if m.method != zipread.STORED and not m.name.endswith(".debug_pkl"):
            ctx.find(Severity.SUSPICIOUS, "zip-compressed-pickle", "pickle member is compressed; "
                     "torch.save always stores pickles uncompressed", m.name)
        if m is not main and torch_zip:
            ctx.find(Severity.SUSPICIOUS, "zip-extra-pickle",
                     "a pickle torch.load never reads; it was "
                     "scanned because other loaders may unpickle it", m.name)
    if skipped_crc:
        ctx.find(Severity.INFO, "zip-crc-skipped",
                 f"CRC-32 of {skipped_crc} large tensor records not "
                 "checked (scan budget); run `ckpt-inspector inspect` for a full check")
    if torch_zip:
        for m in members:
            if m.unsupported_by_miniz and (m.name in records or m.name[len(prefix) + 1:]
                                           in TORCH_READS):
                ctx.block(f"{m.name} has encryption/patch flag bits torch cannot read")
    _check_records(ctx, storages, by_name, prefix, kind)


def _read_before(ctx: _Scan, m: zipread.Member) -> bool:
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


def _scan_member_npy(ctx: _Scan, data: bytes, name: str) -> None:
    try:
        _scan_npy(ctx, data, name)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        ctx.find(Severity.SUSPICIOUS, "npy-header", f"unreadable .npy header: {exc}", name)


def _check_records(ctx: _Scan, storages: list, by_name: dict, prefix: str, kind: str) -> None:
    """Storage references against the archive's records: absent, unreferenced, too small."""
    seen: set[str] = set()
    data_prefix = f"{prefix}/data/"
    for s in storages:
        name = data_prefix + s.key
        if name in seen:
            continue
        seen.add(name)
        record = by_name.get(name)
        if record is None:
            ctx.find(Severity.SUSPICIOUS, "zip-missing-record",
                     f"storage {s.key!r} is referenced but {name} is absent", name, s.offset)
            ctx.block(f"record {name} is missing")
            continue
        itemsize = _storage_itemsize(s.storage_type)
        if not itemsize or s.numel < 0 or s.numel * itemsize == record.size:
            continue
        declared = s.numel * itemsize
        ctx.block(f"record {name} holds {record.size} bytes, storage declares {declared}")
        if declared > record.size:
            ctx.find(Severity.DANGEROUS, "storage-size-mismatch",
                     f"storage {s.key!r} declares {s.numel} x {itemsize} bytes but its record "
                     f"holds {record.size}; reading it would run past the data", name, s.offset)
        else:
            ctx.find(Severity.SUSPICIOUS, "storage-record-larger",
                     f"record holds {record.size} bytes, storage {s.key!r} uses {declared} "
                     "(extra bytes hidden after the tensor)", name, s.offset)
    if kind in ("pytorch-zip", "torchscript"):
        for name in by_name:
            if name.startswith(data_prefix) and name not in seen:
                ctx.find(Severity.SUSPICIOUS, "zip-unreferenced-record",
                         f"{name} is not referenced by any pickle (hidden data?)", name)


def _scan_7z(ctx: _Scan, buf) -> None:
    """Scan pickles found in the decoded streams of a 7z archive; it stays at least suspicious,
    since its members cannot be listed."""
    from inspector.core import sevenzip

    found = 0
    streams = sevenzip.decoded_streams(buf, ctx.decoded_limit(MAX_DECOMPRESSED))
    ctx.budget.decode(sum(map(len, streams)))
    for i, data in enumerate(streams):
        end = -1
        for start in sevenzip.pickle_starts(data):
            if start < end:
                continue  # inside a pickle already scanned
            scan = ctx.walk(data, start)
            if scan.stopped or looks_like_pickle(scan):
                # depth 1: not listed in `pickles`, whose offsets must point into the file
                ctx.add_pickle(scan, f"<7z stream {i}>", False, depth=1)
                found += 1
                end = scan.end
    ctx.find(Severity.SUSPICIOUS, "archive-partially-scanned",
             "7-Zip archive: members cannot be listed "
             f"without a 7-Zip library; {found} pickle(s) found in its decoded streams were "
             "scanned; extract it and scan the files to be sure")


def _pickle_head(head: bytes) -> bool:
    """Whether two bytes open a protocol 2-5 pickle (PROTO opcode and a known version)."""
    return len(head) == 2 and head[0] == 0x80 and head[1] <= 5


def _crc32(buf, start: int, length: int) -> int:
    """CRC-32 of a slice without copying it: slicing an mmap copies under the GIL, while
    zlib.crc32 over a view releases the GIL, so a GUI thread keeps running meanwhile."""
    if isinstance(buf, mmap.mmap) and length:
        floor = start - start % mmap.PAGESIZE  # read ahead even where the file is MADV_RANDOM
        buf.madvise(mmap.MADV_WILLNEED, floor, start + length - floor)
    with memoryview(buf) as whole, whole[start:start + length] as part:
        return zlib.crc32(part)


def _decode(ctx: _Scan, buf, algo: str, cap: int = MAX_DECOMPRESSED) -> decompress.Decoded:
    """A compressed stream's content (at most `cap` bytes), within the file's decode budget."""
    decoded = decompress.decompress(buf, algo, ctx.decoded_limit(cap))
    ctx.budget.decode(len(decoded.data))
    return decoded


def _scan_compressed(ctx: _Scan, buf, algo: str) -> None:
    res = ctx.result
    try:
        decoded = _decode(ctx, buf, algo)
    except decompress.CodecMissing as exc:
        res.format = "compressed-pickle"
        ctx.not_fully_read("compressed-unreadable", f"{exc}; its content was not scanned")
        return
    _scan_decoded(ctx, decoded, algo)


def _scan_decoded(ctx: _Scan, decoded: decompress.Decoded, algo: str) -> None:
    """The content of a compressed stream: a pickle (joblib style) or an archive."""
    res = ctx.result
    if decoded.incomplete:
        ctx.not_fully_read("compressed-unreadable", decoded.incomplete)
    if not _scan_stream(ctx, decoded.data, None, False):
        if not _scan_nested(ctx, decoded.data, f"<{algo} content>"):
            raise ValueError(f"{algo} content is not a pickle")
        res.format = "compressed-archive"
        return
    res.format = "compressed-pickle"
    members = f" ({decoded.members} members)" if decoded.members > 1 else ""
    ctx.find(Severity.SUSPICIOUS, "compressed-pickle",
             f"{algo}-compressed pickle{members}: loaders such "
             "as joblib unpickle it with no weights_only protection")


def _carve(ctx: _Scan, data: bytes, member: str, covered: int) -> None:
    """Scan every protocol 2+ pickle that starts after `covered` (pickles between raw data)."""
    from inspector.core.sevenzip import pickle_starts

    for start in pickle_starts(data, limit=None):
        if start < covered:
            continue
        scan = ctx.walk(data, start)
        if imports_or_stops(scan) and (scan.globals or scan.calls):
            ctx.add_pickle(scan, member, False, depth=1)
            covered = scan.end


_TORCH_TAR = frozenset({"storages", "tensors", "pickle"})


MAX_NESTING_ARCHIVES = 3  # archives inside archives scanned this deep
# kinds known by a magic number or a checksum (zlib's and LZMA's two bytes are too weak a sign)
_NESTED_KINDS = frozenset({"zip", "tar", "7z", "compressed:gzip", "compressed:bz2",
                           "compressed:xz", "compressed:zstd", "compressed:lz4"})


def _scan_nested(ctx: _Scan, data: bytes, member: str) -> bool:
    """A member that is itself an archive or a compressed file (a model folder zipped with its
    checkpoint inside, a .tar.gz): unpacked, its checkpoint is loaded, so it is scanned as a
    file of its own and its imports and findings are folded in under `member!inner`. Returns
    whether the member was one; torch.load never reads it, so nothing here blocks weights_only.
    """
    kind = formats.sniff(bytes(data[:512]), len(data))
    if kind not in _NESTED_KINDS:
        return False
    if ctx.nesting >= MAX_NESTING_ARCHIVES:
        ctx.not_fully_read("nested-too-deep",
                           f"a {kind} inside {ctx.nesting} archives was not opened", member)
        return True
    sub = _Scan(ScanResult(f"{ctx.result.path}!{member}", size=len(data)), ctx.rules)
    sub.nesting = ctx.nesting + 1
    sub.crc_budget = ctx.crc_budget
    sub.budget = ctx.budget
    spent = None
    try:
        _scan_buffer(sub, data, len(data))
    except BudgetSpent as exc:  # folded below, then the whole file's scan stops
        spent = exc
    except Exception as exc:  # a parser bug inside must not hide what was found
        sub.result.error = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    sub.finish()
    ctx.crc_budget = sub.crc_budget
    inner = sub.result
    if spent is None and _not_a_checkpoint(inner):
        return False  # an archive of other files (text, images): nothing a loader reads
    ctx.find(Severity.INFO, "nested-archive", f"member is a {inner.format} file, scanned as "
             f"one (unpacked, it is loaded): {inner.verdict}", member)
    for use in sub.uses.values():
        for where in use.members or [None]:
            ctx._use(use.module, use.name, f"{member}!{where}" if where else member)
        mine = ctx.uses[(use.module, use.name)]
        mine.count += use.count - max(len(use.members), 1)
        for text, site in zip(use.calls, use.call_sites, strict=False):
            if len(mine.calls) < 4 and text not in mine.calls:
                mine.calls.append(text)
                mine.call_sites.append({"member": f"{member}!{site['member']}"
                                        if site["member"] else member, "offset": None})
    for f in inner.findings:
        ctx.find(f.severity, f.code, f.message,
                 f"{member}!{f.member}" if f.member else member, None, f.call)
    if inner.error:
        ctx.not_fully_read("nested-unreadable", f"{inner.format} inside: {inner.error}", member)
    if spent is not None:
        raise spent
    return True


def _scan_tar(ctx: _Scan, buf) -> None:
    """A tar archive; torch's legacy tar format (`storages`, `tensors`, `pickle` members) is
    read by torch.load with weights_only=False: every member's pickles are scanned."""
    import io
    import tarfile

    res = ctx.result
    fileobj = buf if isinstance(buf, mmap.mmap) else io.BytesIO(buf)
    fileobj.seek(0)
    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        every = tar.getmembers()
    members = [m for m in every if m.isfile()]
    names = {m.name for m in members}
    # torch.load extracts its legacy tar's members (no extraction filter) and unpickles them: a
    # link reads the file it points at (a hard link to an earlier member reads that member,
    # scanned below)
    links = [m for m in every if m.name in _TORCH_TAR and (
        m.issym() or (m.islnk() and m.linkname not in names))]
    torch_tar = names | {m.name for m in links} >= _TORCH_TAR
    res.format = "pytorch-tar" if torch_tar else "tar"
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
        if not walked and _scan_nested(ctx, data, m.name):
            found += 1
            continue  # its pickles were found inside it
        _carve(ctx, data, m.name, covered)
    if not found and not ctx.uses and not links:
        raise ValueError("tar archive without pickles")


MAX_SPARSE_BYTES = 64 << 20  # a sparse member expands from a few stored bytes: kept small


def _tar_extract(fileobj, member) -> bytes:
    """A member's content as tarfile extracts it (holes of a sparse file filled)."""
    import tarfile

    fileobj.seek(0)
    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        handle = tar.extractfile(member)
        return handle.read() if handle is not None else b""


def _tar_member_pickles(ctx: _Scan, data: bytes, member: str, pos: int = 0,
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
        sizes = [s for g in reversed(scan.globals) if (s := _storage_itemsize(g.key))]
        return [pos + 8 + size * numel for size in dict.fromkeys(sizes)]
    if member == "tensors" and count > 1 and pos + 4 <= len(data):
        # after (key, storage id, type): int32 ndim, 4 bytes, sizes, strides, offset
        return [pos + 16 + 16 * int.from_bytes(data[pos:pos + 4], "little", signed=True)]
    return []


def _scan_as(ctx: _Scan, buf, size: int, kind: str) -> None:
    """The reading a loader takes for the detected format."""
    res = ctx.result
    spec = formats.spec_of(kind)
    if spec is not None and spec.scan is not None:  # a format module reads it (`core.formats`)
        res.format = spec.format
        spec.scan(ctx, buf)
    elif kind == "zip":
        _scan_zip(ctx, buf)
    elif kind == "npy":
        res.format = "npy"
        _scan_npy(ctx, buf, None)
    elif kind == "safetensors":
        res.format = "safetensors"
        header = safetensors_header.read_buffer(buf, size)
        if header.error is not None:
            raise ValueError(header.error)
        for problem in header.problems:
            ctx.find(problem.severity, problem.code, problem.message)
    elif kind.startswith("compressed:"):
        _scan_compressed(ctx, buf, kind.split(":", 1)[1])
    elif kind == "7z":
        res.format = "7z"
        _scan_7z(ctx, buf)
    elif kind == "tar":
        _scan_tar(ctx, buf)
    elif not _scan_stream(ctx, buf, None, True):
        head = bytes(buf[:8]).hex(" ")
        res.error = f"not a model file: no known checkpoint or pickle format (starts with {head})"


def _scan_also_as_pickle(ctx: _Scan, buf) -> None:
    """Files that are two formats at once: pickle.load (and torch.load's legacy path) unpickle
    the first bytes of anything that is not a zip, so a safetensors or tar file whose bytes
    also parse as a pickle (from any first opcode) that imports something is scanned that way
    too; the worst wins."""
    # not gated by the first byte: the C unpickler takes any opcode there
    first = ctx.walk(buf, 0)
    if not (imports_or_stops(first) and (first.globals or first.calls)):
        return
    ctx.find(Severity.SUSPICIOUS, "polyglot", f"the {ctx.result.format} file is also a pickle that "
             "imports globals; pickle.load and torch.load would run it, so it was scanned too")
    _fold_pickles(ctx, buf, None, first, 0)


def _scan_buffer(ctx: _Scan, buf, size: int) -> None:
    res = ctx.result
    head = bytes(buf[:formats.HEAD_BYTES])
    spec = formats.detect(head, size)
    kind = spec.format if spec is not None else formats.sniff(head, size)
    try:
        _scan_as(ctx, buf, size, kind)
    except BudgetSpent:
        raise
    except Exception as exc:  # any parser failure: try the raw pickle reading
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        if _scan_stream(ctx, buf, None, False):
            res.format = "pickle"
            ctx.find(Severity.SUSPICIOUS, "format-fallback",
                     f"{kind} parse failed ({reason}); the bytes "
                     "were scanned as a raw pickle")
        elif not res.findings and not ctx.uses and kind == "zip":
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
        return
    # torch.load and numpy.load take a zip's own path; pickle.load stops at its first byte
    if kind != "zip" and res.format not in ("pickle", "pytorch-legacy", "unknown"):
        _scan_also_as_pickle(ctx, buf)
    if kind not in ("zip", "tar"):
        _scan_also_as_tar(ctx, buf)
    if kind != "zip" and not kind.startswith("compressed:"):
        _scan_also_compressed(ctx, buf)
    if kind != "zip" and ctx.archives is not None:
        _scan_listed_items(ctx, buf)


def _scan_also_as_tar(ctx: _Scan, buf) -> None:
    """torch.load's legacy path opens anything Python's tarfile accepts as its tar format, and
    tarfile takes headers `formats.is_tar` does not (a checksum written '0_123456' or after a
    tab): such a file is scanned as a tar too, its own format kept; the worst wins."""
    import tarfile

    try:
        tarfile.TarInfo.frombuf(bytes(buf[:512]), "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return
    fmt = ctx.result.format
    ctx.find(Severity.SUSPICIOUS, "polyglot", f"the {fmt} file is also a tar archive to Python's "
             "tarfile; torch.load would unpickle its members, so it was scanned as one too")
    with contextlib.suppress(tarfile.TarError, ValueError):  # no member pickles: it stands
        _scan_tar(ctx, buf)
    ctx.result.format = fmt


PREFIX_BYTES = 1 << 16  # content decoded to tell a stream from bytes that merely decode


def _scan_also_compressed(ctx: _Scan, buf) -> None:
    """A file whose first bytes are also a zlib or LZMA-alone header that the real decoder
    takes (weak magic numbers whose first byte is also an opcode, so `formats.sniff` read it as
    a pickle or as nothing): `zlib.decompress` and `lzma` read it as a stream, so where its
    content is a pickle or an archive that is scanned too, and the worst wins. Where the first
    reading found nothing at all, this reading is the file's."""
    res = ctx.result
    head = bytes(buf[:512])
    for algo in decompress.TRIED_KINDS:
        if not decompress.accepts(head, algo):
            continue
        prefix = _decode(ctx, buf, algo, PREFIX_BYTES).data
        alone = res.error is not None and res.error.startswith("not a model file")
        if not _content_loads(ctx, prefix, alone):
            continue
        decoded = _decode(ctx, buf, algo)
        fmt, error = res.format, res.error
        res.error = None
        try:
            _scan_decoded(ctx, decoded, algo)
        except ValueError:
            res.error = error  # its content is no pickle after all
            continue
        if not alone:
            res.format = fmt
            ctx.find(Severity.SUSPICIOUS, "polyglot",
                     f"the {fmt} file is also a {algo} stream whose content loads: "
                     f"{algo} readers unpickle that, so it was scanned too")


def _content_loads(ctx: _Scan, prefix: bytes, alone: bool) -> bool:
    """Whether decoded bytes open like a pickle or an archive a loader reads (not the noise a
    decoder makes of other bytes). `alone`: no other reading of the file found anything, so a
    pickle that walks cleanly through the prefix counts too."""
    if not prefix:
        return False
    if _pickle_head(prefix[:2]) or formats.sniff(prefix[:512], len(prefix)) in _NESTED_KINDS:
        return True
    probe = ctx.probe(prefix)
    return imports(probe) or (alone and (probe.stopped or (
        len(prefix) == PREFIX_BYTES and (probe.error or "").startswith("truncated"))))


def _scan_listed_items(ctx: _Scan, buf) -> None:
    """A DCP data file that is not back-to-back archives: DCP still loads whatever lies at each
    range its `.metadata` lists, so each is read in full (the whole file when none is known)."""
    why = "a data file that is not back-to-back archives (DCP loads any range .metadata lists)"
    listed = [(o, o + n) for o, n in sorted(set(ctx.archives))]
    for start, end in listed or [(0, len(buf))]:
        _scan_gap(ctx, buf, start, end, why)


def scan_bytes(data: bytes, path: str = "<bytes>") -> ScanResult:
    """Scan in-memory file content."""
    return _run(path, len(data), lambda: data)


def _run(path: str, size: int, load, archives: list[tuple[int, int]] | None = None,
         crc_budget: int = CRC_BUDGET) -> ScanResult:
    t0 = time.perf_counter()
    res = ScanResult(path=path, size=size)
    ctx = _Scan(res, weights_only_rules(), archives)
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
        res._blobs = readings.blobs_of(ctx.blobs.values(), load(), path, size)
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
    file (`core.dcp_items`); checked, they spare the search of every page for archive ends."""
    p = os.fspath(path)
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
    """Every file under the given paths, as `core.discover` lists them."""
    for found in discover(paths):
        yield found.path


# Errors that say a file is no checkpoint at all (no format magic, nothing that parses as a
# pickle, a plain tar, an empty file such as an HF cache's .no_exist marker, a named pipe or a
# dangling link); a broken zip, safetensors or npy, or an unreadable file, stays an error.
_NOT_A_CHECKPOINT = ("not a model file", "empty file", "not a readable tar file",
                     "cannot read: not a regular file", "cannot read: No such file")


def _not_a_checkpoint(res: ScanResult) -> bool:
    """A file no loader reads as a model."""
    return (not res.findings and not res.globals and bool(res.error)
            and res.error.startswith(_NOT_A_CHECKPOINT))


def scan_paths(paths: Iterable[str | os.PathLike]) -> Iterator[ScanResult]:
    """Scan files and folders (recursively, every file whatever its extension). A folder's
    file that is not a checkpoint at all (JSON, text, tokenizer files, images) is `skipped`;
    a file that cannot even be scanned is reported, never left out."""
    batch: list[ScanResult] = []
    for found in discover(paths):
        with readings.deferred():  # the loaders' readings of many files run in one job
            batch.append(scan_found(found))
        if len(batch) >= READ_BATCH_FILES or readings.pending_bytes(batch) > READ_BATCH_BYTES:
            yield from _read_batch(batch)
            batch = []
    yield from _read_batch(batch)


READ_BATCH_FILES = 256
READ_BATCH_BYTES = 64 << 20


def _read_batch(batch: list[ScanResult]) -> list[ScanResult]:
    """Run the batch's pending readings (`core.readings`), one jailed job for all."""
    readings.read(batch)
    return batch


def scan_found(found: Found) -> ScanResult:
    """Scan one discovered file; `skipped` when a folder's file is no checkpoint at all."""
    try:
        res = scan_dcp_aware(found.path)
        _check_index(res)
    except Exception as exc:  # scan_file never raises for a bad file; a bug must not hide
        res = ScanResult(path=os.fspath(found.path), verdict=Verdict.ERROR,
                         error=" ".join(f"scan failed: {type(exc).__name__}: {exc}"
                                        .split())[:300])
    # skipped only when positively something else (text, JSON, an image...); a reading that
    # then yields a pickle takes that back (`readings.apply`)
    if found.in_folder and _not_a_checkpoint(res) and _other(found.path, res):
        res.verdict = Verdict.SKIPPED
    return res


def _other(path, res: ScanResult) -> bool:
    """Whether the file is positively no checkpoint (`other_files`); a file that cannot be
    read as a regular file (a pipe, a dangling link) is none either."""
    from inspector.core.other_files import identify

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
    walk does not follow)."""
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
    if _not_a_checkpoint(res):  # the JSON itself is no pickle: its one problem is this
        res.error, res.verdict = None, Verdict.SAFE
    names = ", ".join(repr(n) for n in outside[:3])
    res.findings.append(Finding(Severity.SUSPICIOUS, "index-outside-file",
                                f"weight_map names {names}, outside its folder or behind a folder "
                                "link: transformers "
                                "loads them with this checkpoint, and they were not scanned"))
    res.verdict = worst([res.verdict, Verdict.SUSPICIOUS])


def scan_dcp_aware(path: str | os.PathLike) -> ScanResult:
    """`scan_file` of a file that may belong to a DCP folder: a data file through the archives
    its `.metadata` lists (checked, `core.dcp_items`), a `.metadata` that lists items in files
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
                return decompress.decompress(buf, kind.split(":", 1)[1], MAX_DECOMPRESSED).data
            return bytes(buf)
