"""The audit record: what ran, where, on what, from which inputs; and how it ended.

    with audit(RUN_DIR, inputs=["data/train.bin"], outputs=["out/model.safetensors"]):
        train()

`audit.start` (Python, torch, CUDA, cuDNN and driver versions, the GPUs, host, command line,
git commit and dirty flag, SHA-256 of each named input) goes to the run journal before the block
runs; `audit.end` (SHA-256 of each named output that exists, end time, exit status) after it,
however it ends: 0, the code of a `SystemExit` (a guard halt is 17), or 1 for an exception.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from inspector.core import envinfo
from inspector.core.errors import CodedError
from inspector.integrity.hashing import sha256_file
from inspector.run import journal

START_KIND, END_KIND = "audit.start", "audit.end"


def start_fields(inputs: Sequence[str | os.PathLike[str]] = ()) -> dict:
    """Everything `audit.start` records."""
    nvml, driver, cuda_driver, gpus = envinfo.nvml_info()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"time": time.time(), "host": socket.gethostname(), "os": platform.platform(),
            "python": sys.version.split()[0], "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda, "cudnn": cudnn, "driver": driver,
            "cuda_driver": cuda_driver, "nvml": nvml,
            "gpus": [g.__dict__ for g in gpus], "argv": list(sys.argv), "cwd": os.getcwd(),
            **git_state(), "inputs": _hashes(inputs)}


def git_state(folder: str | os.PathLike[str] | None = None) -> dict:
    """The commit checked out in `folder` (default: the current one) and whether it is dirty."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                                  timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


@contextlib.contextmanager
def audit(run_dir: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = (),
          outputs: Sequence[str | os.PathLike[str]] = ()) -> Iterator[None]:
    """Write `audit.start` now and `audit.end` when the block ends, however it ends."""
    path = journal.journal_path(run_dir)
    journal.append(path, START_KIND, start_fields(inputs))
    status = 0
    try:
        yield
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    except BaseException:
        status = 1
        raise
    finally:
        journal.append(path, END_KIND, {"time": time.time(), "exit_status": status,
                                        "outputs": _hashes(outputs, missing_ok=True)})


def _hashes(paths: Sequence[str | os.PathLike[str]], missing_ok: bool = False) -> list[dict]:
    out = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            if not missing_ok:
                raise CodedError("audit-input-missing", f"{path} is not a file; name the input "
                                 "files the run reads")
            out.append({"path": str(path), "sha256": None, "size": None})
            continue
        out.append({"path": str(path), "sha256": sha256_file(path), "size": path.stat().st_size})
    return out
