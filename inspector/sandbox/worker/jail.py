"""Confine the current process before it deserialises anything; report the level reached.

`enter_namespaces(config)` then `apply_jail(config, entered)` must run while the process is
still single-threaded (before torch is imported): unshare(CLONE_NEWUSER) refuses multithreaded
callers, the PID namespace forks, and Landlock only binds the calling thread and the threads it
creates afterwards. Each layer is applied independently so that a kernel lacking one feature
still gets the others; the returned level names what is active and what is missing, and why.

Guards, in order (`FULL_GUARDS`; DEVELOPING.md 2.11 says what each stops and what is left
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
5. resource limits (`sandbox.protocol.Limits`): CPU seconds, open files, address space, file
   size (0 unless converting), no core dumps, no real-time or higher priority;
6. threads: RLIMIT_NPROC, which the kernel counts per user (per user namespace). Real root is
   exempt from it, so root first takes a real uid of its own (`nproc_uid`: effective uid 0
   stays, so file access is root's) and the kernel then caps it too;
7. Landlock (`landlock.py`): read only the inputs, the Python installation and system
   libraries; write nothing except through the already-open output descriptor; no TCP
   bind/connect; no signals or abstract Unix sockets outside the sandbox (ABI 6);
8. seccomp-BPF (`seccomp.py`), by system call and by argument (`REFUSALS`, `ARGUMENT_RULES`;
   the calls left allowed that reach outside the worker, each with its reason, in `ALLOWED`);
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
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from inspector.core.vocabulary import JailLevel
from inspector.sandbox.protocol import Limits
from inspector.sandbox.worker import fresh_root, landlock, seccomp
from inspector.sandbox.worker.kernel import Unsupported, check, libc

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
    limits: Limits = field(default_factory=Limits)
    """CPU time, memory, open files, priority and threads (`sandbox.protocol.Limits`)."""
    mapped_bytes: int = 0
    """Bytes of files the job maps (its inputs and output), allowed on top of its memory."""
    output_bytes: int = 0
    """RLIMIT_FSIZE: 0 forbids growing any file; a conversion raises it to the output's size."""
    real_uid: int = field(default_factory=lambda: os.getuid() if os.name == "posix" else -1)
    """The uid before the user namespace hides it (RLIMIT_NPROC does not bind root)."""
    disabled: frozenset[str] = frozenset()
    """Layers to leave off: only the test suite's degraded-environment runs set this."""
    gpu: int | None = None
    """The device minor of the one NVIDIA GPU the job may use (`fresh_root.gpu_minor`): its
    nodes, the driver's libraries and its sysfs folder are let in; None: no GPU."""

    @property
    def memory_bytes(self) -> int:
        """The address-space limit: the memory allowance plus the mapped files (what
        `Limits.allowance` says in words)."""
        return self.limits.memory_mb * MIB + self.mapped_bytes


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
        except Unsupported as exc:
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
        layers += [("landlock", _landlock), ("seccomp", lambda c, active: seccomp.install()),
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
        "platform": f"{os.uname().sysname} {os.uname().release} {os.uname().machine}",
        "active": state.active,
        "missing": missing,
    }


def _landlock(config: JailConfig, active: list[str]) -> str:
    return landlock.restrict(config.read_paths, config.output_fd, config.gpu)


def level_name(active: list[str]) -> str:
    """`full`, `partial` or `process-only` for the active guards (`name:detail` strings)."""
    names = {a.split(":")[0] for a in active}
    if not names & set(CONFINING_LAYERS):
        return JailLevel.PROCESS_ONLY
    if names >= set(FULL_GUARDS):
        return JailLevel.FULL
    return JailLevel.PARTIAL


def warm_up() -> None:
    """For the fork server: what every forked worker would otherwise compute again (the
    interpreter's paths, which sysconfig parses once, and the seccomp filter for PID 2)."""
    landlock.system_read_roots()
    seccomp.warm_up(2)


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (PR_SET_PDEATHSIG; Linux only)."""
    if sys.platform.startswith("linux"):
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# --- namespaces -------------------------------------------------------------------------

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


def _unshare_namespaces(config: JailConfig, active: list[str]) -> str:
    euid, egid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) == 0:
        return "user+net+ipc" + _map_ids(euid, egid)
    first = ctypes.get_errno()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:  # a kernel without IPC namespaces
        refused = os.strerror(ctypes.get_errno())
        return f"user+net (IPC namespace refused: {refused})" + _map_ids(euid, egid)
    # Without user namespaces, root can still drop the network (and IPC) on its own.
    if libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) == 0:
        return f"net+ipc (user namespace refused: {os.strerror(first)})"
    if libc.unshare(CLONE_NEWNET) == 0:
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
    setpriv, cat = _which("setpriv"), _which("cat")
    if setpriv and cat:
        return [setpriv, "--pdeathsig", "KILL", cat]
    return [sys.executable, "-I", "-S", "-c", _INIT_PY]


_BIN = "/usr/bin:/bin"


def _which(name: str) -> str | None:
    """`name`'s executable in `_BIN` (shutil.which's answer there, without importing shutil and
    the compressors it loads into every worker)."""
    for folder in _BIN.split(":"):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


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
    if libc.setns(own_namespace, CLONE_NEWPID) != 0:
        return None
    if not make or libc.unshare(CLONE_NEWPID) != 0:
        return None
    return spawn_namespace_init()


def _pid_namespace(config: JailConfig, active: list[str]) -> str:
    check(libc.unshare(CLONE_NEWPID))
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
    check(libc.unshare(CLONE_NEWNS))
    check(libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None))
    state.mounts = True


def _mount_proc(config: JailConfig, active: list[str], state: Entered) -> str:
    if not any(a.startswith("pidns") for a in active):
        raise Unsupported("no PID namespace of its own to show")
    _own_mounts(state)
    check(libc.mount(b"proc", b"/proc", b"proc",
                     ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None))
    return "this namespace's processes only"


def _fresh_root(config: JailConfig, state: Entered) -> str:
    machine = os.uname().machine
    if machine not in fresh_root.PIVOT_ROOT:
        raise Unsupported(f"no pivot_root number for {machine}")
    _own_mounts(state)
    plan = fresh_root.host_facts([*landlock.system_read_roots(), *config.read_paths], config.gpu)
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
    check(libc.capset(header, data))
    return ""


# --- resource limits --------------------------------------------------------------------


def _set_rlimits(config: JailConfig, active: list[str]) -> str:
    if resource is None:
        raise Unsupported(f"no resource limits on {sys.platform}")
    limits = config.limits
    rlimits = [
        ("cpu", resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 2),
        ("files", resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        ("as", resource.RLIMIT_AS, config.memory_bytes, config.memory_bytes),
        ("fsize", resource.RLIMIT_FSIZE, config.output_bytes, config.output_bytes),
        ("core", resource.RLIMIT_CORE, 0, 0),
    ]
    # No real-time class and no nice value below the caller's, whatever the user's limits
    # allow (an audio group's rtprio): a spinning SCHED_FIFO worker starves the machine.
    rlimits += [(name, getattr(resource, which), 0, 0)
                for name, which in (("rtprio", "RLIMIT_RTPRIO"), ("priority", "RLIMIT_NICE"))
                if hasattr(resource, which)]
    set_names = []
    for name, which, soft, hard in rlimits:
        _, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(which, (soft, hard))
        set_names.append(name)
    if limits.nice > 0:
        os.nice(limits.nice)
        set_names.append(f"nice+{limits.nice}")
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
        raise Unsupported(f"no resource limits on {sys.platform}")
    cap = config.limits.thread_cap()
    in_userns = any(a.startswith("namespaces:user") for a in active)
    if nproc_uid is None and not (in_userns and config.real_uid != 0):
        raise Unsupported(
            "the kernel caps no thread count here (outside a user namespace RLIMIT_NPROC "
            "counts every process of the user, and real root is exempt); the client's "
            f"watchdog kills the worker past {cap} threads instead")
    resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
    return f"nproc={cap}" + (" (a real uid of its own)" if nproc_uid else "")
