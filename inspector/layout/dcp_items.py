"""Where a torch.distributed.checkpoint folder's `.metadata` says its items lie, read statically.

`.metadata` is a plain pickle of DCP's `Metadata`; its `storage_data` maps each item to a
`_StorageInfo(relative_path, offset, length)`: the byte range of one `torch.save` archive in a
`.distcp` data file. The static scan uses these ranges to read each archive's directory and
pickles instead of searching every page of the file for archive ends (`scan.engine`). Nothing is
unpickled: the opcodes are walked (`pickletools.genops`) with a stack of plain values, and
the classes are only names, compared as `module.qualname` (pickle and torch's weights_only
unpickler both resolve ('torch.distributed.checkpoint', 'filesystem._StorageInfo') to the same
class). The ranges are hints the scan checks, never trusted: a `.metadata` this walk does not
follow lists nothing, so every byte of its data files counts as unlisted (read in full and
suspicious), and a file's ranges are those of every name that opens it (`./x`, a link). A
name that opens a file outside the folder (`/abs/x`, `../x`) is one DCP reads and a scan of
the folder does not: `listed_files` gives each listed name with the file it opens, for the scan
to name those its walk of the folder does not reach (`scan.discover.outside_items`).
"""

from __future__ import annotations

import functools
import os
import pickletools
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

STORAGE_INFO = "torch.distributed.checkpoint.filesystem._StorageInfo"
MAX_METADATA = 256 << 20
METADATA_NAME = ".metadata"
DATA_SUFFIX = ".distcp"


class NotFollowed(ValueError):
    """An opcode or a shape this walk does not follow."""


@dataclass
class _Object:
    """An instance built by NEWOBJ (or REDUCE) of a named class; BUILD gives its state."""

    cls: str | None
    state: object = None


@dataclass
class _Walk:
    stack: list = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    memo: dict[int, object] = field(default_factory=dict)
    built: list[_Object] = field(default_factory=list)

    def pop_mark(self) -> list:
        at = self.marks.pop()
        items, self.stack[at:] = self.stack[at:], []
        return items


_PLAIN = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


def _step(walk: _Walk, name: str, arg: object) -> None:
    """One opcode on the walk's stack; dicts are lists of pairs (keys may be objects)."""
    stack = walk.stack
    if name in ("PROTO", "FRAME", "STOP"):
        return
    if name in _PLAIN:
        stack.append(_PLAIN[name])
    elif name in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG", "BINFLOAT",
                  "FLOAT", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
                  "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "STRING", "BINSTRING",
                  "SHORT_BINSTRING"):
        stack.append(arg)
    elif name == "MARK":
        walk.marks.append(len(stack))
    elif name in ("EMPTY_DICT", "EMPTY_LIST"):
        stack.append([])
    elif name == "EMPTY_TUPLE":
        stack.append(())
    elif name in _TUPLES:
        count = _TUPLES[name]
        stack[-count:] = [tuple(stack[-count:])]
    elif name == "TUPLE":
        stack.append(tuple(walk.pop_mark()))
    elif name in ("DICT", "LIST"):
        items = walk.pop_mark()
        stack.append(list(zip(items[::2], items[1::2], strict=True)) if name == "DICT"
                     else items)
    elif name == "SETITEM":
        value, key = stack.pop(), stack.pop()
        stack[-1].append((key, value))
    elif name == "SETITEMS":
        items = walk.pop_mark()
        stack[-1].extend(zip(items[::2], items[1::2], strict=True))
    elif name == "APPEND":
        item = stack.pop()
        stack[-1].append(item)
    elif name == "APPENDS":
        items = walk.pop_mark()
        stack[-1].extend(items)
    elif name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):
        walk.memo[len(walk.memo) if name == "MEMOIZE" else int(arg)] = stack[-1]
    elif name in ("GET", "BINGET", "LONG_BINGET"):
        stack.append(walk.memo[int(arg)])
    elif name in ("GLOBAL", "STACK_GLOBAL"):
        if name == "STACK_GLOBAL":
            qualname, module = stack.pop(), stack.pop()
        else:
            module, _, qualname = str(arg).partition(" ")
        stack.append(("global", f"{module}.{qualname}"))
    elif name in ("NEWOBJ", "REDUCE"):
        args, cls = stack.pop(), stack.pop()
        named = cls[1] if isinstance(cls, tuple) and cls[:1] == ("global",) else None
        obj = _Object(named, args if name == "REDUCE" else None)
        walk.built.append(obj)
        stack.append(obj)
    elif name == "BUILD":
        state = stack.pop()
        obj = stack[-1]
        if not isinstance(obj, _Object):
            raise NotFollowed("BUILD of something no class made")
        # BUILD updates the object's __dict__ with a copy of the state as it is now: a
        # SETITEM on the same dict later (through the memo) changes nothing the loader reads
        prior = obj.state if isinstance(obj.state, list) else []
        obj.state = prior + state if isinstance(state, list) else state
    else:
        raise NotFollowed(f"opcode {name}")


def item_ranges(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """(offset, length) of every stored item, by data file name; NotFollowed when the pickle
    is not one this walk follows (the caller then has no hints)."""
    if len(data) > MAX_METADATA:
        raise NotFollowed(".metadata is larger than a metadata file")
    walk = _Walk()
    try:
        for op, arg, _pos in pickletools.genops(data):
            _step(walk, op.name, arg)
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise NotFollowed(f"{type(exc).__name__}: {exc}") from None
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for obj in walk.built:
        if obj.cls != STORAGE_INFO:
            continue
        state = _pairs(obj.state)
        name, offset, length = (state.get(k) for k in ("relative_path", "offset", "length"))
        if not (type(name) is str and type(offset) is int and type(length) is int):
            raise NotFollowed("a _StorageInfo without a file name, offset and length")
        ranges[name].append((offset, length))
    return dict(ranges)


def _pairs(state: object) -> dict:
    """A BUILD state that is a dict of (hashable key, value) pairs as a dict; any other state
    (a list of other things, a slot-state tuple, an unhashable key) is {}: not followed."""
    if not isinstance(state, list) or not all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in state):
        return {}
    return dict(state)


def listed_archives(path: str | os.PathLike[str]) -> list[tuple[int, int]] | None:
    """The (offset, length) of every item the `.metadata` beside a `.distcp` file lists in it,
    under any name that opens this file; None for another file or one with no `.metadata`
    beside it, [] when that `.metadata` lists nothing here or is not one this walk follows."""
    path = Path(path)
    if path.suffix != DATA_SUFFIX:
        return None
    metadata = path.parent / METADATA_NAME
    try:
        st, own = metadata.stat(), path.stat()
    except OSError:
        return None
    listing = _folder_ranges(str(metadata), st.st_mtime_ns, st.st_size)
    return [] if listing is None else listing.by_file.get((own.st_dev, own.st_ino), [])


def listed_files(metadata: str | os.PathLike[str]) -> list[tuple[str, tuple[int, int]]]:
    """Each data file name a `.metadata` lists, with the (st_dev, st_ino) of the file it opens
    (names that open nothing left out: DCP cannot open them either); [] for any other file
    and for a `.metadata` this walk does not follow."""
    path = Path(metadata)
    if path.name != METADATA_NAME:
        return []
    try:
        st = path.stat()
    except OSError:
        return []
    listing = _folder_ranges(str(path), st.st_mtime_ns, st.st_size)
    return [] if listing is None else listing.opened


class _Listing(NamedTuple):
    by_file: dict[tuple[int, int], list[tuple[int, int]]]
    """Ranges by the (st_dev, st_ino) of the file a listed name opens."""
    opened: list[tuple[str, tuple[int, int]]]
    """Each listed name and the file it opens, in the order `.metadata` lists them."""


@functools.lru_cache(maxsize=8)
def _folder_ranges(metadata: str, _mtime_ns: int, _size: int) -> _Listing | None:
    """One folder's ranges, read once for all its data files, by the identity of the file each
    name opens (DCP opens folder / relative_path); None when the walk does not follow it."""
    try:
        with open(metadata, "rb") as fh:
            by_name = item_ranges(fh.read(MAX_METADATA + 1))
    except (OSError, NotFollowed):
        return None
    folder = os.path.dirname(metadata)
    listing = _Listing(defaultdict(list), [])
    for name, ranges in by_name.items():
        try:
            key = _identity(os.path.join(folder, name))
        except (OSError, ValueError):
            continue  # no file there (or a NUL in the name): DCP cannot open it either
        listing.by_file[key] += ranges
        listing.opened.append((name, key))
    return listing


def _identity(path: str | os.PathLike[str]) -> tuple[int, int]:
    """The file a path opens (links followed), as (st_dev, st_ino)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino
