"""Landlock, the jail's seventh guard: what the worker may open, bind, connect to and signal.

Read only: the inputs, the Python installation and the system libraries it loads
(`system_read_roots`), the base devices, and for a GPU job the chosen GPU's nodes (read-write,
driven by ioctl; `fresh_root.gpu_paths`), the driver's libraries and the device's sysfs
folder. Write nothing, except through the already-open output descriptor of a conversion.
From ABI 4, no TCP bind or connect; from ABI 6, no signals to and no abstract Unix sockets of
processes outside the sandbox. Landlock has no right for `stat` or
`readlink`: the fresh root keeps host paths out of their reach (`fresh_root`).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from inspector.sandbox.worker import fresh_root
from inspector.sandbox.worker.kernel import Unsupported, no_new_privs, syscall

_NR_LANDLOCK_CREATE_RULESET, _NR_LANDLOCK_ADD_RULE, _NR_LANDLOCK_RESTRICT_SELF = 444, 445, 446

_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ABI1_ALL = (1 << 13) - 1
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_FILE_ONLY_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0 when it has none)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return syscall(_NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError:
        return 0


def _handled_fs(abi: int) -> int:
    rights = _FS_ABI1_ALL
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def system_read_roots() -> list[str]:
    """The Python installation (stdlib, venv, this package) and the shared libraries it loads."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.update(p for p in sysconfig.get_paths().values())
    roots.add(str(Path(__file__).resolve().parents[2]))  # the inspector package
    roots.update(["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache"])
    # CPU-topology files torch's thread pool reads when it starts.
    roots.update(["/proc/cpuinfo", "/sys/devices/system/cpu"])
    return sorted(r for r in roots if r and os.path.exists(r))


def restrict(read_paths: Sequence[str], output_fd: int | None, gpu: int | None) -> str:
    """Restrict this process (and the threads it starts) to reading `read_paths` and the
    system's read roots, and writing only through `output_fd`; a summary of what is handled."""
    abi = landlock_abi()
    if abi < 1:
        raise Unsupported("kernel has no Landlock (or it is disabled)")
    handled_fs = _handled_fs(abi)
    handled_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = syscall(_NR_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)),
                      ctypes.c_uint32(0))
    try:
        read_rights = (_FS_READ_FILE | _FS_READ_DIR) & handled_fs
        devices = [d for d in fresh_root.BASE_DEVICES if os.path.exists(d)]
        for path in system_read_roots() + devices + list(read_paths):
            _add_path_rule(ruleset, path, read_rights)
        found = fresh_root.host_gpu(gpu) if gpu is not None else fresh_root.GpuPaths((), ())
        if found.devices:  # the driver opens its nodes read-write and drives them by ioctl
            node_rights = (read_rights | _FS_WRITE_FILE | _FS_IOCTL_DEV) & handled_fs
            for path in found.devices:
                _add_path_rule(ruleset, path, node_rights)
            for path in (*found.libraries, *found.sysfs, *fresh_root.GPU_READ):
                if os.path.exists(path):
                    _add_path_rule(ruleset, path, read_rights)
        if output_fd is not None:
            write_rights = (_FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE) & handled_fs
            _add_fd_rule(ruleset, output_fd, write_rights)
        no_new_privs()
        syscall(_NR_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    parts = [f"abi{abi}", "fs"]
    if handled_net:
        parts.append("net")
    if scoped:
        parts.append("scoped")
    return "+".join(parts)


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        _add_fd_rule(ruleset, fd, rights)
    finally:
        os.close(fd)


def _add_fd_rule(ruleset: int, fd: int, rights: int) -> None:
    if not os.path.isdir(f"/proc/self/fd/{fd}"):
        rights &= _FILE_ONLY_RIGHTS
    attr = struct.pack("=Qi", rights, fd)
    buf = ctypes.create_string_buffer(attr, len(attr))
    syscall(_NR_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), buf,
            ctypes.c_uint32(0))
