"""Where unpacking an archive writes: each member's name and link resolved the way an extractor
without a filter places it (Python 3.11's `tarfile.extractall` and `shutil.unpack_archive`
apply none), in archive order, so a symlink made by one member is followed by the members
after it. Nothing is written: the folder is a name that no member can spell.

A member written outside the folder (an absolute name, a `..` part that climbs out, a path
through a link that leads out) and a hard link to a file outside it are dangerous; a symlink
that merely points outside is suspicious (it writes nothing until a member goes through it,
and that member is then the dangerous one).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Severity

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

# the folder an archive is unpacked into: a NUL cannot occur in a member's name as extractors
# read it (tarfile and zipfile cut names at the first NUL), so no member spells it
_ROOT = "/\x00unpack"
_MAX_LINK_HOPS = 40  # as the kernel's own bound on symlinks followed in one path


class Kind(Enum):
    """What an archive member becomes when unpacked."""

    FILE = "file"
    FOLDER = "folder"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"


@dataclass(frozen=True)
class Entry:
    """One archive member as an extractor sees it; `link` is a link's target as written."""

    name: str
    kind: Kind
    link: str = ""


@dataclass(frozen=True)
class Escape:
    """A member whose unpacking reaches outside the folder, and why."""

    member: str
    severity: Severity
    why: str


CODE = "writes-outside"
LINK_CODE = "link-outside"


def _inside(path: str) -> bool:
    return path == _ROOT or path.startswith(_ROOT + "/")


class _Folder:
    """The unpacked folder as far as names and links go: where each symlink made so far leads."""

    def __init__(self) -> None:
        self.links: dict[str, str] = {}  # a symlink's place -> where it leads (resolved)

    def place(self, name: str, follow_last: bool) -> tuple[str, str | None]:
        """Where `name` lands (its links followed; the last part too when `follow_last`, as
        opening a file for writing follows it) and the first link on the way that led out."""
        return self._walk(_ROOT if not name.startswith("/") else "/", name, follow_last, 0)

    def _walk(self, start: str, name: str, follow_last: bool, hops: int) -> tuple[str, str | None]:
        cur, via = start, None
        parts = [p for p in name.split("/") if p not in ("", ".")]
        for i, part in enumerate(parts):
            if part == "..":
                cur = posixpath.dirname(cur) if cur != "/" else "/"
                continue
            cur = cur.rstrip("/") + "/" + part
            if cur in self.links and (i < len(parts) - 1 or follow_last):
                if hops >= _MAX_LINK_HOPS:
                    return cur, via  # the kernel gives up (ELOOP): nothing is written there
                target = self.links[cur]
                if via is None and _inside(cur) and not _inside(target):
                    via = posixpath.relpath(cur, _ROOT)
                cur, hops = target, hops + 1
        return cur, via

    def link_target(self, place: str, link: str) -> str:
        """Where a symlink at `place` written as `link` leads, links before it followed."""
        start = "/" if link.startswith("/") else posixpath.dirname(place)
        return self._walk(start, link, True, 0)[0]


def escapes(entries: list[Entry]) -> list[Escape]:
    """Every member of `entries` (in archive order) whose unpacking reaches outside the folder."""
    folder, found = _Folder(), []
    for e in entries:
        place, via = folder.place(e.name, e.kind == Kind.FILE)
        if not _inside(place):
            how = (f"through the link {via!r}, which leads outside" if via is not None
                   else "its absolute name" if e.name.startswith("/")
                   else "a '..' part climbs out")
            found.append(Escape(e.name, Severity.DANGEROUS,
                                f"writes outside its folder when unpacked ({how})"))
            continue
        if e.kind == Kind.SYMLINK:
            target = folder.link_target(place, e.link)
            folder.links[place] = target
            if not _inside(target):
                found.append(Escape(e.name, Severity.SUSPICIOUS,
                                    f"a symlink to {e.link!r}, outside its folder: a member "
                                    "written through it, or a reader of it, leaves the folder"))
        elif e.kind == Kind.HARDLINK:
            # tarfile links to os.path.join(folder, linkname): an absolute name stays absolute
            target = folder.place(e.link, True)[0]
            if not _inside(target):
                found.append(Escape(e.name, Severity.DANGEROUS,
                                    f"writes outside its folder when unpacked (a hard link to "
                                    f"{e.link!r}, outside it: writing the member writes that "
                                    "file)"))
    return found


def report(ctx: FormatContext, entries: list[Entry]) -> bool:
    """Each escape of `entries` as a finding on its member; whether there was any."""
    found = escapes(entries)
    for esc in found:
        ctx.find(esc.severity, CODE if esc.severity == Severity.DANGEROUS else LINK_CODE,
                 esc.why, esc.member)
    return bool(found)
