"""Temp files and folders a killed save left behind, named so that they can be cleared safely.

A save's temp name carries the host and the process id (`.NAME.HOST-PID.XXXX.tmp`); a later
save in the same folder deletes those of its own host whose process is gone. A temp file of a
live process, or of another host on a shared file system, is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from inspector.ledger.identity import host

_STRAY = re.compile(r"^\..+\.(?P<host>[^.]+)-(?P<pid>\d+)\.[^.]*\.?tmp$")


def temp_tag() -> str:
    """`HOST-PID` of this process, as temp names carry it (dots in the host name dropped)."""
    return f"{host().replace('.', '_')}-{os.getpid()}"


def clear_strays(folder: Path) -> list[Path]:
    """Delete the temp files and folders in `folder` that dead processes of this host left."""
    mine = host().replace(".", "_")
    cleared = []
    for path in folder.iterdir() if folder.is_dir() else ():
        match = _STRAY.match(path.name)
        if match is None or match["host"] != mine or _alive(int(match["pid"])):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        cleared.append(path)
    return cleared


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
