"""The pickle records torch's own zip reader hands out of an archive: the verdict's reading of
an archive the scan's zip reader finds damaged.

The scan reads zip structures with the project's own reader (`formats.archives.zipread`), which
agrees with torch's (miniz, inside `torch._C.PyTorchFileReader`) on the archives torch writes.
Where
that reader sees any damage, which members torch.load would unpickle, and with which bytes,
is miniz's decision: it refuses some archives whole, checks offsets, sizes and directory
entries its own way. So those archives are opened here, in the jail, by torch's reader
itself, and each `.pkl` record it hands out is read by the real unpicklers. torch is imported
only then (a second or two); a well-formed archive never needs it.
"""

from __future__ import annotations

from collections.abc import Iterator

from inspector.core.map_io import MapIO

MAX_RECORDS = 1000  # records of one archive listed (a crafted directory names millions)
MAX_RECORD_BYTES = 256 << 20  # a .pkl record larger than this is left to the static walk


def torch_pickles(data) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each `.pkl` record torch's zip reader hands out of `data` (torch.load,
    DCP and torch.jit.load unpickle these); nothing when it refuses the archive. torch.load
    takes the zip path only for bytes that open with a local header."""
    if bytes(data[:4]) != b"PK\x03\x04":
        return
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
