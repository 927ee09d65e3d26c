"""A command whose stdout pipe closes early (`ckpt-inspector inspect F | head -1`) ends quietly
with status 141 (128 + SIGPIPE, as a shell reports for a tool the pipe ended) and leaves no
jailed worker or fork server behind."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest
from factories import save_state_dict, small_state_dict
from sandbox_fixtures import sandbox_processes

from inspector.cli import EXIT_BROKEN_PIPE

OWN_WORKERS = True  # how workers start is under test here: no session fork server

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture
def reaper():
    """Make this process the subreaper of what it starts, so a worker the command leaves behind
    (a grandchild, in a session of its own) becomes our child and `sandbox_processes` sees it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip("prctl(PR_SET_CHILD_SUBREAPER) is not available")
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two checkpoints and a manifest with their tensor hashes, made once for the module: every
    command here only reads them."""
    folder = tmp_path_factory.mktemp("broken-pipe")
    save_state_dict(folder / "a.pt", small_state_dict(seed=1))
    save_state_dict(folder / "b.pt", small_state_dict(seed=2))
    subprocess.run([sys.executable, "-m", "inspector", "manifest", "create", "-o", "m.json",
                    "--quiet", "a.pt", "b.pt"], cwd=folder, check=True, capture_output=True)
    return folder


COMMANDS = {
    "scan": ["scan", "a.pt"],
    "inspect": ["inspect", "a.pt"],
    "diff": ["diff", "a.pt", "b.pt"],
    "verify": ["verify", "--manifest", "m.json", "a.pt", "b.pt"],  # a fork server: two files
    "report": ["report", "-o", "-", "--quiet", "a.pt", "b.pt"],
    "manifest": ["manifest", "create", "-o", "-", "--quiet", "a.pt", "b.pt"],
}


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=COMMANDS.keys())
def test_closed_stdout_ends_quietly(files: Path, reaper: None, argv: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "inspector", *argv], cwd=files,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before the command writes anything
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == EXIT_BROKEN_PIPE, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr, stderr
    assert sandbox_processes() == []
