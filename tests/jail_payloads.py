"""Payloads run in the real jail: a pickle that `exec`s Python source in a jailed worker, the
prelude every such source starts with, the `jailed` fixture that runs one, in a cold worker
and in one forked by the warm server, and `alive`, whether a worker outlived its job. Loaded with
`pytest_plugins = ("forkserver_fixtures", "jail_payloads")`.
"""

from __future__ import annotations

import platform
import sys
import textwrap
from pathlib import Path

import pytest
from factories import EMPTY_DICT, MARK, PROTO2, REDUCE, STOP, TUPLE, p_global, p_unicode

from inspector.sandbox.host import client, launch
from inspector.sandbox.host.client import run_job

X86_64_LINUX = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() != "x86_64",
    reason="the payloads use x86_64 Linux system call numbers")
"""The payloads name system calls by their x86_64 Linux numbers (`sc(nr, ...)`)."""

PRELUDE = """
import ctypes, errno, os, signal, socket
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(nr), *args)
    if result == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return result
"""
"""What a payload's source starts with: `sc(nr, *args)` makes a raw system call, raising
OSError with its errno when the jail refuses it."""


def exec_pickle(source: str) -> bytes:
    """A pickle that runs `source` with `exec` in a fresh namespace."""
    return (PROTO2 + p_global("builtins", "exec") + MARK + p_unicode(source) + EMPTY_DICT
            + TUPLE + REDUCE + STOP)


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (it exists and is no zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(params=("cold", "forked"))
def jailed(request, monkeypatch):
    """Run one payload (`PRELUDE` and then `body`) in a fully jailed worker, cold or forked by
    the warm server; its outcome."""
    monkeypatch.setenv(client.SELFTEST_ENV, "1")
    monkeypatch.delenv(client.DISABLE_ENV, raising=False)
    if request.param == "forked":
        monkeypatch.setattr(launch, "_fork_server",
                            request.getfixturevalue("fork_server_handle"))

    def run(tmp_path: Path, body: str, **extra) -> dict:
        path = tmp_path / "payload.pkl"
        path.write_bytes(exec_pickle(PRELUDE + textwrap.dedent(body)))
        result = run_job({"op": "selftest-payload", "paths": [str(path)], **extra},
                         timeout=120)
        assert result["timing"]["worker"] == request.param
        assert result["sandbox"]["level"] == "full", result["sandbox"]
        return result["outcomes"][0]

    return run
