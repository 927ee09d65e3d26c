"""Indicators for a security ticket: a flagged file's identity, imports and calls as plain text.

Built from the scan contract alone (no Qt, no torch), so the desktop app's "Copy threat summary"
and any other caller give the same block. Text that comes from the file is escaped
(`core.termtext`), so a pasted ticket shows what a payload hid rather than obeying it.
"""

from __future__ import annotations

from inspector.core.termtext import escape
from inspector.core.vocabulary import Severity
from inspector.scan.pickles.policy import real_name
from inspector.scan.result import Finding, GlobalUse, ScanResult

FLAGGED = (Severity.DANGEROUS, Severity.SUSPICIOUS)


def import_label(module: str, name: str) -> str:
    """A global as a person knows it: `os.system (posix.system)` when the pickle names an alias."""
    pickled = f"{module}.{name}"
    real = real_name(module, name)
    return real if real == pickled else f"{real} ({pickled})"


def flagged_globals(scan: ScanResult | None) -> list[GlobalUse]:
    """The scan's dangerous and suspicious globals, in the scan's order (worst first)."""
    return [g for g in (scan.globals if scan else ()) if g.severity in FLAGGED]


def flagged_findings(scan: ScanResult | None) -> list[Finding]:
    """The scan's dangerous and suspicious findings."""
    return [f for f in (scan.findings if scan else ()) if f.severity in FLAGGED]


def location(member: str | None, offset: int | None) -> str:
    """Where an opcode is: 'member data.pkl, offset 51', 'offset 54', or ''."""
    parts = [f"member {escape(member)}" if member else "",
             f"offset {offset}" if offset is not None else ""]
    return ", ".join(p for p in parts if p)


def indicators_text(scan: ScanResult | None, *, name: str, size: int | None,
                    sha256: str | None) -> str:
    """The plain-text block for a security ticket: file, size, SHA-256, verdict, imports, calls."""
    lines = [
        f"File: {escape(name)}",
        f"Size: {size:,} bytes" if size is not None else "Size: unknown",
        f"SHA-256: {sha256 or 'not computed yet'}",
        f"Format: {escape(scan.format if scan else 'unknown')}",
        f"Verdict: {scan.verdict if scan else 'not scanned'}",
    ]
    imports = flagged_globals(scan)
    lines += ["", f"Flagged imports ({len(imports)}):"]
    lines += [f"  {g.severity}: {escape(import_label(g.module, g.name))}, imported {g.count}x"
              + (f"; {escape(g.reason)}" if g.reason else "") for g in imports]
    lines += ["  none"] if not imports else []
    calls = [call for g in imports for call in call_sites(g)]
    findings = flagged_findings(scan)
    calls += [(f.call, {"member": f.member, "offset": f.offset}) for f in findings if f.call]
    lines += ["", f"Calls unpickling would make ({len(calls)}; reconstructed, never run):"]
    for text, site in calls:
        where = location(site.get("member"), site.get("offset"))
        lines.append(f"  {escape(text)}" + (f"    [{where}]" if where else ""))
    lines += ["  none"] if not calls else []
    lines += ["", f"Findings ({len(findings)}):"]
    for f in findings:
        where = location(f.member, f.offset)
        lines.append(f"  {f.severity}: {escape(f.code)}: {escape(f.message)}"
                     + (f" [{where}]" if where else ""))
    lines += ["  none"] if not findings else []
    return "\n".join(lines) + "\n"


def call_sites(g: GlobalUse) -> list[tuple[str, dict]]:
    """A global's calls, each with where it is made ({member, offset}; {} from a scan older
    than the `call_sites` key)."""
    calls = g.calls or []
    sites = g.call_sites or []
    return list(zip(calls, sites if len(sites) == len(calls) else [{}] * len(calls),
                    strict=True))
