"""Confine the current process before it deserialises anything; report the level reached.

`enter_namespaces(config)` then `apply_jail(config, entered)` must run while the process is
still single-threaded (before torch is imported): unshare(CLONE_NEWUSER) refuses multithreaded
callers, the PID namespace forks, and Landlock only binds the calling thread and the threads it
creates afterwards. Each layer is applied independently so that a kernel lacking one feature
still gets the others; the returned level names what is active and what is missing, and why.

Guards, in order (`FULL_GUARDS`; DEVELOPING.md 2.2 says what each stops and what is left
without it):
1. namespaces: a new user + network + IPC namespace: no network interface but loopback, no
   System V IPC object or POSIX message queue of the user's in reach or outliving the worker;
2. pidns: a new PID namespace. The process that made it stays outside and only reaps the
   worker. The first process started there is PID 1, a tiny exec'd init that holds SIGKILL
   as its parent-death signal; the second, forked, is the worker. A payload can clear its
   own death signal but not init's, and when init dies the kernel kills everything in the
   namespace: the worker dies with its client (or fork server) whatever it does. A cold
   worker makes it itself and stays behind as the relay; a fork server that may (root) makes
   one per job before it forks, so a forked job is one fork (`pid_namespace_for_next_child`);
3. proc: a mount namespace of the worker's own with a fresh /proc, so /proc lists only init
   and the worker;
4. root: a fresh, nearly empty root (`fresh_root.py`): the Python installation, system
   libraries and inputs bound read-only, /dev with null, zero and urandom, that /proc; the
   host's tree detached, so `stat`, `readlink` and the mount table see nothing of it;
5. resource limits: CPU seconds, open files, address space, file size (0 unless converting),
   no core dumps, no real-time or higher priority;
6. threads: RLIMIT_NPROC, which the kernel counts per user (per user namespace). Real root is
   exempt from it, so root first takes a real uid of its own (`nproc_uid`: effective uid 0
   stays, so file access is root's) and the kernel then caps it too;
7. Landlock: read only the inputs, the Python installation and system libraries; write nothing
   except through the already-open output descriptor; no TCP bind/connect; no signals or
   abstract Unix sockets outside the sandbox (ABI 6);
8. seccomp-BPF, by system call and by argument (`REFUSALS`, `ARGUMENT_RULES`; the calls left
   allowed that reach outside the worker, each with its reason, in `ALLOWED`);
9. capabilities: every one dropped, last (in the relay too).

`stat()` and `readlink()` are not confined by Landlock, which has no right for them; only the
fresh root keeps host paths out of their reach (without it a payload learns whether a host
path exists, its size, owner and times, and a symlink's target, never a file's content).

The level is `full` when every guard of `FULL_GUARDS` is active, `process-only` when none of
namespaces, Landlock and seccomp is, and `partial` otherwise; `missing` names each absent guard
and why.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import shutil
import signal
import struct
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inspector.core.vocabulary import JailLevel
from inspector.sandbox.worker import fresh_root

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
    gpu: bool = False
    """The job may use an NVIDIA GPU: its device nodes and driver libraries are let in."""


def default_max_threads() -> int:
    """Threads a worker may have: torch's intra-op, inter-op and OpenMP pools (one thread per
    core each) plus the operation's own, with room to spare."""
    return 64 + 3 * (os.cpu_count() or 1)


LEVELS = tuple(JailLevel)
"""Jail levels from weakest to strongest."""
CONFINING_LAYERS = ("namespaces", "landlock", "seccomp")
FULL_GUARDS = ("namespaces", "pidns", "proc", "root", "rlimits", "threads", "landlock", "seccomp",
               "capabilities")
"""Every guard `full` needs; the handshake's `missing` names each one absent."""


@dataclass
class Entered:
    """The namespaces `enter_namespaces` reached, for `apply_jail` to go on from."""

    active: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    nproc_uid: int | None = None
    """The real uid root took so that RLIMIT_NPROC binds it (None: not root, or refused)."""
    mounts: bool = False
    """Whether this process has a mount namespace of its own, its mounts private."""


Layer = Callable[[JailConfig, list[str]], str]


def _run_layers(config: JailConfig, state: Entered, layers: list[tuple[str, Layer]]) -> None:
    for name, apply in layers:
        if name in config.disabled:
            state.missing[name] = "disabled for a self-test of a degraded jail"
            continue
        try:
            detail = apply(config, state.active)
        except OSError as exc:
            state.missing[name] = f"{exc.strerror or exc} (errno {exc.errno})"
            continue
        except _Unsupported as exc:
            state.missing[name] = str(exc)
            continue
        state.active.append(f"{name}:{detail}" if detail else name)


PID_NAMESPACE = "pid, init holds the death signal"


def enter_namespaces(config: JailConfig, pid_namespace_made: bool = False) -> Entered:
    """The first guards: namespaces, the PID namespace with its init, a fresh /proc and root.

    Only the worker returns: with the PID namespace a cold worker starts the init, forks the
    worker, and stays behind as the relay that waits for it and exits with its status.
    `pid_namespace_made`: the fork server already made this process PID 2 of a PID
    namespace of its own; the mounts then come before the user namespace, while this process
    still holds the capabilities that namespace's /proc needs."""
    state = Entered()
    if not sys.platform.startswith("linux"):
        for name in ("namespaces", "pidns", "proc", "root"):
            state.missing[name] = f"not available on {sys.platform}"
        return state
    if "threads" not in config.disabled:
        state.nproc_uid = _take_nproc_uid(config)  # before the user namespace hides uids
    mounts: list[tuple[str, Layer]] = [
        ("proc", lambda c, active: _mount_proc(c, active, state)),
        ("root", lambda c, active: _fresh_root(c, state)),
    ]
    if pid_namespace_made:
        layers = [("pidns", lambda c, active: PID_NAMESPACE), *mounts,
                  ("namespaces", _unshare_namespaces)]
    else:
        layers = [("namespaces", _unshare_namespaces), ("pidns", _pid_namespace), *mounts]
    _run_layers(config, state, layers)
    return state


def apply_jail(config: JailConfig, entered: Entered | None = None) -> dict:
    """Confine this process as far as the platform allows; return the level dict.

    `entered`: what `enter_namespaces` already did (the worker opens /proc/self/maps in
    between); without it the namespaces are entered first."""
    state = entered if entered is not None else enter_namespaces(config)
    nproc_uid = state.nproc_uid
    layers: list[tuple[str, Layer]] = [
        ("rlimits", _set_rlimits),
        ("threads", lambda c, active: _cap_threads(c, active, nproc_uid)),
    ]
    if sys.platform.startswith("linux"):
        layers += [("landlock", _landlock), ("seccomp", _seccomp),
                   ("capabilities", lambda c, active: _drop_capabilities())]
    else:
        for name in ("landlock", "seccomp", "capabilities"):
            state.missing[name] = f"not available on {sys.platform}"
    _run_layers(config, state, layers)
    # One order whoever made which namespace (a forked worker mounts before its user
    # namespace): the handshake of a cold and a forked worker on one machine is the same.
    order = {name: n for n, name in enumerate(FULL_GUARDS)}
    state.active.sort(key=lambda a: order.get(a.split(":")[0], len(order)))
    level = level_name(state.active)
    missing = state.missing
    description = level if not missing else f"{level}: missing {', '.join(missing)}"
    return {
        "level": level,
        "description": description,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "active": state.active,
        "missing": missing,
    }


def level_name(active: list[str]) -> str:
    """`full`, `partial` or `process-only` for the active guards (`name:detail` strings)."""
    names = {a.split(":")[0] for a in active}
    if not names & set(CONFINING_LAYERS):
        return JailLevel.PROCESS_ONLY
    if names >= set(FULL_GUARDS):
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


def _check(result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (PR_SET_PDEATHSIG; Linux only)."""
    if sys.platform.startswith("linux"):
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _no_new_privs() -> None:
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


# --- namespaces -------------------------------------------------------------------------

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


def _unshare_namespaces(config: JailConfig, active: list[str]) -> str:
    euid, egid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) == 0:
        return "user+net+ipc" + _map_ids(euid, egid)
    first = ctypes.get_errno()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:  # a kernel without IPC namespaces
        refused = os.strerror(ctypes.get_errno())
        return f"user+net (IPC namespace refused: {refused})" + _map_ids(euid, egid)
    # Without user namespaces, root can still drop the network (and IPC) on its own.
    if _libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) == 0:
        return f"net+ipc (user namespace refused: {os.strerror(first)})"
    if _libc.unshare(CLONE_NEWNET) == 0:
        return f"net (user namespace refused: {os.strerror(first)})"
    raise OSError(first, f"unshare refused: {os.strerror(first)}")


NOBODY = 65534
"""The one id mapped inside the user namespace: the worker's effective uid and gid, so files
it creates in its fresh root's tmpfs have an owner; its real uid stays unmapped (it reads as
this overflow id too)."""


def _map_ids(euid: int, egid: int) -> str:
    """Map NOBODY inside to the effective ids outside; '' or why it could not."""
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{NOBODY} {euid} 1"),
                           ("gid_map", f"{NOBODY} {egid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    except OSError as exc:
        return f" (ids unmapped: {exc.strerror})"
    return ""


_INIT_PY = """
import ctypes, os
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when the relay dies
while os.read(0, 1):  # EOF once the relay is gone (also if it went before the line above)
    pass
"""


def init_command() -> list[str]:
    """PID 1 of the namespace, reading the relay's pipe on stdin until EOF with SIGKILL as
    its parent-death signal: when PID 1 dies, the kernel kills the whole namespace. It is
    exec'd (posix_spawn), never forked: no copy of a process that imported torch. util-linux's
    `setpriv ... cat` costs a tenth of the CPU of Python, which stands in where it is absent."""
    setpriv, cat = shutil.which("setpriv", path=_BIN), shutil.which("cat", path=_BIN)
    if setpriv and cat:
        return [setpriv, "--pdeathsig", "KILL", cat]
    return [sys.executable, "-I", "-S", "-c", _INIT_PY]


_BIN = "/usr/bin:/bin"


def spawn_namespace_init(close: tuple[int, ...] = ()) -> int:
    """Start the init of the PID namespace this process's next child enters (so it is PID 1
    there) with SIGKILL as its death signal towards this process; returns the pipe end that
    keeps it waiting: close it once the worker is gone. The init holds no other descriptor
    of this process (`close`: inheritable ones it must not get), so a client's EOF never
    waits for it."""
    alive_r, alive_w = os.pipe()
    try:
        actions = [(os.POSIX_SPAWN_DUP2, alive_r, 0),
                   *((os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2))]
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in close]
        command = init_command()
        os.posix_spawn(command[0], command, {}, file_actions=actions)
    except BaseException:
        os.close(alive_w)
        raise
    finally:
        os.close(alive_r)
    return alive_w


def pid_namespace_for_next_child(own_namespace: int, make: bool = True) -> int | None:
    """For the fork server: a fresh PID namespace, with its init started, for the next child
    this process forks (it becomes PID 2 there); the init's pipe end (`spawn_namespace_init`),
    or None when this process may not make one (not root) or `make` is False (the next child
    then goes to this process's own namespace again). `own_namespace`: a descriptor of this
    process's own PID namespace, which a second unshare must start from."""
    if _libc.setns(own_namespace, CLONE_NEWPID) != 0:
        return None
    if not make or _libc.unshare(CLONE_NEWPID) != 0:
        return None
    return spawn_namespace_init()


def _pid_namespace(config: JailConfig, active: list[str]) -> str:
    _check(_libc.unshare(CLONE_NEWPID))
    alive_w = spawn_namespace_init(() if config.output_fd is None else (config.output_fd,))
    sys.stdout.flush()
    sys.stderr.flush()
    if worker := os.fork():
        _relay(worker)
    os.close(alive_w)  # only the relay may keep init waiting
    return PID_NAMESPACE


def _relay(child: int) -> None:
    """Outside the namespace: wait for the worker and end as it did (a signal as that
    signal); init, which reads the relay's end of a pipe, then sees EOF and exits.

    It keeps every descriptor the worker has, the protocol pipe included, so the client sees
    EOF only once this status is there to collect (it kills the group on EOF). It never
    returns, whatever fails: returning would make it a second, unjailed worker."""
    code = 1
    try:
        with contextlib.suppress(OSError):
            _drop_capabilities()
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            if resource is not None:
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if -code != signal.SIGKILL:
                signal.signal(-code, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
            os.kill(os.getpid(), -code)
    finally:
        os._exit(code if 0 <= code < 256 else 1)


def _own_mounts(state: Entered) -> None:
    """A mount namespace of this process's own, its mounts private: without that, root
    outside a user namespace would share every mount (the /proc and root below) with the
    host."""
    if state.mounts:
        return
    _check(_libc.unshare(CLONE_NEWNS))
    _check(_libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None))
    state.mounts = True


def _mount_proc(config: JailConfig, active: list[str], state: Entered) -> str:
    if not any(a.startswith("pidns") for a in active):
        raise _Unsupported("no PID namespace of its own to show")
    _own_mounts(state)
    _check(_libc.mount(b"proc", b"/proc", b"proc",
                       ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None))
    return "this namespace's processes only"


def _fresh_root(config: JailConfig, state: Entered) -> str:
    machine = platform.machine()
    if machine not in fresh_root.PIVOT_ROOT:
        raise _Unsupported(f"no pivot_root number for {machine}")
    _own_mounts(state)
    plan = fresh_root.host_facts([*_system_read_roots(), *config.read_paths], config.gpu)
    return fresh_root.build_root(plan, machine)


# --- capabilities -----------------------------------------------------------------------

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _drop_capabilities() -> str:
    """Empty the effective, permitted and inheritable sets (ambient ones go with them).

    Run last: a fresh user namespace hands its creator every capability inside it, and root
    whose user namespace was refused (user.max_user_namespaces=0) would keep the real ones,
    reboot, raw I/O ports, the kernel log, real-time scheduling and all, under a `full` jail.
    Nothing after the jail needs one (Landlock and seccomp rely on no_new_privs), and with
    execve killed they can never come back."""
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data))
    return ""


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


_NPROC_UID_BASE = 0x7E000000
"""Real uids root takes for the thread cap: unassigned, one per worker (base + pid), so no
other process's tasks count towards a worker's RLIMIT_NPROC."""


def _take_nproc_uid(config: JailConfig) -> int | None:
    """As root, a real uid of this worker's own (effective and saved uid stay 0, so files are
    opened as before and no capability is lost yet): the kernel exempts only real root from
    RLIMIT_NPROC. None when not root or refused (a uid unmapped in a container)."""
    if resource is None or config.real_uid != 0:
        return None
    uid = _NPROC_UID_BASE + _host_pid() % 0x1000000
    try:
        os.setresuid(uid, 0, 0)
    except OSError:
        return None
    return uid


def _host_pid() -> int:
    """This process's pid as the host sees it (a forked worker is PID 2 of its namespace by
    now, but /proc is still the host's)."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def _cap_threads(config: JailConfig, active: list[str], nproc_uid: int | None) -> str:
    if resource is None:
        raise _Unsupported(f"no resource limits on {sys.platform}")
    in_userns = any(a.startswith("namespaces:user") for a in active)
    if nproc_uid is None and not (in_userns and config.real_uid != 0):
        raise _Unsupported(
            "the kernel caps no thread count here (outside a user namespace RLIMIT_NPROC "
            "counts every process of the user, and real root is exempt); the client's "
            f"watchdog kills the worker past {config.max_threads} threads instead")
    resource.setrlimit(resource.RLIMIT_NPROC, (config.max_threads, config.max_threads))
    return f"nproc={config.max_threads}" + (" (a real uid of its own)" if nproc_uid else "")


# --- Landlock ---------------------------------------------------------------------------

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
    roots.add(str(Path(__file__).resolve().parents[2]))  # the inspector package
    roots.update(["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache"])
    # CPU-topology files torch's thread pool reads when it starts.
    roots.update(["/proc/cpuinfo", "/sys/devices/system/cpu"])
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
        devices = [d for d in fresh_root.BASE_DEVICES if os.path.exists(d)]
        for path in _system_read_roots() + devices + list(config.read_paths):
            _add_path_rule(ruleset, path, read_rights)
        found = fresh_root.host_gpu() if config.gpu else fresh_root.GpuPaths((), ())
        if found.devices:  # the driver opens its nodes read-write and drives them by ioctl
            node_rights = (read_rights | _FS_WRITE_FILE | _FS_IOCTL_DEV) & handled_fs
            for path in found.devices:
                _add_path_rule(ruleset, path, node_rights)
            for path in (*found.libraries, *fresh_root.GPU_READ):
                if os.path.exists(path):
                    _add_path_rule(ruleset, path, read_rights)
        if config.output_fd is not None:
            write_rights = (_FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE) & handled_fs
            _add_fd_rule(ruleset, config.output_fd, write_rights)
        _no_new_privs()
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


def warm_up() -> None:
    """For the fork server: what every forked worker would otherwise compute again (the
    interpreter's paths, which sysconfig parses once, and the seccomp filter for PID 2)."""
    _system_read_roots()
    if platform.machine() in _SYSCALLS:
        seccomp_filter(platform.machine(), 2)


def _seccomp(config: JailConfig, active: list[str]) -> str:
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise _Unsupported(f"no syscall table for {machine}")
    filters = seccomp_filter(machine, os.getpid())
    fbuf = ctypes.create_string_buffer(filters, len(filters))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _SockFprog(len(filters) // 8, ctypes.addressof(fbuf))
    _no_new_privs()
    # TSYNC puts every existing thread under the filter too, should any exist already.
    _syscall(_SYSCALLS[machine]["seccomp"], ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
             ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    return f"{len(filters) // 8} instructions"
