"""Code the unpickler runs that a class DEFINES, on opcodes that are no call (red-team round).

Each hostile sample is built here, its harm proven under the real loader in a fresh process (a
canary appears that was absent, made by nothing of ours), and only then scanned through the
CLI: DANGEROUS, exit 2. Benign twins keep the verdict they had (never dangerous).

- A pickle handed to a class (BUILD state, constructor arguments) whose own code unpickles it
  (torch's `_DataPipeSerializationWrapper.__setstate__` runs `pickle.loads`) is walked also
  without a PROTO opcode (protocol 0 or 1, or binary opcodes with no PROTO in front).
"""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

import pytest

DATAPIPE = b"torch.utils.data.datapipes.datapipe\n_DataPipeSerializationWrapper\n"


def _s(text: str) -> bytes:
    """BINUNICODE of `text`."""
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _bb(raw: bytes) -> bytes:
    """BINBYTES of `raw`."""
    return b"B" + struct.pack("<I", len(raw)) + raw


def _load(python_exe: str, code: str, cwd: Path, timeout: int = 180
          ) -> subprocess.CompletedProcess:
    """Run `code` (a real loader) in a fresh interpreter in `cwd`."""
    return subprocess.run([python_exe, "-W", "ignore", "-c", code], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _wait_for(path: Path, seconds: float = 10.0) -> bool:
    """Whether `path` exists, waiting for a process the loader spawned to make it."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


def _cli(python_exe: str, path: Path) -> tuple[int, str]:
    """`ckpt-inspector scan PATH`: its exit status and output."""
    proc = subprocess.run([python_exe, "-c", "import sys; from inspector.cli import entry; "
                           "sys.argv[0] = 'ckpt-inspector'; sys.exit(entry())", "scan",
                           str(path)], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _pickle_load(path: Path) -> str:
    return f"import pickle; pickle.load(open({str(path)!r}, 'rb'))"


# --- a pickle without PROTO handed to a class that unpickles it (finding 1) --------------------

def _inner(kind: str, command: str) -> bytes:
    """An inner pickle that runs `command`, with no PROTO opcode."""
    if kind == "protocol0":
        return b"cposix\nsystem\n(V" + command.encode() + b"\ntR."
    # binary opcodes (SHORT_BINUNICODE, STACK_GLOBAL) read without any PROTO in front
    return (b"\x8c\x05posix\x8c\x06system\x93" + _s(command) + b"\x85R.")


@pytest.mark.parametrize("kind", ["protocol0", "binary_without_proto"])
def test_datapipe_wrapper_unpickles_a_pickle_without_proto(tmp_path, python_exe, kind):
    canary = tmp_path / "canary"
    inner = _inner(kind, f"touch {canary}")
    path = tmp_path / "datapipe.pkl"
    # _DataPipeSerializationWrapper.__new__ (NEWOBJ), then BUILD with (inner, False): its
    # __setstate__ runs pickle.loads(inner)
    path.write_bytes(b"\x80\x02c" + DATAPIPE + b")\x81" + _bb(inner) + b"\x89\x86b.")
    assert not canary.exists()
    proc = _load(python_exe, _pickle_load(path), tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert _wait_for(canary), "the real loader did not run the inner pickle"
    canary.unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "nested-pickle" in out and "may unpickle it" in out, out
    assert "runs nothing" not in out, out
    assert not canary.exists()
