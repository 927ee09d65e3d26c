"""Confine the current process before it deserialises anything; report the level reached.

`apply_jail(config)` must run while the process is still single-threaded (before torch is
imported): unshare(CLONE_NEWUSER) refuses multithreaded callers, and Landlock only binds the
calling thread and the threads it creates afterwards. Each layer is applied independently so
that a kernel lacking one feature still gets the others; the returned level names what is
active and what is missing, and why.

Layers, in order:
1. namespaces: a new user + network + IPC namespace, so no network interface but loopback
   exists, and no System V IPC object or POSIX message queue of the user's is in reach (an
   X11 client's MIT-SHM segment) or outlives the worker;
2. resource limits: CPU seconds, open files, address space, file size (0 unless converting),
   no core dumps;
3. threads: RLIMIT_NPROC, which inside the fresh user namespace counts only this worker's
   tasks (`nproc=N`). Outside one it would count every process of the user, and the kernel
   exempts real root from it, so there the cap is the client's watchdog, which kills the
   worker's group once it has more than N threads (`watchdog=N`);
4. Landlock: read only the inputs, the Python installation and system libraries; write nothing
   except through the already-open output descriptor; no TCP bind/connect; no signals or
   abstract Unix sockets outside the sandbox;
5. seccomp-BPF: kill on execve/execveat; EPERM for ptrace, fork/vfork and clone without
   CLONE_THREAD, namespace and kernel-module calls, the chmod/chown/utime families, xattr
   changes, and signals or scheduling changes aimed at any process but this one;
   EAFNOSUPPORT for every socket() (the worker talks over inherited pipes, so no Unix socket
   can reach a D-Bus, Docker or ssh-agent listener); EPERM for System V IPC and POSIX message
   queues (memory they hold is outside RLIMIT_AS) and for inotify/fanotify (a watch is placed
   on a path Landlock never opens); ENOSYS for clone3 and io_uring (their arguments are
   invisible to BPF, and libc falls back to clone) and for memfd_create/memfd_secret (with a
   conversion's RLIMIT_FSIZE each anonymous file could hold that much, uncounted); EPERM for
   fcntl(F_SETLEASE) (a lease on an input stalls a writer of that file).

`stat()` is not confined: Landlock has no right for it, so a payload can still learn whether a
path exists and its size, owner and times (never its content).

The level is `full` when every layer is active, `process-only` when none of namespaces,
Landlock and seccomp is, and `partial` otherwise; `description` names what is missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from inspector.core.vocabulary import JailLevel

try:
    import resource
except ImportError:  # Windows has no rlimits; the level then says so
    resource = None

MIB = 1024 * 1024


@dataclass
class JailConfig:
    """What the jailed process may touch."""

    read_paths: list[str] = field(default_factory=list)
    """Files or folders (the checkpoints) the job must read."""
    output_fd: int | None = None
    """An already-open descriptor the job writes its output to (conversion), else None."""
    cpu_seconds: int = 600
    memory_bytes: int = 8 * 1024 * MIB
    """Address-space limit (mmapped checkpoints count towards it)."""
    output_bytes: int = 0
    """RLIMIT_FSIZE: 0 forbids growing any file; a conversion raises it to the output's size."""
    open_files: int = 256
    nice: int = 0
    """How much lower than its caller the job is scheduled; an interactive caller (the GUI)
    asks for this so its UI thread wins the cores while the job computes."""
    max_threads: int = field(default_factory=lambda: default_max_threads())
    real_uid: int = field(default_factory=lambda: os.getuid() if os.name == "posix" else -1)
    """The uid before the user namespace hides it (RLIMIT_NPROC does not bind root)."""
    disabled: frozenset[str] = frozenset()
    """Layers to leave off: only the test suite's degraded-environment runs set this."""


def default_max_threads() -> int:
    """Threads a worker may have: torch's intra-op, inter-op and OpenMP pools (one thread per
    core each) plus the operation's own, with room to spare."""
    return 64 + 3 * (os.cpu_count() or 1)


LEVELS = tuple(JailLevel)
"""Jail levels from weakest to strongest."""
CONFINING_LAYERS = ("namespaces", "landlock", "seccomp")


def apply_jail(config: JailConfig) -> dict:
    """Confine this process as far as the platform allows; return the level dict."""
    active: list[str] = []
    missing: dict[str, str] = {}
    layers = [("namespaces", _unshare_namespaces), ("rlimits", _set_rlimits),
              ("threads", _cap_threads)]
    if sys.platform.startswith("linux"):
        layers += [("landlock", _landlock), ("seccomp", _seccomp)]
    else:
        missing["landlock"] = missing["seccomp"] = f"not available on {sys.platform}"
    for name, apply in layers:
        if name in config.disabled:
            missing[name] = "disabled for a self-test of a degraded jail"
            continue
        try:
            detail = apply(config, active)
        except OSError as exc:
            missing[name] = f"{exc.strerror or exc} (errno {exc.errno})"
            continue
        except _Unsupported as exc:
            missing[name] = str(exc)
            continue
        active.append(f"{name}:{detail}" if detail else name)
    if sys.platform.startswith("linux") and "capabilities" not in config.disabled:
        try:
            _drop_capabilities()
        except OSError as exc:
            missing["capabilities"] = f"{exc.strerror or exc} (errno {exc.errno})"
    level = level_name(active)
    if level == JailLevel.FULL and "capabilities" in missing:
        level = JailLevel.PARTIAL
    description = level if not missing else f"{level}: missing {', '.join(missing)}"
    return {
        "level": level,
        "description": description,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "active": active,
        "missing": missing,
    }


def level_name(active: list[str]) -> str:
    """`full`, `partial` or `process-only` for the active layers (`name:detail` strings)."""
    names = {a.split(":")[0] for a in active}
    if not names & set(CONFINING_LAYERS):
        return JailLevel.PROCESS_ONLY
    if names >= {*CONFINING_LAYERS, "rlimits"}:
        return JailLevel.FULL
    return JailLevel.PARTIAL


class _Unsupported(Exception):
    """The kernel or platform lacks a feature; the message says which."""


_libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None


def _syscall(nr: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(nr), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


# --- namespaces -------------------------------------------------------------------------

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000


def _unshare_namespaces(config: JailConfig, active: list[str]) -> str:
    if not sys.platform.startswith("linux"):
        raise _Unsupported(f"not available on {sys.platform}")
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) == 0:
        return "user+net+ipc"
    first = ctypes.get_errno()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:  # a kernel without IPC namespaces
        return f"user+net (IPC namespace refused: {os.strerror(ctypes.get_errno())})"
    # Without user namespaces, root can still drop the network (and IPC) on its own.
    if _libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) == 0:
        return f"net+ipc (user namespace refused: {os.strerror(first)})"
    if _libc.unshare(CLONE_NEWNET) == 0:
        return f"net (user namespace refused: {os.strerror(first)})"
    raise OSError(first, f"unshare refused: {os.strerror(first)}")


# --- capabilities -----------------------------------------------------------------------

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _drop_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (ambient ones go with them).

    Run last: a fresh user namespace hands its creator every capability inside it, and root
    whose user namespace was refused (user.max_user_namespaces=0) would keep the real ones,
    reboot, raw I/O ports, the kernel log, real-time scheduling and all, under a `full` jail.
    Nothing after the jail needs one (Landlock and seccomp rely on no_new_privs), and with
    execve killed they can never come back."""
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# --- resource limits --------------------------------------------------------------------


def _set_rlimits(config: JailConfig, active: list[str]) -> str:
    if resource is None:
        raise _Unsupported(f"no resource limits on {sys.platform}")
    limits = [
        ("cpu", resource.RLIMIT_CPU, config.cpu_seconds, config.cpu_seconds + 2),
        ("files", resource.RLIMIT_NOFILE, config.open_files, config.open_files),
        ("as", resource.RLIMIT_AS, config.memory_bytes, config.memory_bytes),
        ("fsize", resource.RLIMIT_FSIZE, config.output_bytes, config.output_bytes),
        ("core", resource.RLIMIT_CORE, 0, 0),
    ]
    # No real-time class and no nice value below the caller's, whatever the user's limits
    # allow (an audio group's rtprio): a spinning SCHED_FIFO worker starves the machine.
    limits += [(name, getattr(resource, which), 0, 0)
               for name, which in (("rtprio", "RLIMIT_RTPRIO"), ("priority", "RLIMIT_NICE"))
               if hasattr(resource, which)]
    set_names = []
    for name, which, soft, hard in limits:
        _, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(which, (soft, hard))
        set_names.append(name)
    if config.nice > 0:
        os.nice(config.nice)
        set_names.append(f"nice+{config.nice}")
    return ",".join(set_names)


def _cap_threads(config: JailConfig, active: list[str]) -> str:
    if resource is None:
        raise _Unsupported(f"no resource limits on {sys.platform}")
    if any(a.startswith("namespaces:user+net") for a in active) and config.real_uid != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (config.max_threads, config.max_threads))
        return f"nproc={config.max_threads}"
    return f"watchdog={config.max_threads}"


# --- Landlock ---------------------------------------------------------------------------

_NR_LANDLOCK_CREATE_RULESET, _NR_LANDLOCK_ADD_RULE, _NR_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38

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
        return _syscall(_NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
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


def _system_read_roots() -> list[str]:
    """The Python installation (stdlib, venv, this package) and the shared libraries it loads."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.update(p for p in sysconfig.get_paths().values())
    roots.add(str(Path(__file__).resolve().parents[1]))
    roots.update(["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache"])
    # Harmless device and CPU-topology files torch's thread pool reads when it starts.
    roots.update(["/dev/null", "/dev/urandom", "/proc/cpuinfo", "/sys/devices/system/cpu"])
    return sorted(r for r in roots if r and os.path.exists(r))


def _landlock(config: JailConfig, active: list[str]) -> str:
    abi = landlock_abi()
    if abi < 1:
        raise _Unsupported("kernel has no Landlock (or it is disabled)")
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
    ruleset = _syscall(_NR_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)),
                       ctypes.c_uint32(0))
    try:
        read_rights = (_FS_READ_FILE | _FS_READ_DIR) & handled_fs
        for path in _system_read_roots() + list(config.read_paths):
            _add_path_rule(ruleset, path, read_rights)
        if config.output_fd is not None:
            write_rights = (_FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE) & handled_fs
            _add_fd_rule(ruleset, config.output_fd, write_rights)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        _syscall(_NR_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
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
    _syscall(_NR_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), buf,
             ctypes.c_uint32(0))


# --- seccomp-BPF ------------------------------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# The x*attrat calls (Linux 6.13) and fchmodat2 (6.6) share numbers on both architectures.
_NEW_CALLS = {"fchmodat2": 452, "setxattrat": 463, "getxattrat": 464, "listxattrat": 465,
              "removexattrat": 466}
_SYSCALLS = {
    "x86_64": {
        "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "socket": 41,
        "socketpair": 53, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249,
        "kexec_load": 246, "init_module": 175, "finit_module": 313, "open_by_handle_at": 304,
        "seccomp": 317,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94,
        "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191,
        "lgetxattr": 192, "fgetxattr": 193, "listxattr": 194, "llistxattr": 195,
        "flistxattr": 196, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "process_madvise": 440, "kcmp": 312, "prlimit64": 302,
        "setpriority": 141, "ioprio_set": 251, "sched_setparam": 142,
        "sched_setscheduler": 144, "sched_setaffinity": 203, "sched_setattr": 314,
        "migrate_pages": 256, "move_pages": 279, "fcntl": 72,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
        "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
        "msgctl": 71, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
        "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
        "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
        "fanotify_init": 300, "fanotify_mark": 301, "memfd_create": 319,
        "memfd_secret": 447, **_NEW_CALLS,
    },
    "aarch64": {
        "execve": 221, "execveat": 281, "clone": 220, "clone3": 435, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "socket": 198, "socketpair": 199,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "unshare": 97,
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "kexec_load": 104, "init_module": 105, "finit_module": 273,
        "open_by_handle_at": 265, "seccomp": 277,
        "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55, "utimensat": 88,
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "getxattr": 8, "lgetxattr": 9,
        "fgetxattr": 10, "listxattr": 11, "llistxattr": 12, "flistxattr": 13,
        "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "process_madvise": 440, "kcmp": 272, "prlimit64": 261,
        "setpriority": 140, "ioprio_set": 30, "sched_setparam": 118,
        "sched_setscheduler": 119, "sched_setaffinity": 122, "sched_setattr": 274,
        "migrate_pages": 238, "move_pages": 239, "fcntl": 25,
        "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197, "semget": 190,
        "semctl": 191, "semtimedop": 192, "semop": 193, "msgget": 186, "msgctl": 187,
        "msgrcv": 188, "msgsnd": 189, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
        "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185,
        "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262,
        "fanotify_mark": 263, "memfd_create": 279, "memfd_secret": 447, **_NEW_CALLS,
    },
}
_KILL = ("execve", "execveat")
_EPERM = ("fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "unshare",
          "setns", "mount", "umount2", "pivot_root", "chroot", "bpf", "perf_event_open",
          "userfaultfd", "keyctl", "add_key", "request_key", "kexec_load", "init_module",
          "finit_module", "open_by_handle_at",
          # Metadata: Landlock has no right for these, and they would let a payload make a
          # key world-readable, set a setuid bit (as root) or back-date a file.
          "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
          "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
          "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
          # Handles on, and scheduling of, other processes (the worker keeps its own kuid,
          # so same-user checks would otherwise pass); tkill has no process argument.
          "tkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "process_madvise",
          "kcmp", "setpriority", "ioprio_set",
          # System V IPC and POSIX message queues: objects outside the file system (Landlock
          # never sees them), in the host's IPC namespace should the namespace layer be
          # missing, whose memory no rlimit of the worker counts.
          "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
          "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
          "mq_timedreceive", "mq_notify", "mq_getsetattr",
          # Watches on paths outside the jail: marks are placed without opening the path.
          "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init",
          "fanotify_mark")
# memfd: RLIMIT_FSIZE bounds each anonymous file only by the output's size during a
# conversion, and its pages are not in RLIMIT_AS; ENOSYS is what a library falling back on
# other memory (asmjit's JIT allocator) expects.
_ENOSYS = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register", "memfd_create",
           "memfd_secret")
# Reading extended attributes is harmless but unneeded; "not supported" is what a caller
# expects from a filesystem without them.
_EOPNOTSUPP = ("getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
               "getxattrat", "listxattrat")
# Calls whose first argument names a process: allowed only when it is this process (kill(0)
# and kill(-1) name a group and every process, so they are refused too) ...
_SELF_ONLY = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# ... or, where 0 means the caller, 0 as well.
_SELF_OR_ZERO = ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setaffinity",
                 "sched_setattr", "migrate_pages", "move_pages")

_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low word (little endian)
_OFF_ARG1, _F_SETLEASE = 24, 1024
_CLONE_THREAD, _AF_UNIX = 0x00010000, 1
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def seccomp_program(machine: str, pid: int) -> list[tuple[int, int, int, int]]:
    """The BPF filter for this architecture and process as (code, jt, jf, k) instructions."""
    nrs = _SYSCALLS[machine]
    prog = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if machine == "x86_64":
        prog += [(_JGE_K, 0, 1, _X32_SYSCALL_BIT), (_RET_K, 0, 0, _RET_KILL_PROCESS)]

    def on_nr(name: str, action: int) -> None:
        if name in nrs:
            prog.extend([(_JEQ_K, 0, 1, nrs[name]), (_RET_K, 0, 0, action)])

    def arg0_in(name: str, allowed: tuple[int, ...], refusal: int) -> None:
        # Loading the argument clobbers the syscall number, so every path of the block
        # returns. pid_t is 32 bits: the kernel reads only the low word.
        n = len(allowed)
        prog.append((_JEQ_K, 0, n + 3, nrs[name]))
        prog.append((_LD_W_ABS, 0, 0, _OFF_ARG0))
        prog.extend((_JEQ_K, n - i, 0, value) for i, value in enumerate(allowed))
        prog.append((_RET_K, 0, 0, _RET_ERRNO | refusal))
        prog.append((_RET_K, 0, 0, _RET_ALLOW))

    for name in _KILL:
        on_nr(name, _RET_KILL_PROCESS)
    for name in _EPERM:
        on_nr(name, _RET_ERRNO | errno.EPERM)
    for name in _ENOSYS:
        on_nr(name, _RET_ERRNO | errno.ENOSYS)
    for name in _EOPNOTSUPP:
        on_nr(name, _RET_ERRNO | errno.EOPNOTSUPP)
    # No socket at all; a socketpair of Unix sockets reaches nothing outside the worker.
    on_nr("socket", _RET_ERRNO | errno.EAFNOSUPPORT)
    arg0_in("socketpair", (_AF_UNIX,), errno.EAFNOSUPPORT)
    for name in _SELF_ONLY:
        arg0_in(name, (pid,), errno.EPERM)
    for name in _SELF_OR_ZERO:
        arg0_in(name, (0, pid), errno.EPERM)
    # A lease on an input stalls whoever opens it for writing (a training run saving over
    # the checkpoint) for lease-break-time; nothing in the worker takes one.
    prog += [
        (_JEQ_K, 0, 4, nrs["fcntl"]),
        (_LD_W_ABS, 0, 0, _OFF_ARG1),
        (_JEQ_K, 0, 1, _F_SETLEASE),
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        (_RET_K, 0, 0, _RET_ALLOW),
    ]
    # Threads are clone(CLONE_THREAD|...); anything else would be a new process.
    prog += [
        (_JEQ_K, 0, 4, nrs["clone"]),
        (_LD_W_ABS, 0, 0, _OFF_ARG0),
        (_JSET_K, 0, 1, _CLONE_THREAD),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
    ]
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    return prog


def _seccomp(config: JailConfig, active: list[str]) -> str:
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise _Unsupported(f"no syscall table for {machine}")
    prog = seccomp_program(machine, os.getpid())
    filters = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    fbuf = ctypes.create_string_buffer(filters, len(filters))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _SockFprog(len(prog), ctypes.addressof(fbuf))
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    # TSYNC puts every existing thread under the filter too, should any exist already.
    _syscall(_SYSCALLS[machine]["seccomp"], ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
             ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    return f"{len(prog)} instructions"
