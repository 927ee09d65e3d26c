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

import functools
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Severity
from inspector.formats.archives import python_source, zipread
from inspector.formats.archives.source_capability import legacy_denied
from inspector.formats.archives.source_judge import RUN_AT_LOAD as RUN_AT_LOAD
from inspector.formats.archives.source_judge import judge_source
from inspector.scan.pickles.policy import CALL_ALLOWED, KNOWN_DATA, weights_only_rules
from inspector.scan.pickles.presets import PRESET_GLOBALS

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

LOADER = "torch.package.PackageImporter"
MAX_SOURCE_BYTES = 4 << 20  # a larger source is reported unread
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
        parts = tuple(module.split("."))
        for i in range(len(parts), 0, -1):
            if parts[:i] in self.modules:
                return parts[:i]
        return None


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


def report(ctx: FormatContext, buf, layout: PackageLayout, members: list[zipread.Member]) -> None:
    """Report each interned source as code its loader runs, and judge the pickle globals that
    resolve to one (`ctx.uses`, after every member was read)."""
    judged: dict[tuple[str, ...], tuple[str, str]] = {}
    for atoms, copies in sorted(layout.modules.items()):
        module = ".".join(atoms)
        severity, why = Severity.SUSPICIOUS, []
        if reason := shadowed(module):
            severity, why = Severity.DANGEROUS, [reason]
        imports: list[str] = []
        bad: list[str] = []
        for copy in copies:  # every copy is judged: any one may be the source that runs
            try:
                raw = zipread.member_bytes(buf, copy, MAX_SOURCE_BYTES)
                found, denied = judge_source(python_source.normalized(raw))
            except ValueError as exc:
                unread = f"its source could not be read ({str(exc)[:100]})"
                why += [unread] if unread not in why else []
                continue
            imports += [i for i in found if i not in imports]
            bad += [b for b in denied if b not in bad]
        if bad:
            severity = Severity.DANGEROUS
            why.append("at import or unpickling it calls " + "; ".join(bad[:3]))
        if len(copies) > 1:
            why.append(f"the archive holds {len(copies)} sources for it "
                       f"({', '.join(sorted({c.name for c in copies}))}), each judged: "
                       "readers differ on which one runs")
        listed = f"; it imports {', '.join(imports[:8])}" if imports else ""
        message = (f"{LOADER} runs this source as module {module} wherever a pickle or the "
                   f"package's code imports it{listed}")
        ctx.find(severity, "package-code", message + ("; " + "; ".join(why) if why else ""),
                 copies[0].name)
        judged[atoms] = (severity, "; ".join(why))
    for use in ctx.uses.values():
        atoms = layout.resolve(use.module)
        if atoms is None:
            continue
        module = ".".join(atoms)
        severity, why = judged[atoms]
        use.reason = (f"resolves to {module}, which the archive interns: {LOADER} runs its "
                      f"source at load" + (f" ({why})" if why else ""))
        if severity == Severity.DANGEROUS or use.severity == Severity.SAFE:
            use.severity = severity
