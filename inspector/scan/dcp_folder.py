"""A torch.distributed.checkpoint folder as one input: found by its `.metadata`, scanned whole.

`dcp.save` writes a folder of `.metadata` (pickled with plain pickle) and `__R_N.distcp` data
files. `scan_folder` scans every file in it statically (the `.metadata` pickle included) and
sums them up as one `scan` record of format `dcp`: the worst verdict wins, an import the files
share is one global (counts summed, the worst severity's reason), findings are every file's (a
finding's or a global's `member` is prefixed with its file's name), and the
per-file records are kept under `files`. A file that cannot be read fails the whole folder.
The worker then reads the folder with `tensors.dcp`.
"""

from __future__ import annotations

import os
from pathlib import Path

from inspector.core.verdict import rank, worst
from inspector.core.vocabulary import Verdict
from inspector.layout.dcp_items import METADATA_NAME
from inspector.scan.discover import discover
from inspector.scan.engine import scan_dcp_aware
from inspector.scan.result import KEPT_CALLS, KEPT_MEMBERS, GlobalUse, ScanResult

FORMAT = "dcp"


def is_dcp_folder(path: str | os.PathLike[str]) -> bool:
    """True for a folder holding a torch.distributed.checkpoint `.metadata` file."""
    folder = Path(path)
    return folder.is_dir() and (folder / METADATA_NAME).is_file()


def folder_files(path: str | os.PathLike[str]) -> list[Path]:
    """Every file of the folder, as `discover` lists them (hidden ones included)."""
    return [found.path for found in discover([path])]


def folder_size(path: str | os.PathLike[str]) -> int:
    """Bytes of every file in the folder."""
    return sum(p.stat().st_size for p in folder_files(path))


def scan_folder(path: str | os.PathLike[str]) -> ScanResult:
    """The folder's `scan` record: every file scanned, summed up as one checkpoint. A data
    file's scan reads the archives `.metadata` lists there (`layout.dcp_items`) rather than
    searching all its pages for them; without readable hints it searches as for any file."""
    folder = Path(path)
    return sum_scans(folder, [scan_dcp_aware(p) for p in folder_files(folder)], FORMAT)


def sum_scans(path: Path, scans: list[ScanResult], fmt: str,
              weights_only_ok: bool = False) -> ScanResult:
    """Several files' scans as one checkpoint's, of format `fmt` (`unreadable` when a file
    could not be read; each file's own scan kept under `files`); the sharded `inspect` sums
    its shards' scans the same way."""
    errors = [f"{Path(s.path).name}: {s.error}" for s in scans
              if s.verdict == Verdict.ERROR and s.error]
    findings = []
    for scan in scans:
        name = Path(scan.path).name
        findings += [{**f.to_json(), "member": f"{name}:{f.member}" if f.member else name}
                     for f in scan.findings]
    return ScanResult.from_json({
        "path": str(path),
        "format": fmt if not errors else "unreadable",
        "verdict": worst(s.verdict for s in scans if s.verdict != Verdict.SKIPPED),
        "weights_only_ok": weights_only_ok and not errors,
        "globals": [g.to_json() for g in merge_globals(scans)],
        "findings": findings,
        "error": "; ".join(errors) or None,
        "size": sum(s.size or 0 for s in scans),
        "files": [s.to_json() for s in scans],
    })


def merge_globals(scans: list[ScanResult]) -> list[GlobalUse]:
    """One global per import across the files, as a single file's scan lists them: a set of
    shards that all import `collections.OrderedDict` shows it once, counted over all."""
    merged: dict[tuple[str, str], GlobalUse] = {}
    for scan in scans:
        name = Path(scan.path).name
        for g in scan.globals:
            mine = merged.get((g.module, g.name))
            if mine is None:
                mine = merged[(g.module, g.name)] = GlobalUse(g.module, g.name, 0, g.severity,
                                                               g.reason)
            elif rank(g.severity) > rank(mine.severity):
                mine.severity, mine.reason = g.severity, g.reason
            mine.count += g.count
            for where in g.members or [None]:
                member = f"{name}:{where}" if where else name
                if member not in mine.members and len(mine.members) < KEPT_MEMBERS:
                    mine.members.append(member)
            for text, site in zip(g.calls, g.call_sites, strict=False):
                if text not in mine.calls and len(mine.calls) < KEPT_CALLS:
                    mine.calls.append(text)
                    mine.call_sites.append({**site, "member": f"{name}:{site['member']}"
                                            if site.get("member") else name})
    return sorted(merged.values(), key=lambda g: (-rank(g.severity), g.module, g.name))
