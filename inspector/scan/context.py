"""The context one file's scan hands to every format module (`formats`).

`ScanContext` implements the interface the format modules own (`formats.context.FormatContext`,
which lists what they call and read): it gathers the file's globals, findings and weights_only
blockers, walks pickles within the file's one budget (`scan.budget`), keeps what it walked for
the loaders' own readings (`scan.readings`), and opens nested content (a zip member that is a
tarball holding a pickle) through the dispatch `scan.engine` gives it, so no format module
imports `scan.engine` or this module. Beyond that interface, the engine reads back `blobs` and
`torch_archives` and calls `finish`.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator

from inspector.core.verdict import rank, worst
from inspector.core.vocabulary import Format, Severity, Verdict
from inspector.formats.archives import decompress, zipread
from inspector.formats.archives.torch_package import _denied as denied_in_source
from inspector.formats.sniffing import NESTED_KINDS, is_archive, sniff
from inspector.scan.budget import (
    CRC_BUDGET,
    MAX_DECOMPRESSED,
    MAX_LISTED_PICKLES,
    MAX_NESTING,
    MAX_NESTING_ARCHIVES,
    BudgetSpent,
    ScanBudget,
)
from inspector.scan.code_text import looks_like_code
from inspector.scan.pickles.class_source import method_reaches
from inspector.scan.pickles.opcodes import IMPLICIT_METHODS, OPCODE_BYTES
from inspector.scan.pickles.policy import (
    WeightsOnlyRules,
    call_allowed,
    call_verdict,
    classify,
    numpy_dtype_class,
)
from inspector.scan.pickles.walker import (
    Call,
    Issue,
    Limits,
    PickleScan,
    imports,
    looks_like_pickle,
    scan_pickle,
)
from inspector.scan.reading_record import ArchiveAsk, Blob
from inspector.scan.result import (
    HANDED_TO_CODE,
    KEPT_CALLS,
    KEPT_MEMBERS,
    Finding,
    GlobalUse,
    ScanResult,
)

_PROBE = Limits(max_opcodes=100_000)  # a quick look at bytes that are rarely a pickle
# the first bytes a pickle without PROTO may start with: any opcode but PROTO and STOP
_OPCODE_CHARS = frozenset(OPCODE_BYTES.values()) - {0x80, 0x2E}
# how a `nested-pickle` finding says the pickle goes to code of a class that may unpickle it
# (`reading_apply` then never says of that file's pickled values that loading runs nothing)
TORCH_WEIGHTS_FORMATS = (Format.PYTORCH_ZIP, Format.PYTORCH_LEGACY, Format.DISTCP)

Dispatch = Callable[["ScanContext", object, int], None]
"""`dispatch(ctx, buf, size)`: read `buf` as whatever format it is (`scan.engine`'s dispatch)."""


class ScanContext:
    """Accumulates globals, findings and weights_only blockers while one file is walked."""

    def __init__(self, result: ScanResult, rules: WeightsOnlyRules,
                 archives: list[tuple[int, int]] | None = None,
                 dispatch: Dispatch | None = None) -> None:
        self.result = result
        self.rules = rules
        self.dispatch = dispatch  # how nested content is read (`scan_nested`)
        self.uses: dict[tuple[str, str], GlobalUse] = {}
        self.torch_refuses = False
        # shared by every archive of the file: a .distcp file holds one archive per item
        self.crc_budget = CRC_BUDGET
        self.archives = archives
        self.nesting = 0  # archives this file lies inside (`scan_nested`)
        self.forks = 0  # second readings of pickles followed (`pickle_stream.fold_pickles`)
        # shared with every nested scan: one budget per file (`scan.budget`)
        self.budget = ScanBudget.for_size(result.size)
        self.records: dict[tuple[int, int, int], zipread.Member] = {}  # zip records read
        self.blobs: dict[int, Blob] = {}  # every buffer walked, for the real readers
        self.member_of: dict[int, str] = {}  # archive members' buffers, by id, and their names
        # buffers no loader reads as pickles (`read_apart`)
        self.unreached: set[int] = set()
        # damaged archives whose pickles torch's own zip reader hands out (`ask_torch`)
        self.torch_archives: list[ArchiveAsk] = []
        self.implicit_seen: set[tuple] = set()  # (class, method, attributes) judged (`_implicit`)

    def find(self, severity: str, code: str, message: str, member: str | None = None,
             offset: int | None = None, call: str | None = None) -> None:
        """Report one finding (bounded: the first 2,000, dangerous ones up to 4,000)."""
        findings = self.result.findings
        if len(findings) < 2000 or (severity == Severity.DANGEROUS and len(findings) < 4000):
            findings.append(Finding(severity, code, message, member, offset, call))

    def block(self, reason: str) -> None:
        """torch.load(weights_only=True) refuses the file, for `reason`."""
        self.torch_refuses = True
        blockers = self.result.weights_only_blockers
        if reason not in blockers and len(blockers) < 200:
            blockers.append(reason)

    @contextlib.contextmanager
    def read_apart(self, data: bytes, apart: bool) -> Iterator[None]:
        """While inside, walks of `data` make a blob no loader reads as pickles when `apart`
        (an archive member no zip reader hands a loader that way): read out of caution, its
        imports stay apart from the verdict's (`reading_apply.unreached`)."""
        if apart:
            self.unreached.add(id(data))
        try:
            yield
        finally:
            self.unreached.discard(id(data))

    def ask_torch(self, span: tuple[int, int] | None, walked: list[bytes]) -> None:
        """The pickles of the archive `span` (the whole file when None) are read as torch's own
        zip reader hands them out, in the jail (`sandbox.worker.zip_records`); `walked`: the scan's
        own readings of them, now read apart (their imports are the verdict's only where
        torch's reading resolves them too)."""
        kept = [self.blobs[id(d)] for d in walked if id(d) in self.blobs]
        for blob in kept:
            blob.reached = False
        seen = set().union(*(b.walker for b in kept))
        self.torch_archives.append(ArchiveAsk(span, seen))

    def read_also(self, data: bytes, walked: bytes) -> None:
        """The loaders read `data` (not walked itself: it is the start of `walked`, whose walk
        explains it), so the real readers read it too."""
        if data and id(walked) in self.blobs:
            self.blobs[id(data)] = Blob(None, {0}, {0},
                                                 set(self.blobs[id(walked)].walker), data=data)

    def walk(self, data: bytes, start: int = 0, through: bool = False,
             entry: bool = True) -> PickleScan:
        """Walk the pickle at `start` within the file's budget (as both buffered and unbuffered
        readers read it where a FRAME is misaligned), kept for the loaders' own readings.
        `entry`: a loader starts reading there; else a loader gets there only by reading the
        pickles before it (the next of back-to-back pickles) or not at all (a carved one)."""
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
        if scan.raw_spans:
            self._read_as_opcodes(data, start, through, scan)
        self._keep(data, start, scan, entry)
        return scan

    def _read_as_opcodes(self, data, start: int, through: bool, scan: PickleScan) -> None:
        """joblib reads `scan.raw_spans` as NumPy array data; pickle.load and torch.load read
        the same bytes as opcodes. Walk that reading too: an import it finds inside a span is
        one joblib never sees, hidden in array data (dangerous, and judged as any import)."""
        rules, budget = self.rules, self.budget
        budget.check()
        other = scan_pickle(data, start, allowed=rules.allowed, wo_opcodes=rules.opcodes,
                            through=through, joblib=False,
                            limits=Limits(max_opcodes=budget.opcodes))
        budget.walked(other.opcodes)
        spans = sorted(scan.raw_spans)
        firsts = [a for a, _ in spans]

        def hidden(offset: int) -> bool:
            i = bisect.bisect_right(firsts, offset) - 1
            return i >= 0 and offset < spans[i][1]

        inside = [g for g in other.globals if hidden(g.offset)]
        if not inside:
            return
        scan.globals += inside
        scan.calls += [c for c in other.calls if hidden(c.offset)]
        names = ", ".join(sorted({g.key for g in inside})[:5])
        scan.issues.append(Issue("array-data-imports", "bytes joblib reads as NumPy array "
                                 f"data import {names} when pickle.load or torch.load reads "
                                 "them as opcodes", inside[0].offset, True))

    def _keep(self, data, start: int, scan: PickleScan, entry: bool) -> None:
        """Keep the walked buffer and start for the loaders' own readers (`scan.readings`)."""
        blob = self.blobs.get(id(data))
        if blob is None:
            # holding the buffer keeps its id this buffer's while the scan runs
            member = self.member_of.get(id(data))
            blob = self.blobs[id(data)] = Blob(
                member, set(), data=data, kinds=("c", "c-nopeek") if member else
                ("c", "c-nopeek", "py"), reached=id(data) not in self.unreached)
        if len(blob.starts) < 4096:
            blob.starts.add(start)
            if entry:
                blob.entries.add(start)
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
            implicit = (call.opcode in IMPLICIT_METHODS or call.runs) and not call.via
            if known and known.severity != Severity.SAFE and call.opcode != "BUILD" and (
                    not implicit or (call.opcode.startswith("NEWOBJ") and not call.runs)) and (
                    len(known.calls) < KEPT_CALLS and text not in known.calls):
                known.calls.append(text)
                known.call_sites.append({"member": member,
                                         "offset": call.offset if depth == 0 else None})
            # BUILD hands state to __setstate__ (data such as logged command lines, not code);
            # a callable already judged dangerous needs no second reason
            code = None if (allowed or call.opcode == "BUILD" or (
                implicit and not call.opcode.startswith("NEWOBJ"))
                            or (known and known.severity == Severity.DANGEROUS)) else next(
                (s for s in call.strings if looks_like_code(s)), None)
            if code is not None:
                target = call.func.key if call.func else "a computed callable"
                self.find(Severity.DANGEROUS, "code-in-arguments",
                          f"{call.opcode} of {target} with an argument that reads like code: "
                          f"{code[:120]!r}", member, call.offset, text)
            judged = known and known.severity == Severity.DANGEROUS  # its call is shown there
            if call.via and call.func is not None and not judged:
                # an allowed callable calls this argument: judged as a REDUCE of it would be,
                # without the enum pattern (its arguments are not the ones shown)
                verdict = call_verdict(call.func.key, False, [], self.rules)
                if verdict is not None:
                    self.find(verdict.severity, "call-outside-allowlist",
                              f"{call.via}: {verdict.reason}", member,
                              call.offset if depth == 0 else None, text)
            elif call.func is not None and not allowed and not judged and not call.runs and (
                    call.opcode in ("REDUCE", "INST", "OBJ")):
                # INST and OBJ call their target as REDUCE does, with no arguments too: pickle's
                # _instantiate calls klass() when it is not a class (a function), and a class's
                # __init__ runs when the argument tuple is not empty
                verdict = call_verdict(call.func.key, False, [f"{call.func.key}({call.args})"],
                                       self.rules)
                if verdict is not None:
                    self.find(verdict.severity, "call-outside-allowlist", verdict.reason,
                              member, call.offset if depth == 0 else None, text)
            if implicit and call.func is not None and not allowed:
                self._implicit(call, member, call.offset if depth == 0 else None, text)
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

    def _implicit(self, call: Call, member: str | None, offset: int | None, text: str) -> None:
        """NEWOBJ, BUILD, SETITEM(S), APPEND(S) and ADDITEMS run a method the instance's class
        may define (`IMPLICIT_METHODS`), and a dict key, a set item or an instance handed to
        an allowed callable has its protocols run (`Call.runs`): outside the call allow-list,
        each method is read from the class's source (`class_source.method_reaches`, never
        imported) and what it calls, directly or through the instance's other methods, the
        functions its module defines or imports from its own package and the classes of what
        the pickle put into its attributes, is judged as load-time source code is
        (`torch_package._denied`, the deny list's capabilities); a value the pickle stored that
        it calls is judged as a REDUCE of it. A method the source does not show (compiled, a
        builtin's) leaves the class's import judged alone."""
        func = call.func
        if call_allowed(func.key, self.rules):
            return
        lead = (f"{call.opcode} {call.role} an instance of {func.key}, which" if call.role
                else f"{call.opcode} of {func.key}")
        for method in call.runs or IMPLICIT_METHODS[call.opcode]:
            seen = (func.key, method, call.attrs)
            if seen in self.implicit_seen:
                continue
            self.implicit_seen.add(seen)
            try:
                reach = method_reaches(func.module, func.name, method, denied_in_source,
                                       call.attrs)
            except (RecursionError, ValueError):  # source too deep to read: as if unreadable
                reach = None
            if reach is None:
                continue
            reasons = list(reach.reasons)
            for ref, path in reach.stored:
                verdict = call_verdict(ref, False, [], self.rules) if ref else None
                if verdict is not None and verdict.severity == Severity.DANGEROUS:
                    reasons.append(f"what the pickle stored there ({path}): {verdict.reason}")
                elif not ref:
                    reasons.append(f"what the pickle stored there ({path}), a value made while "
                                   "loading, which cannot be checked statically")
            if reasons:
                self.find(Severity.DANGEROUS, "implicit-call",
                          f"{lead} runs {reach.where}, which calls {'; '.join(reasons[:3])}",
                          member, offset, text)

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
        if member is not None and member not in use.members and len(use.members) < KEPT_MEMBERS:
            use.members.append(member)

    def _nested(self, call: Call, member: str | None, depth: int) -> None:
        """Scan pickles passed as call arguments (pickle.loads(b"..."), decoders, configs) or
        handed to a class (its BUILD state, its constructor's arguments), whose own code may
        unpickle them: torch's _DataPipeSerializationWrapper.__setstate__ runs pickle.loads of
        its state. A pickle needs no PROTO opcode (protocol 0 and 1 have none, and any opcode
        reads without one): text that is no PROTO pickle is probed (bounded), and walked as one
        where it imports a real name (without an import a pickle calls nothing), when it goes to
        a callable outside the call allowlist (NumPy's array state, a datetime's bytes are data
        to code that unpickles nothing)."""
        probe = call.func is None or not call_allowed(call.func.key, self.rules)
        for text in call.strings:
            if len(text) < 3:
                continue
            proto = text[0] == "\x80" and ord(text[1]) <= 5
            if not proto and (not probe or ord(text[0]) not in _OPCODE_CHARS
                              or not imports(self.probe(text.encode("latin-1")))):
                continue
            inner = self.walk(text.encode("latin-1"))
            if not (looks_like_pickle(inner) if proto else imports(inner)):
                continue
            target = call.func.key if call.func else "a computed callable"
            if call.opcode == "BUILD":
                how = (f"BUILD hands {target} a pickle in its state (its __setstate__ gets it): "
                       f"that class's {HANDED_TO_CODE}")
            elif call.opcode in ("NEWOBJ", "NEWOBJ_EX", "INST", "OBJ", "SETITEM", "SETITEMS",
                                 "APPEND", "APPENDS", "ADDITEMS") or call.via:
                how = (f"{call.opcode} of {target} receives a pickle as an argument: its "
                       f"{HANDED_TO_CODE}")
            else:
                how = f"{call.opcode} of {target} receives a pickle as an argument"
            protocol = "" if proto else " (protocol 0 or 1, no PROTO opcode)"
            self.find(Severity.SUSPICIOUS, "nested-pickle",
                      f"{how}{protocol}; it was scanned as part of this file", member,
                      call.offset)
            self.add_pickle(inner, member, False, depth + 1)

    def probe(self, data, start: int = 0) -> PickleScan:
        """A quick bounded walk (`_PROBE`, within the budget) of bytes rarely a pickle."""
        self.budget.check()
        scan = scan_pickle(data, start, limits=Limits(
            max_opcodes=min(_PROBE.max_opcodes, self.budget.opcodes)))
        self.budget.walked(scan.opcodes)
        return scan

    def decoded_limit(self, cap: int = MAX_DECOMPRESSED) -> int:
        """How many bytes the next decode may produce: `cap`, or less if the budget says so."""
        self.budget.check()
        return min(cap, self.budget.decoded)

    def not_fully_read(self, code: str, why: str, member: str | None = None) -> None:
        """Part of the file was not scanned (a bound, a missing library): never safe."""
        self.find(Severity.SUSPICIOUS, code, f"not fully scanned: {why}", member)
        self.block(f"not fully scanned: {why}")

    def finish(self) -> None:
        """Fold what was gathered into the result: globals, weights_only, the verdict."""
        res = self.result
        order = sorted(self.uses.values(), key=lambda g: (-rank(g.severity), g.module, g.name))
        res.globals = order
        # torch.load hands a path named *.safetensors to safetensors.torch.load_file, which
        # refuses any header the check finds fault with; the name decides, not the content
        by_name = res.path.endswith(".safetensors")
        if by_name and (res.format != Format.SAFETENSORS or res.findings):
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

    def sibling(self) -> ScanContext:
        """A fresh context over the same file, rules, budget and dispatch, whose findings and
        blockers are its own (a second reading whose result is weighed apart)."""
        other = ScanContext(ScanResult(self.result.path), self.rules, dispatch=self.dispatch)
        other.budget = self.budget
        return other

    def decode(self, buf, algo: str, cap: int = MAX_DECOMPRESSED) -> decompress.Decoded:
        """A compressed stream's content (at most `cap` bytes), within the file's decode budget."""
        decoded = decompress.decompress(buf, algo, self.decoded_limit(cap))
        self.budget.decode(len(decoded.data))
        return decoded

    def scan_nested(self, data: bytes, member: str) -> bool:
        """A member that is itself an archive or a compressed file (a model folder zipped with its
        checkpoint inside, a .tar.gz): unpacked, its checkpoint is loaded, so it is scanned as a
        file of its own and its imports and findings are folded in under `member!inner`. Returns
        whether the member was one; torch.load never reads it, so nothing here blocks weights_only.
        """
        if not is_archive(data):
            return False
        kind = sniff(bytes(data[:512]), len(data))
        kind = kind if kind in NESTED_KINDS else "tar"  # a header only tarfile takes
        if self.nesting >= MAX_NESTING_ARCHIVES:
            self.not_fully_read("nested-too-deep",
                               f"a {kind} inside {self.nesting} archives was not opened", member)
            return True
        sub = ScanContext(ScanResult(f"{self.result.path}!{member}", size=len(data)), self.rules,
                          dispatch=self.dispatch)
        sub.nesting = self.nesting + 1
        sub.crc_budget = self.crc_budget
        sub.budget = self.budget
        spent = None
        try:
            self.dispatch(sub, data, len(data))
        except BudgetSpent as exc:  # folded below, then the whole file's scan stops
            spent = exc
        except Exception as exc:  # a parser bug inside must not hide what was found
            sub.result.error = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        sub.finish()
        self.crc_budget = sub.crc_budget
        inner = sub.result
        if spent is None and not_a_checkpoint(inner):
            return False  # an archive of other files (text, images): nothing a loader reads
        self.find(Severity.INFO, "nested-archive", f"member is a {inner.format} file, scanned as "
                 f"one (unpacked, it is loaded): {inner.verdict}", member)
        for use in sub.uses.values():
            for where in use.members or [None]:
                self._use(use.module, use.name, f"{member}!{where}" if where else member)
            mine = self.uses[(use.module, use.name)]
            mine.count += use.count - max(len(use.members), 1)
            for text, site in zip(use.calls, use.call_sites, strict=False):
                if len(mine.calls) < KEPT_CALLS and text not in mine.calls:
                    mine.calls.append(text)
                    mine.call_sites.append({"member": f"{member}!{site['member']}"
                                            if site["member"] else member, "offset": None})
        for f in inner.findings:
            self.find(f.severity, f.code, f.message,
                     f"{member}!{f.member}" if f.member else member, None, f.call)
        if inner.error:
            self.not_fully_read("nested-unreadable", f"{inner.format} inside: {inner.error}",
                                member)
        if spent is not None:
            raise spent
        return True


def _call_text(call: Call, use: GlobalUse | None) -> str:
    """A call as pseudo-Python, named by its real import: `os.system("touch x")`."""
    name = use.import_name if use else (call.func.key if call.func else "<computed>")
    if call.role:
        return f"{call.opcode} {call.role} an instance of {name}"
    if call.via and call.opcode in ("BUILD", "APPEND", "APPENDS", "ADDITEMS"):
        return f"{name}({call.args}) ({call.via})"  # a method an earlier BUILD stored
    if call.opcode == "BUILD":
        return f"{name}(…).__setstate__({call.args})"
    if call.via:
        return f"{call.via.split(' ', 1)[0]}({call.args}) calls {name}"
    return f"{name}({call.args})"


# Errors that say a file is no checkpoint at all (no format magic, nothing that parses as a
# pickle, a plain tar, an empty file such as an HF cache's .no_exist marker, a named pipe or a
# dangling link); a broken zip, safetensors or npy, or an unreadable file, stays an error.
NOT_A_CHECKPOINT = ("not a model file", "empty file", "not a readable tar file",
                     "cannot read: not a regular file", "cannot read: No such file")


def not_a_checkpoint(res: ScanResult) -> bool:
    """A file no loader reads as a model."""
    return (not res.findings and not res.globals and bool(res.error)
            and res.error.startswith(NOT_A_CHECKPOINT))
