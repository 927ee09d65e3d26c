"""Where unpacking an archive writes: each member's name and link resolved the way an extractor
without a filter places it (Python 3.11's `tarfile.extractall` and `shutil.unpack_archive`
apply none), in archive order, so a symlink made by one member is followed by the members
after it. Nothing is written: the folder is a name that no member can spell.

A member written outside the folder (an absolute name, a `..` part that climbs out, a path
through a link that leads out) and a hard link to a file outside it are dangerous; a symlink
that merely points outside is suspicious (it writes nothing until a member goes through it,
and that member is then the dangerous one).

Going through a link includes its last part wherever tarfile follows it: a file is opened
for writing; a folder member's mode, owner and times are set with chmod, chown and utime
(which follow a link), at its turn by `extract` and once every member is unpacked by
`extractall` (so by the links as they stand then); a hard link made over an existing link
fails, and tarfile then copies the member it names there, through the link, and sets its
mode, owner and times. And `os.link` links a symlink itself, not what it points at: a hard
link to a symlink becomes a copy of it, read from its own place, and its mode, owner and
times are set through it. A symlink member is made with its own owner (`lchown`) and no mode
or times; a fifo or device over an existing path fails (`mkfifo`, `mknod`).
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
        self.texts: dict[str, str] = {}  # a symlink's place -> its target as written

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


# why a member through a link to the outside reaches it, by what tarfile does at its last part
_THROUGH = {
    Kind.FOLDER: "tarfile sets the folder's mode, owner and times there",
    Kind.HARDLINK: "tarfile, unable to link over the link, copies the member it names there "
                   "and sets its mode, owner and times",
}


def _outside(e: Entry, via: str | None, when: str = "") -> Escape:
    how = (f"through the link {via!r}, which leads outside" if via is not None
           else "its absolute name" if e.name.startswith("/")
           else "a '..' part climbs out")
    if via is not None and e.kind in _THROUGH:
        how += f"{when}: {_THROUGH[e.kind]}"
    return Escape(e.name, Severity.DANGEROUS, f"writes outside its folder when unpacked ({how})")


def escapes(entries: list[Entry]) -> list[Escape]:
    """Every member of `entries` (in archive order) whose unpacking reaches outside the folder."""
    folder, found = _Folder(), []
    folders: list[Entry] = []  # folder members placed inside: judged again once all are made
    for e in entries:
        # tarfile follows the last part too: opening a file; chmod, chown and utime of a folder
        # or a hard link; copying into a hard link's place when linking over a link fails
        place, via = folder.place(e.name, e.kind != Kind.SYMLINK)
        if not _inside(place):
            found.append(_outside(e, via))
            continue
        if e.kind == Kind.FOLDER:
            folders.append(e)
        elif e.kind == Kind.SYMLINK:
            target = folder.link_target(place, e.link)
            folder.links[place], folder.texts[place] = target, e.link
            if not _inside(target):
                found.append(Escape(e.name, Severity.SUSPICIOUS,
                                    f"a symlink to {e.link!r}, outside its folder: a member "
                                    "written through it, or a reader of it, leaves the folder"))
        elif e.kind == Kind.HARDLINK:
            copy = _symlink_copy(folder, e)
            # tarfile links to os.path.join(folder, linkname): an absolute name stays absolute
            target = folder.place(e.link, True)[0]
            if not _inside(target):
                found.append(Escape(e.name, Severity.DANGEROUS,
                                    f"writes outside its folder when unpacked (a hard link to "
                                    f"{e.link!r}, outside it: writing the member writes that "
                                    "file)"))
            elif copy is not None and not _inside(copy[0]):
                found.append(Escape(e.name, Severity.DANGEROUS,
                                    f"writes outside its folder when unpacked (a hard link to "
                                    f"the symlink {e.link!r}, which makes it a symlink to "
                                    f"{copy[1]!r} from its own place, outside its folder: "
                                    "tarfile sets its mode, owner and times through it)"))
    # extractall sets a folder's mode, owner and times after the last member, through the links
    # that stand then
    for e in folders:
        place, via = folder.place(e.name, True)
        if not _inside(place):
            found.append(_outside(e, via, " once every member is unpacked"))
    return found


def _symlink_copy(folder: _Folder, e: Entry) -> tuple[str, str] | None:
    """A hard link to a symlink: link(2) links the symlink itself (as does tarfile's fallback,
    which makes the symlink member again), so the member becomes a symlink with the same target
    as written, read from its own place (recorded here; tarfile then sets the member's mode,
    owner and times through it). Where the copy leads and its target as written; None where
    `e` links no symlink."""
    source = folder.place(e.link, False)[0]
    if source not in folder.links:
        return None
    text = folder.texts[source]
    here = folder.place(e.name, False)[0]
    folder.links[here], folder.texts[here] = folder.link_target(here, text), text
    return folder.links[here], text


def report(ctx: FormatContext, entries: list[Entry]) -> bool:
    """Each escape of `entries` as a finding on its member; whether there was any."""
    found = escapes(entries)
    for esc in found:
        ctx.find(esc.severity, CODE if esc.severity == Severity.DANGEROUS else LINK_CODE,
                 esc.why, esc.member)
    return bool(found)
