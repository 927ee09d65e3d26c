"""seccomp-BPF, the jail's eighth guard: the system calls the worker may make, by number and
by argument.

`REFUSALS` lists the calls refused outright, each group with its answer and why;
`ARGUMENT_RULES` the calls allowed only with certain arguments (threads, not processes; a
signal only to the worker itself; a socketpair, not a socket); `ALLOWED` the allowed calls
whose arguments name something outside the worker, each with the reason it may stay. The filter
checks the architecture first, and kills the process on `execve` and on an x32 call.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
from dataclasses import dataclass

from inspector.sandbox.worker.kernel import Unsupported, no_new_privs, syscall

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Calls added since Linux 5.1 share one number on every architecture.
_NEW_CALLS = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
              "fsmount": 432, "fspick": 433, "mount_setattr": 442, "fchmodat2": 452,
              "statmount": 457, "listmount": 458, "setxattrat": 463, "getxattrat": 464,
              "listxattrat": 465, "removexattrat": 466, "open_tree_attr": 467,
              "file_getattr": 468, "file_setattr": 469}
_SYSCALLS = {
    "x86_64": {
        "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "socket": 41,
        "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43,
        "accept4": 288, "sendto": 44, "sendmsg": 46, "sendmmsg": 307, "ioctl": 16,
        "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249,
        "kexec_load": 246, "init_module": 175, "finit_module": 313, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "seccomp": 317, "setsid": 112, "setpgid": 109,
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
        "connect": 203, "bind": 200, "listen": 201, "accept": 202, "accept4": 242,
        "sendto": 206, "sendmsg": 211, "sendmmsg": 269, "ioctl": 29,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "unshare": 97,
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "kexec_load": 104, "init_module": 105, "finit_module": 273,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "seccomp": 277, "setsid": 157,
        "setpgid": 154,
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


@dataclass(frozen=True)
class Refusal:
    """System calls the filter refuses outright, its answer, and why."""

    answer: str
    """`kill` (the process dies of SIGSYS) or the errno name returned."""
    why: str
    names: tuple[str, ...]


REFUSALS: tuple[Refusal, ...] = (
    Refusal("kill", "a new program: the one thing a payload must never get",
            ("execve", "execveat")),
    Refusal("EPERM", "new processes, other processes' memory, namespaces, mounts, kernel "
            "modules, keys, BPF and performance counters: nothing a load needs",
            ("fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "unshare",
             "setns", "mount", "umount2", "pivot_root", "chroot", "bpf", "perf_event_open",
             "userfaultfd", "keyctl", "add_key", "request_key", "kexec_load", "init_module",
             "finit_module", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
             "fspick", "mount_setattr", "open_tree_attr")),
    Refusal("EPERM", "the mount table and file handles: statmount/listmount list the host's "
            "mounts, and a handle names (and reopens) a file by inode, past Landlock",
            ("statmount", "listmount", "name_to_handle_at", "open_by_handle_at")),
    Refusal("EPERM", "metadata: Landlock has no right for these, and they would make a key "
            "world-readable, set a setuid bit (as root), back-date a file or change its flags",
            ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
             "fchownat", "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr",
             "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
             "removexattrat", "file_setattr")),
    Refusal("EPERM", "handles on, and scheduling of, other processes (the worker keeps its "
            "kuid, so same-user checks would pass); tkill has no process argument",
            ("tkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "process_madvise",
             "kcmp", "setpriority", "ioprio_set")),
    Refusal("EPERM", "leaving the client's process group or session, out of reach of its "
            "killpg", ("setsid", "setpgid")),
    Refusal("EPERM", "System V IPC and POSIX message queues: objects Landlock never sees, in "
            "the host's IPC namespace should that layer be missing, their memory in no rlimit",
            ("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
             "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
             "mq_timedreceive", "mq_notify", "mq_getsetattr")),
    Refusal("EPERM", "watches on paths outside the jail: a mark is placed without opening "
            "the path", ("inotify_init", "inotify_init1", "inotify_add_watch",
                         "fanotify_init", "fanotify_mark")),
    Refusal("EPERM", "sockets that reach out: connect names a peer; sendmsg's destination "
            "and SCM_RIGHTS descriptors sit behind a pointer BPF cannot read (nothing in the "
            "worker sends a message); bind, listen and accept would offer a socket to others",
            ("connect", "bind", "listen", "accept", "accept4", "sendmsg", "sendmmsg")),
    Refusal("EAFNOSUPPORT", "no socket at all: the worker talks over inherited pipes, so no "
            "Unix socket reaches a D-Bus, Docker, journald or ssh-agent listener", ("socket",)),
    Refusal("ENOSYS", "clone3 and io_uring hide their arguments from BPF (libc falls back to "
            "clone); a memfd holds up to a conversion's RLIMIT_FSIZE outside RLIMIT_AS, and "
            "ENOSYS is what a library falling back on other memory (asmjit) expects",
            ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register",
             "memfd_create", "memfd_secret")),
    Refusal("EOPNOTSUPP", "reading extended attributes is harmless but unneeded; "
            "`not supported` is what a caller expects from a file system without them",
            ("getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
             "getxattrat", "listxattrat", "file_getattr")),
)

SELF = -1
"""Stands for this process's pid in an `ArgumentRule`'s values."""


@dataclass(frozen=True)
class ArgTest:
    """One test on a 32-bit word of a system call's argument."""

    arg: int
    values: tuple[int, ...]
    allow: bool
    """True: the call passes only with one of `values`; False: one of them refuses it."""
    mask: int = 0xFFFFFFFF
    """ANDed with the word before it is compared."""
    high: bool = False
    """Test the argument's high word (a pointer is 64 bits), not its low one."""
    only_if: tuple[int, int] | None = None
    """(argument, value): the test applies only when that argument's low word is the value."""


@dataclass(frozen=True)
class ArgumentRule:
    """A call allowed only when every test passes, refused with `answer` (an errno name)."""

    name: str
    answer: str
    why: str
    tests: tuple[ArgTest, ...]


_AF_UNIX, _SOCK_STREAM, _SOCK_FLAGS = 1, 1, 0o4000 | 0o2000000  # SOCK_NONBLOCK | SOCK_CLOEXEC
_F_SETFL, _F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETLEASE, _F_NOTIFY = 4, 8, 10, 15, 1024, 1026
_O_ASYNC = 0o20000
_FIOASYNC, _FIOSETOWN, _SIOCSPGRP = 0x5452, 0x8901, 0x8902
_FS_IOC_SETFLAGS, _FS_IOC32_SETFLAGS, _FS_IOC_FSSETXATTR = 0x40086602, 0x40046602, 0x401C5820
_CLONE_THREAD = 0x00010000

ARGUMENT_RULES: tuple[ArgumentRule, ...] = (
    ArgumentRule("socketpair", "EAFNOSUPPORT",
                 "a connected pair of Unix stream sockets reaches nothing outside the worker; "
                 "a datagram or seqpacket one can sendto or connect to any pathname socket",
                 (ArgTest(0, (_AF_UNIX,), allow=True),
                  ArgTest(1, (_SOCK_STREAM,), allow=True, mask=0xFFFFFFFF & ~_SOCK_FLAGS))),
    ArgumentRule("sendto", "EPERM",
                 "send() on its own socketpair passes no address; a destination is a socket "
                 "outside", (ArgTest(4, (0,), allow=True), ArgTest(4, (0,), allow=True,
                                                                   high=True))),
    ArgumentRule("fcntl", "EPERM",
                 "an owner, a signal or O_ASYNC make the kernel signal any process on the "
                 "worker's behalf (SIGIO); a directory notification watches a folder; a lease "
                 "on an input stalls its writer for lease-break-time",
                 (ArgTest(1, (_F_SETOWN, _F_SETOWN_EX, _F_SETSIG, _F_NOTIFY, _F_SETLEASE),
                          allow=False),
                  ArgTest(2, (_O_ASYNC,), allow=False, mask=_O_ASYNC,
                          only_if=(1, _F_SETFL)))),
    ArgumentRule("ioctl", "EPERM",
                 "the ioctl spellings of O_ASYNC and F_SETOWN, and file flags (no-dump, "
                 "append-only, project ids) an owner may set on its input",
                 (ArgTest(1, (_FIOASYNC, _FIOSETOWN, _SIOCSPGRP, _FS_IOC_SETFLAGS,
                              _FS_IOC32_SETFLAGS, _FS_IOC_FSSETXATTR), allow=False),)),
    ArgumentRule("clone", "EPERM", "threads are clone(CLONE_THREAD|...); anything else is a "
                 "new process", (ArgTest(0, (_CLONE_THREAD,), allow=True, mask=_CLONE_THREAD),)),
    *(ArgumentRule(name, "EPERM", "a signal only to this process: kill(0) and kill(-1) name "
                   "a group and every process", (ArgTest(0, (SELF,), allow=True),))
      for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")),
    *(ArgumentRule(name, "EPERM", "limits, scheduling and pages of this process only (0 "
                   "names the caller)", (ArgTest(0, (0, SELF), allow=True),))
      for name in ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setaffinity",
                   "sched_setattr", "migrate_pages", "move_pages")),
)

ALLOWED: dict[str, str] = {
    "open, openat, openat2": "Landlock decides which paths open: the inputs and the Python "
    "installation for reading, nothing for writing",
    "read, write, pread64, pwrite64, readv, writev, sendfile, splice, tee, copy_file_range":
    "only descriptors the worker holds: its pipes, its output, files Landlock let it open",
    "stat, lstat, fstat, newfstatat, statx, statfs, access, faccessat2": "Landlock has no "
    "right for them; in the fresh root they see only the installation and the inputs (without "
    "it the existence, size, owner and times of any host path leak, never its content)",
    "readlink, readlinkat": "Landlock has no right for it; the fresh root holds no host "
    "symlink but those on the way to the installation (without it any target leaks)",
    "getdents64": "only directories Landlock let it open",
    "recvfrom, recvmsg, shutdown, getsockopt, setsockopt, getsockname, getpeername": "only the "
    "worker's own stream socketpairs; with sendmsg refused no descriptor can be sent to it",
    "mmap, mprotect, munmap, mremap, madvise, brk, mbind, set_mempolicy": "its own address "
    "space, bounded by RLIMIT_AS",
    "prctl": "its own process: clearing its death signal frees nothing (the PID namespace's "
    "init holds one), PR_SET_MM needs a capability it dropped",
    "flock, fcntl(F_SETLK, F_OFD_SETLK)": "advisory locks on files it may read: a writer that "
    "takes a lock waits for the job, one that does not is not stopped",
    "futex, wait4, waitid, rt_sig*, sigaltstack, getrandom, clock_*, nanosleep": "its own "
    "threads, signals and time",
    "landlock_create_ruleset, landlock_add_rule, landlock_restrict_self": "they can only "
    "confine it further",
}
"""Allowed calls whose arguments name something outside the worker, and why each may stay."""

_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K, _AND_K, _JA = 0x20, 0x15, 0x35, 0x06, 0x54, 0x05
_OFF_NR, _OFF_ARCH, _OFF_ARGS = 0, 4, 16  # struct seccomp_data; arguments little endian
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def _answer(answer: str) -> int:
    return _RET_KILL_PROCESS if answer == "kill" else _RET_ERRNO | getattr(errno, answer)


def _argument_block(nr: int, rule: ArgumentRule, pid: int) -> list[tuple[int, int, int, int]]:
    """One rule's instructions, skipped unless the call is `nr`. Every path inside returns:
    loading an argument clobbers the syscall number."""
    ins: list[tuple[int, int | str, int | str, int | str]] = []
    labels: dict[str, int] = {}

    def load(arg: int, high: bool = False) -> None:
        ins.append((_LD_W_ABS, 0, 0, _OFF_ARGS + 8 * arg + (4 if high else 0)))

    for n, test in enumerate(rule.tests):
        after = f"after{n}"
        if test.only_if is not None:
            load(test.only_if[0])
            ins.append((_JEQ_K, 0, after, test.only_if[1]))
        load(test.arg, test.high)
        if test.mask != 0xFFFFFFFF:
            ins.append((_AND_K, 0, 0, test.mask))
        for value in (pid if v == SELF else v for v in test.values):
            ins.append((_JEQ_K, after if test.allow else "refuse", 0, value))
        if test.allow:
            ins.append((_JA, 0, 0, "refuse"))
        labels[after] = len(ins)
    ins.append((_RET_K, 0, 0, _RET_ALLOW))
    labels["refuse"] = len(ins)
    ins.append((_RET_K, 0, 0, _answer(rule.answer)))

    def resolve(at: int, target: int | str) -> int:
        return labels[target] - at - 1 if isinstance(target, str) else target

    block = [(code, resolve(i, jt), resolve(i, jf), resolve(i, k) if code == _JA else k)
             for i, (code, jt, jf, k) in enumerate(ins)]
    return [(_JEQ_K, 0, len(block), nr), *block]  # type: ignore[list-item]


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
    for refusal in REFUSALS:
        for name in refusal.names:
            if name in nrs:
                prog += [(_JEQ_K, 0, 1, nrs[name]), (_RET_K, 0, 0, _answer(refusal.answer))]
    for rule in ARGUMENT_RULES:
        prog += _argument_block(nrs[rule.name], rule, pid)
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    return prog


@functools.lru_cache(maxsize=4)
def seccomp_filter(machine: str, pid: int) -> bytes:
    """`seccomp_program` as the kernel takes it (8 bytes an instruction), kept: a fork server
    builds it once for the PID 2 its forked workers have in their namespaces."""
    return b"".join(struct.pack("=HBBI", *ins) for ins in seccomp_program(machine, pid))


def warm_up(pid: int) -> None:
    """Build this machine's filter for `pid` ahead (`seccomp_filter` keeps it)."""
    if os.uname().machine in _SYSCALLS:
        seccomp_filter(os.uname().machine, pid)


def install() -> str:
    """Put this process and its threads under the filter; a summary of its size."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        raise Unsupported(f"no syscall table for {machine}")
    filters = seccomp_filter(machine, os.getpid())
    fbuf = ctypes.create_string_buffer(filters, len(filters))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _SockFprog(len(filters) // 8, ctypes.addressof(fbuf))
    no_new_privs()
    # TSYNC puts every existing thread under the filter too, should any exist already.
    syscall(_SYSCALLS[machine]["seccomp"], ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    return f"{len(filters) // 8} instructions"
