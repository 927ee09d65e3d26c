"""The C library calls the jail's layers share (`jail`, `landlock`, `seccomp`), through ctypes.

Each layer raises `Unsupported` when the kernel or platform lacks what it needs, or OSError when
the kernel refuses it; `jail` records either as that layer's reason in the handshake's `missing`.
"""

from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None

_PR_SET_NO_NEW_PRIVS = 38


class Unsupported(Exception):
    """The kernel or platform lacks a feature; the message says which."""


def syscall(nr: int, *args) -> int:
    """The system call `nr`'s result; OSError with its errno when it fails."""
    result = libc.syscall(ctypes.c_long(nr), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def check(result: int) -> None:
    """Raise OSError with the errno when a libc call returned non-zero."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def no_new_privs() -> None:
    """PR_SET_NO_NEW_PRIVS: what Landlock and seccomp need to bind an unprivileged process."""
    check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
