"""What the scanner tests use to prove a hostile sample's harm under its real loader: pickle
pieces written by hand, the loader run in a fresh interpreter, a canary waited for, and the
scan run through the CLI."""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path


def unicode(text: str) -> bytes:
    """BINUNICODE of `text`."""
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def binbytes(raw: bytes) -> bytes:
    """BINBYTES of `raw`."""
    return b"B" + struct.pack("<I", len(raw)) + raw


def run_loader(python_exe: str, code: str, cwd: Path, env: dict | None = None,
               timeout: int = 180) -> subprocess.CompletedProcess:
    """Run `code` (a real loader) in a fresh interpreter in `cwd`."""
    return subprocess.run([python_exe, "-W", "ignore", "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def wait_for(path: Path, seconds: float = 10.0) -> bool:
    """Whether `path` exists, waiting for a process the loader spawned to make it."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


def scan_cli(python_exe: str, path: Path) -> tuple[int, str]:
    """`ckpt-inspector scan PATH`: its exit status and output."""
    proc = subprocess.run([python_exe, "-c", "import sys; from inspector.cli import entry; "
                           "sys.argv[0] = 'ckpt-inspector'; sys.exit(entry())", "scan",
                           str(path)], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr
