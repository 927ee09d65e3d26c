"""The pickle records torch's own zip reader hands out of an archive: the verdict's reading of
an archive the scan's zip reader finds damaged.

The scan reads zip structures with the project's own reader (`formats.archives.zipread`), which
agrees with torch's (miniz, inside `torch._C.PyTorchFileReader`) on the archives torch writes.
Where
that reader sees any damage, which members torch.load would unpickle, and with which bytes,
is miniz's decision: it refuses some archives whole, checks offsets, sizes and directory
entries its own way. So those archives are opened here, in the jail, by torch's reader
itself, and each `.pkl` record it hands out is read by the real unpicklers.

Importing torch costs a second or two, most of a folder scan's time, so one decision is taken
without it where it is certain (`torch_refuses`): an archive torch's reader opens, if at all,
to refuse it before handing out a record, because its first directory entry lies in no folder
or no version record exists. Everything else goes to torch's reader.
`tests/test_zip_records.py` holds that decision to torch's reader on damaged archives and
mutants.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from inspector.core.map_io import MapIO

MAX_RECORDS = 1000  # records of one archive listed (a crafted directory names millions)
MAX_RECORD_BYTES = 256 << 20  # a .pkl record larger than this is left to the static walk

_LOCAL = b"PK\x03\x04"
_CENTRAL = b"PK\x01\x02"
_END = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
# miniz looks for its end record from the file's end in 4,096-byte chunks, each starting 4,093
# bytes before the last, until one starts 65,557 bytes (a record and the longest comment) or
# more from the end: every start up to 65,557 bytes from the end is searched, none past
# 4,096 + 17 chunks
_SEARCHED = 0xFFFF + 22
_UNSEARCHED = 4096 + 4093 * 17


def torch_pickles(data) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each `.pkl` record torch's zip reader hands out of `data` (torch.load,
    DCP and torch.jit.load unpickle these); nothing when it refuses the archive. torch.load
    takes the zip path only for bytes that open with a local header."""
    if bytes(data[:4]) != _LOCAL or torch_refuses(data):
        return
    yield from torch_reading(data)


def torch_reading(data) -> Iterator[tuple[str, bytes]]:
    """What `torch_pickles` hands out, read by torch's reader itself."""
    import torch

    try:
        reader = torch._C.PyTorchFileReader(MapIO(data))
        names = reader.get_all_records()
    except Exception:  # miniz refuses the archive: torch.load reads nothing from it
        return
    for name in names[:MAX_RECORDS]:
        if not name.endswith(".pkl"):
            continue
        try:
            record = reader.get_record(name)
        except Exception:  # this record cannot be read: torch.load fails there
            continue
        if len(record) <= MAX_RECORD_BYTES:
            yield name, record


def torch_refuses(data) -> bool:
    """Whether torch's reader certainly hands out nothing from the archive `data`; False
    where that is not certain (torch's reader decides then).

    The reader's constructor either fails in miniz's directory read (nothing handed out) or,
    after it, takes the folder of the first directory entry and asks for `FOLDER/version` or
    `FOLDER/.data/version`. Where miniz's read succeeds its entries are the ones walked here
    from the end record's directory offset, so whenever that walk fails, the first name has
    no `/`, or neither version name is among the names (miniz compares names whole, ASCII
    letters in either case), nothing is handed out. A zip64 locator, an end record miniz may
    or may not reach, a folder name with a NUL (torch cuts its lookups there) or a
    serialization id record (read before the version) leave it uncertain."""
    size = len(data)
    tail = bytes(data[max(0, size - _UNSEARCHED):])
    end = tail.rfind(_END, 0, len(tail) - 18)
    if end < 0:
        return True  # miniz finds no end record
    end += size - len(tail)
    if size - end > _SEARCHED or (end >= 20 and bytes(data[end - 20:end - 16]) == _ZIP64_LOCATOR):
        return False
    count, dir_size, dir_start = struct.unpack_from("<HII", data, end + 10)
    names = _directory_names(data, dir_start, dir_size, count) if count else None
    if not names or b"/" not in names[0]:
        return True
    folder = names[0][:names[0].index(b"/")]
    if b"\0" in folder:
        return False
    lowered = {name.lower() for name in names}
    if folder.lower() + b"/.data/serialization_id" in lowered:
        return False
    return not lowered & {folder.lower() + b"/version", folder.lower() + b"/.data/version"}


def _directory_names(data, start: int, length: int, count: int) -> list[bytes] | None:
    """The names of the `count` directory entries from `start`, walked as miniz walks them
    inside the directory's `length` bytes; None where that walk fails (miniz's does too)."""
    if start + length > len(data):
        return None
    names, pos, stop = [], start, start + length
    for _ in range(count):
        if stop - pos < 46 or bytes(data[pos:pos + 4]) != _CENTRAL:
            return None
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        entry = 46 + name_len + extra_len + comment_len
        if entry > stop - pos:
            return None
        names.append(bytes(data[pos + 46:pos + 46 + name_len]))
        pos += entry
    return names
