"""torch.package archives: the Python source an archive ships, which its loader runs.

A torch.package archive (`torch.package.PackageExporter`) is a zip whose one folder holds
`.data/version`, `.data/extern_modules` (the modules left to the loading interpreter), pickles
(`*.pkl`) and the source of every module it interns (`a/b.py`, `a/__init__.py`).
`torch.package.PackageImporter` resolves each module a pickle names, and each import the
package's own code makes, against that tree first: an interned module's source runs at load, in
place of any module of the same name. So the sources are read as code here (parsed with `ast`,
never run): each is reported with the loader that runs it, and is dangerous where it shadows a
standard or allowed module, or where what runs at import or unpickling reaches a capability on
the deny list (`source_judge.judge_source`). A pickle global that resolves to an interned
module is judged as that code.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Severity
from inspector.formats.archives import python_source, zipread
from inspector.formats.archives.source_capability import legacy_denied
from inspector.formats.archives.source_judge import RUN_AT_LOAD as RUN_AT_LOAD
from inspector.formats.archives.source_judge import judge_module
from inspector.formats.archives.source_judge import judge_source as judge_source
from inspector.scan.pickles.opcodes import PERSISTENT_ID_READS
from inspector.scan.pickles.policy import CALL_ALLOWED, KNOWN_DATA, weights_only_rules
from inspector.scan.pickles.presets import PRESET_GLOBALS

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

LOADER = "torch.package.PackageImporter"
MAX_SOURCE_BYTES = 4 << 20  # a larger source is reported unread
_MANGLED = re.compile(r"<torch_package_\d+>")
# PackageImporter binds itself as this module, before any the archive interns: a pickle's
# `torch_package_importer.import_module` is its own import_module (and load_pickle ...)
IMPORTER_MODULE = "torch_package_importer"
_IMPORTER_REASON = (f"{IMPORTER_MODULE} is the {LOADER} itself (it binds itself under that "
                    "name for the package's code): it can import modules: imports modules or "
                    "loads code by name (import_module, load_pickle, its zip reader)")
# the deny list read by final names, which `scan.context` judges installed methods with
_denied = legacy_denied


@dataclass(frozen=True)
class PackageLayout:
    """What a torch.package archive holds: its folder and its interned modules' sources."""

    root: str
    # interned module (the atoms of its dotted name, as PackageImporter's tree holds them) ->
    # every record that may be its source: each copy of a name the zip holds twice (torch's
    # reader runs the first, zipfile hands out the last), and both of `a.py` and `a/__init__.py`
    modules: dict[tuple[str, ...], tuple[zipread.Member, ...]]
    extern: frozenset[str]  # modules the archive leaves to the loading interpreter

    def resolve(self, module: str) -> tuple[str, ...] | None:
        """The interned module that `module` (a pickle global's) resolves to, or None: the
        module itself or the package it lies in, as PackageImporter walks its tree (one atom
        per dot, whatever the atom spells: `my-mod`, `9lives` and `a b` import as well)."""
        found = self.split(module)
        return found[0] if found else None

    def split(self, dotted: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(the interned module `dotted` lies in, the names after it), or None where it lies
        in none: read as written and demangled (PackageImporter strips its own
        `<torch_package_N>.` prefix, N counting the importers the process made)."""
        for name in dict.fromkeys((demangled(dotted), dotted)):
            parts = tuple(name.split("."))
            for i in range(len(parts), 0, -1):
                if parts[:i] in self.modules:
                    return parts[:i], parts[i:]
        return None


def demangled(name: str) -> str:
    """`name` without a leading `<torch_package_N>.` (PackageImporter's mangling of the modules
    it makes, which its own `import_module` and `find_class` strip)."""
    head, dot, rest = name.partition(".")
    return rest if dot and _MANGLED.fullmatch(head) else name


def module_atoms(inner: str) -> tuple[str, ...] | None:
    """The module a record of the package's folder (`a/b.py`, `a/__init__.py`) is, as
    PackageImporter's `_add_file` files it into the tree it imports from: one atom per path
    part, any text at all (it checks none for being an identifier). None for a record that is
    no module: not `.py`, under `.data/` (its own records), or the folder's own `__init__.py`
    (the root, which no name imports)."""
    if not inner.endswith(".py") or inner.startswith(".data/"):
        return None
    *prefix, last = inner.split("/")
    atoms = tuple(prefix) if last == "__init__.py" else (*prefix, last[:-3])
    return atoms or None


def layout_of(buf, members: list[zipread.Member]) -> PackageLayout | None:
    """The archive read as a torch.package, or None where it is not one: PackageImporter
    needs `.data/extern_modules`, and torch's reader `.data/version` or `version`, each found
    as that reader looks a record up (case-insensitively: `zipread.torch_member`)."""
    root = members[0].name.split("/", 1)[0] if members else ""
    listed = zipread.torch_member(members, f"{root}/.data/extern_modules")
    if listed is None or not any(zipread.torch_member(members, f"{root}/{version}")
                                 for version in (".data/version", "version")):
        return None
    try:
        text = zipread.member_bytes(buf, listed, 1 << 20).decode("utf-8", "replace")
    except ValueError:
        text = ""
    # its module tree holds each record's name as written (`get_all_records`), but it reads a
    # module's source with `get_record`, which may open any record whose name differs only in
    # case: every one of those is a copy that may run
    alike: dict[str, list[zipread.Member]] = {}
    for m in members:
        alike.setdefault(zipread.torch_name(m.name), []).append(m)
    modules: dict[tuple[str, ...], tuple[zipread.Member, ...]] = {}
    for m in members:
        atoms = module_atoms(m.name[len(root) + 1:]) if m.name.startswith(root + "/") else None
        if atoms is not None:
            known = modules.get(atoms, ())
            modules[atoms] = known + tuple(c for c in alike[zipread.torch_name(m.name)]
                                           if c not in known)
    return PackageLayout(root, modules, frozenset(text.split()))


# PackageImporter's own text records, as it reads them; one that reads otherwise is walked as
# any other member (no loader unpickles them, and none can call anything when they read so)
_TEXT_RECORDS = {".data/extern_modules": re.compile(rb"(?:[A-Za-z_][\w.]*\n)*"),
                 ".data/version": re.compile(rb"\d{1,9}\n?"),
                 ".data/python_version": re.compile(rb"[\w.+]{0,40}\n?"),
                 ".data/serialization_id": re.compile(rb"\d{0,40}\n?")}


def not_pickles(buf, layout: PackageLayout, members: list[zipread.Member]) -> set[str]:
    """The members PackageImporter reads as something other than a pickle: the interned
    sources (Python), and its text records (the ones torch's reader opens for their names)
    where they read as it writes them."""
    found = {m.name for copies in layout.modules.values() for m in copies}
    for inner, pattern in _TEXT_RECORDS.items():
        m = zipread.torch_member(members, f"{layout.root}/{inner}")
        try:
            if m is not None and pattern.fullmatch(zipread.member_bytes(buf, m, 1 << 20)):
                found.add(m.name)
        except ValueError:
            continue
    return found


def records(layout: PackageLayout, by_name: dict[str, zipread.Member]
            ) -> dict[str, zipread.Member]:
    """The storage records under the names a torch zip gives them (`ROOT/data/KEY`):
    PackageImporter reads storage KEY from `ROOT/.data/KEY.storage` (found case-insensitively)."""
    head, tail = zipread.torch_name(f"{layout.root}/.data/"), ".storage"
    return {f"{layout.root}/data/{name[len(head):-len(tail)]}": m for name, m in by_name.items()
            if (folded := zipread.torch_name(name)).startswith(head) and folded.endswith(tail)}


@functools.cache
def _allowed_heads() -> frozenset[str]:
    """The top-level modules of every name the allow-lists admit."""
    names = set(weights_only_rules().allowed) | CALL_ALLOWED | PRESET_GLOBALS | KNOWN_DATA
    return frozenset(n.split(".", 1)[0] for n in names)


def shadowed(module: str) -> str | None:
    """Why an interned `module` shadows a module the loading interpreter would otherwise use:
    a standard-library module, or one the allow-lists admit names from; None when it does not."""
    head = module.split(".", 1)[0]
    if head in sys.stdlib_module_names or head == "builtins":
        return f"it shadows the standard-library module {head}"
    if head in _allowed_heads():
        return f"it shadows {head}, whose names the allow-lists admit"
    return None


# What the load may run in a module whose names a pickle, or code that runs at load, uses:
# beside `RUN_AT_LOAD`, the protocols an allowed callable, torch's storage loader and the
# package's persistent_load run on an instance they are handed (`PERSISTENT_ID_READS`, which
# holds `HANDED` and `HASHED`), what a call of one of its classes runs, and a descriptor's
# `__get__` (`getattr(Cls, 'name')`) and `__set__` (BUILD's slot state); each by name, in
# every class of the module (a method may be inherited from any of them)
_ON_USE = frozenset(PERSISTENT_ID_READS) | {"__init__", "__new__", "__post_init__", "__call__",
                                            "__get__", "__set__"}
MAX_JUDGINGS = 4096  # module judgings while names are followed from module to module


@dataclass(frozen=True)
class _Copy:
    """One record that may be an interned module's source: its tree, or why it is unread."""

    member: zipread.Member
    tree: ast.Module | None
    unread: str
    package: tuple[str, ...]  # where its relative imports start


@dataclass
class _Verdict:
    """One interned module as judged with the names its load runs."""

    severity: str
    why: list[str]
    imports: list[str]
    named: set[str]  # what its load-time code names: where other interned code runs next


def _copies(buf, layout: PackageLayout) -> dict[tuple[str, ...], list[_Copy]]:
    """Every interned module's copies, each read and parsed once."""
    out: dict[tuple[str, ...], list[_Copy]] = {}
    for atoms, members in sorted(layout.modules.items()):
        for m in members:
            package = atoms if m.name.lower().endswith("/__init__.py") else atoms[:-1]
            try:
                raw = zipread.member_bytes(buf, m, MAX_SOURCE_BYTES)
                tree, unread = python_source.parse(python_source.normalized(raw)), ""
            except ValueError as exc:
                tree, unread = None, f"its source could not be read ({str(exc)[:100]})"
            out.setdefault(atoms, []).append(_Copy(m, tree, unread, package))
    return out


def _judge(atoms: tuple[str, ...], copies: list[_Copy], roots: frozenset[str]) -> _Verdict:
    """One module's copies judged as code that runs at load, with `roots` beside
    `RUN_AT_LOAD`; every copy is judged: any one may be the source that runs."""
    reason = shadowed(".".join(atoms))
    verdict = _Verdict(Severity.DANGEROUS if reason else Severity.SUSPICIOUS,
                       [reason] if reason else [], [], set())
    bad: list[str] = []
    for copy in copies:
        if copy.tree is None:
            verdict.why += [copy.unread] if copy.unread not in verdict.why else []
            continue
        judged = judge_module(copy.tree, RUN_AT_LOAD | roots, package=copy.package)
        verdict.imports += [i for i in judged.imports if i not in verdict.imports]
        bad += [b for b in judged.denied if b not in bad]
        verdict.named |= judged.named
    if bad:
        verdict.severity = Severity.DANGEROUS
        verdict.why.append("at import, unpickling or as the load uses its objects it calls "
                           + "; ".join(bad[:3]))
    if len(copies) > 1:
        verdict.why.append(f"the archive holds {len(copies)} sources for it "
                           f"({', '.join(sorted({c.member.name for c in copies}))}), each "
                           "judged: readers differ on which one runs")
    return verdict


def _grow(layout: PackageLayout, roots: dict[tuple[str, ...], frozenset[str]],
          dotted: str) -> tuple[str, ...] | None:
    """Add to `roots` what using `dotted` (a pickle's global, a name code that runs at load
    names) may run in the interned module it lies in: the names after the module's (a
    function's body, a class's methods by those names) and `_ON_USE`. The module, where its
    roots grew."""
    found = layout.split(dotted)
    if found is None:
        return None
    atoms, rest = found
    more = _ON_USE | set(rest)
    if more <= roots[atoms]:
        return None
    roots[atoms] |= more
    return atoms


def _judge_package(ctx: FormatContext, buf, layout: PackageLayout
                   ) -> dict[tuple[str, ...], _Verdict]:
    """Every interned module judged with what the load runs of it: what the pickles use of it
    (`ctx.uses`), then, round by round, what the judged code names in other interned
    modules (PackageImporter imports them from the archive), until nothing more is named."""
    copies = _copies(buf, layout)
    roots = dict.fromkeys(copies, frozenset())
    for use in ctx.uses.values():
        _grow(layout, roots, f"{use.module}.{use.name}")
    verdicts: dict[tuple[str, ...], _Verdict] = {}
    todo, judgings = set(copies), 0
    while todo and judgings < MAX_JUDGINGS:
        judgings += len(todo)
        for atoms in todo:
            verdicts[atoms] = _judge(atoms, copies[atoms], roots[atoms])
        named = {name for atoms in todo for name in verdicts[atoms].named}
        todo = {grown for name in sorted(named) if (grown := _grow(layout, roots, name))}
    if todo:
        ctx.not_fully_read("package-code-unfollowed", f"the interned modules' calls of one "
                           f"another were followed {MAX_JUDGINGS} judgings deep")
    return verdicts


def report(ctx: FormatContext, buf, layout: PackageLayout, members: list[zipread.Member]) -> None:
    """Report each interned source as code its loader runs, and judge the pickle globals that
    resolve to one (`ctx.uses`, after every member was read)."""
    verdicts = _judge_package(ctx, buf, layout)
    for atoms, verdict in sorted(verdicts.items()):
        copies = layout.modules[atoms]
        listed = f"; it imports {', '.join(verdict.imports[:8])}" if verdict.imports else ""
        message = (f"{LOADER} runs this source as module {'.'.join(atoms)} wherever a pickle "
                   f"or the package's code imports it{listed}")
        ctx.find(verdict.severity, "package-code", message + (
            "; " + "; ".join(verdict.why) if verdict.why else ""), copies[0].name)
    for use in ctx.uses.values():
        if demangled(use.module) == IMPORTER_MODULE:
            use.severity, use.reason = Severity.DANGEROUS, _IMPORTER_REASON
            continue
        atoms = layout.resolve(use.module)
        if atoms is None:
            continue
        verdict = verdicts[atoms]
        why = "; ".join(verdict.why)
        use.reason = (f"resolves to {'.'.join(atoms)}, which the archive interns: {LOADER} "
                      f"runs its source at load" + (f" ({why})" if why else ""))
        if verdict.severity == Severity.DANGEROUS or use.severity == Severity.SAFE:
            use.severity = verdict.severity
