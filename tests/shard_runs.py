"""Shards of a batch run through the real CLI for the merge tests, and shards killed the way a
real kill leaves them (SIGKILL right after the k-th result line is written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "inspector"]

KILLED_AFTER = """
import os, signal, sys
from inspector.run import journal
from inspector.cli import entry

after, written, real = int(sys.argv[1]), 0, journal.append

def append(path, kind, fields):
    global written
    entry_ = real(path, kind, fields)
    written += kind not in ("batch.session", "batch.end")
    if written == after:
        os.kill(os.getpid(), signal.SIGKILL)
    return entry_

journal.append = append
sys.argv = ["ckpt-inspector", *sys.argv[2:]]
entry()
"""


def cli(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`ckpt-inspector ARGS` in a fresh interpreter."""
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=240,
                          cwd=cwd)


def killed_after(k: int, *args: object) -> None:
    """`ckpt-inspector ARGS`, SIGKILLed right after its k-th result line."""
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER, str(k), *map(str, args)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == -9, proc.stdout + proc.stderr  # it was killed, not finished
