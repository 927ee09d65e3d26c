"""Hostile probes inside the real jail, at full strength and with each layer left off.

Every probe is Python source that the test-only `selftest-payload` operation unpickles with
plain `pickle` (`builtins.exec`) inside the jailed worker, exactly as code that slipped past
weights_only would run. A probe's body finishes normally only when its action succeeded, so a
refused probe is one that raised an `OSError` with one of the errnos the jail answers with.
One worker runs a whole group of probes, each in its own try/except (the op's loop), so one
probe that gets through is reported beside the others instead of hiding them; probes that
kill or flood the worker run in a worker of their own.

Each probe names the layers that refuse it (`guards`). With a layer left off through the
self-test switch, the suite runs the probes some remaining layer still guards and must find
them refused, and runs a harmless witness per missing layer that must now succeed, which shows
the reported level is the truth. Outside the worker, every listener must have received
nothing, and the input, the decoy key and its folder must be exactly as before.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import socket
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from jail_payloads import PRELUDE, X86_64_LINUX, exec_pickle

from inspector.sandbox.host import client, events, launch
from inspector.sandbox.host.client import SandboxError, run_job
from inspector.sandbox.worker import fresh_root, landlock

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytest_plugins = ("forkserver_fixtures",)

pytestmark = X86_64_LINUX

REPO = Path(__file__).resolve().parent.parent
EPERM, EACCES, EAFNOSUPPORT, ENOSYS = errno.EPERM, errno.EACCES, errno.EAFNOSUPPORT, errno.ENOSYS
ENOENT, ESRCH = errno.ENOENT, errno.ESRCH
FS = (EACCES, EPERM)
CROSS = (*FS, errno.EXDEV)  # how Landlock may refuse a link or rename across folders
EROFS = errno.EROFS
# The fresh root: a host path is not there, and what is (the inputs and the folders above
# them) is read-only.
ROOTED = (ENOENT, EROFS)
FILES = "landlock root"
NET = (EAFNOSUPPORT, errno.ENETUNREACH, EACCES, EPERM, errno.ECONNREFUSED)
OVERFLOW_UID = 65534  # what getuid() says inside a user namespace with no uid map


@dataclass(frozen=True)
class Probe:
    """One hostile action: source run in the jail and the layers that refuse it."""

    name: str
    body: str
    guards: frozenset[str]
    """Layers any one of which refuses it; empty when the worker's set-up always does (no
    terminal, no listening socket of its own)."""
    errnos: tuple[int, ...]


def _p(name: str, body: str, guards: str, errnos: tuple[int, ...] = (EPERM,)) -> Probe:
    return Probe(name, textwrap.dedent(body).strip(), frozenset(guards.split()), errnos)


LANDLOCK, SECCOMP = "landlock", "seccomp"
NETGUARD = "seccomp namespaces landlock"
OTHERS = "seccomp landlock pidns"  # another process: refused, or not even in the namespace
OTHERS_ERRNOS = (EPERM, ESRCH)
PARENT = '(os.getppid() or P["client"])'
OTHERS_ALL = (OTHERS, OTHERS_ERRNOS)
NS_OTHER = ("seccomp pidns", OTHERS_ERRNOS)  # refused, and naming a pid the namespace lacks

BOUND = [*landlock.system_read_roots(), "/proc", *fresh_root.BASE_DEVICES]
"""What the fresh root shows of the host (besides the inputs): its read-only binds."""


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


HOST_FOLDERS = {name: path for name, path in [
    ("root", "/"), ("home", "/home"), ("root_home", "/root"), ("work", "/work"),
    ("etc", "/etc"), ("tmp", "/tmp"), ("var", "/var"), ("repo", str(REPO)),
    ("client_cwd", os.getcwd()),
] if os.path.isdir(path) and (path == "/" or not _inside(path, BOUND))}
"""Host folders the fresh root may keep only as an empty skeleton (those above a bind)."""

PROBES: list[Probe] = [
    # Reading secrets, /proc and neighbouring files.
    *(_p(f"read_{n}", f"open({path}, 'rb').read(1)", FILES, (*FS, ENOENT)) for n, path in [
        ("etc_shadow", "'/etc/shadow'"), ("etc_hostname", "'/etc/hostname'"),
        ("etc_passwd", "'/etc/passwd'"), ("decoy_key", "P['decoy']"),
        ("neighbour", "P['neighbour']"), ("repo_file", "P['repo_file']"),
    ]),
    _p("read_proc_init_environ", "open('/proc/1/environ', 'rb').read(1)", LANDLOCK, FS),
    # The namespace's init was started outside the fresh root: its root and cwd are the host's.
    *(_p(f"proc_init_{n}", body, LANDLOCK, FS) for n, body in [
        ("root_listing", "os.listdir('/proc/1/root')"),
        ("root_hostname", "open('/proc/1/root/etc/hostname', 'rb').read(1)"),
        ("cwd_listing", "os.listdir('/proc/1/cwd')"),
    ]),
    # Other processes' /proc entries: Landlock refuses them, and the fresh /proc of the PID
    # namespace has none.
    *(_p(f"read_{n}", f"open({path}, 'rb').read(1)", "landlock proc", (*FS, ENOENT))
      for n, path in [
        ("proc_client_environ", "f\"/proc/{P['client']}/environ\""),
        ("proc_client_cmdline", "f\"/proc/{P['client']}/cmdline\""),
        ("proc_client_mem", "f\"/proc/{P['client']}/mem\""),
        ("proc_client_root", "f\"/proc/{P['client']}/root/etc/hostname\""),
    ]),
    *(_p(f"list_{n}", f"os.listdir({path})", LANDLOCK, FS) for n, path in [
        ("root", "'/'"), ("etc", "'/etc'"),
    ]),
    *(_p(f"list_{n}", f"os.listdir({path})", FILES, (*FS, ENOENT)) for n, path in [
        ("input_folder", "P['folder']"), ("ssh_folder", "P['ssh']"),
        ("sys_class_net", "'/sys/class/net'"),
    ]),
    _p("list_proc_client_fd", "os.listdir(f\"/proc/{P['client']}/fd\")", "landlock proc",
       (*FS, ENOENT)),
    # Writing anywhere.
    *(_p(f"create_{n}", f"open({path}, 'xb').close()", FILES, (*FS, *ROOTED))
      for n, path in [
        ("in_folder", "P['folder'] + '/created'"), ("in_tmp", "P['tmp_target']"),
        ("in_dev_shm", "P['shm_target']"), ("beside_key", "P['ssh'] + '/authorized_keys'"),
        ("canary", "P['canary']"),
    ]),
    _p("append_input", "open(P['input'], 'ab').write(b'x')", FILES, (*FS, EROFS)),
    _p("rewrite_input", "open(P['input'], 'r+b').write(b'x')", FILES, (*FS, EROFS)),
    _p("truncate_input", "os.truncate(P['input'], 0)", FILES, (*FS, EROFS)),
    _p("rename_input", "os.rename(P['input'], P['folder'] + '/moved')", FILES,
       (*CROSS, *ROOTED)),
    _p("unlink_input", "os.unlink(P['input'])", FILES, (*FS, EROFS)),
    _p("unlink_decoy", "os.unlink(P['decoy'])", FILES, (*FS, ENOENT)),
    _p("hardlink_input", "os.link(P['input'], P['folder'] + '/linked')", FILES,
       (*CROSS, *ROOTED)),
    _p("symlink_in_folder", "os.symlink('/etc/passwd', P['folder'] + '/sym')", FILES,
       (*FS, *ROOTED)),
    _p("mkdir_in_folder", "os.mkdir(P['folder'] + '/newdir')", FILES, (*FS, *ROOTED)),
    _p("mkfifo_in_folder", "os.mkfifo(P['folder'] + '/fifo')", FILES, (*FS, *ROOTED)),
    # Metadata: modes (setuid included), owners, times, extended attributes.
    _p("chmod_input", "os.chmod(P['input'], 0o666)", SECCOMP),
    _p("chmod_input_setuid", "os.chmod(P['input'], 0o4755)", SECCOMP),
    _p("chmod_decoy_world_readable", "os.chmod(P['decoy'], 0o644)", SECCOMP),
    _p("chmod_ssh_folder_0777", "os.chmod(P['ssh'], 0o777)", SECCOMP),
    _p("chmod_input_folder", "os.chmod(P['folder'], 0o777)", SECCOMP),
    _p("fchmod_input", "os.fchmod(os.open(P['input'], os.O_RDONLY), 0o666)", SECCOMP),
    _p("fchmodat_decoy", "sc(268, -100, P['decoy'].encode(), 0o644)", SECCOMP),
    _p("fchmodat2_decoy", "sc(452, -100, P['decoy'].encode(), 0o644, 0)", SECCOMP,
       (EPERM, ENOSYS)),
    _p("chown_input", "os.chown(P['input'], 12345, 12345)", SECCOMP),
    _p("chown_decoy", "os.chown(P['decoy'], 12345, 12345)", SECCOMP),
    _p("lchown_decoy", "os.lchown(P['decoy'], 12345, 12345)", SECCOMP),
    _p("fchown_input", "os.fchown(os.open(P['input'], os.O_RDONLY), 12345, 12345)", SECCOMP),
    _p("fchownat_decoy", "sc(260, -100, P['decoy'].encode(), 12345, 12345, 0)", SECCOMP),
    _p("utime_input", "os.utime(P['input'], (0, 0))", SECCOMP),
    _p("utime_decoy", "os.utime(P['decoy'], ns=(10**9, 10**9))", SECCOMP),
    _p("utime_ssh_folder", "os.utime(P['ssh'])", SECCOMP),
    _p("futimens_input", "os.utime(os.open(P['input'], os.O_RDONLY), (0, 0))", SECCOMP),
    _p("utime_raw_input", "sc(132, P['input'].encode(), 0)", SECCOMP),
    _p("utimes_raw_decoy", "sc(235, P['decoy'].encode(), 0)", SECCOMP),
    _p("futimesat_raw_decoy", "sc(261, -100, P['decoy'].encode(), 0)", SECCOMP),
    _p("setxattr_input", "os.setxattr(P['input'], 'user.probe', b'x')", SECCOMP),
    _p("setxattr_decoy", "os.setxattr(P['decoy'], 'user.probe', b'x')", SECCOMP),
    _p("lsetxattr_decoy", "os.setxattr(P['decoy'], 'user.probe', b'x', follow_symlinks=False)",
       SECCOMP),
    _p("fsetxattr_input", "os.setxattr(os.open(P['input'], os.O_RDONLY), 'user.probe', b'x')",
       SECCOMP),
    _p("removexattr_input", "os.removexattr(P['input'], 'user.keep')", SECCOMP),
    _p("getxattr_input", "os.getxattr(P['input'], 'user.keep')", SECCOMP,
       (errno.EOPNOTSUPP,)),
    _p("listxattr_decoy", "os.listxattr(P['decoy'])", SECCOMP, (errno.EOPNOTSUPP,)),
    # Sockets: Unix (pathname and abstract) to listeners outside, and the network.
    _p("unix_stream_pathname",
       "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(P['stream']); "
       "s.sendall(b'probe')", SECCOMP, (EAFNOSUPPORT,)),
    _p("unix_dgram_pathname",
       "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'probe', P['dgram'])",
       SECCOMP, (EAFNOSUPPORT,)),
    _p("unix_seqpacket_pathname",
       "socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).connect(P['stream'])",
       SECCOMP, (EAFNOSUPPORT,)),
    _p("unix_stream_abstract",
       "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(P['abstract']); "
       "s.sendall(b'probe')", NETGUARD, NET),
    _p("unix_dgram_abstract",
       "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'probe', P['abstract_dgram'])",
       NETGUARD, NET),
    _p("tcp4_connect",
       "s = socket.create_connection(('127.0.0.1', P['tcp_port']), timeout=2); "
       "s.sendall(b'probe')", NETGUARD, NET),
    _p("tcp6_connect", "socket.create_connection(('::1', P['tcp_port']), timeout=2)",
       NETGUARD, (*NET, errno.EADDRNOTAVAIL)),
    _p("udp4_sendto",
       "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'probe', "
       "('127.0.0.1', P['udp_port']))", "seccomp namespaces", NET),
    _p("raw_icmp", "socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
       SECCOMP, NET),
    _p("packet_socket", "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)", SECCOMP, NET),
    _p("netlink_socket",
       "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)", SECCOMP,
       NET),
    _p("vsock_socket", "socket.socket(40, socket.SOCK_STREAM)", SECCOMP, NET),
    _p("alg_socket", "socket.socket(38, socket.SOCK_SEQPACKET)", SECCOMP, NET),
    _p("socketpair_inet", "sc(53, 2, 1, 0, ctypes.create_string_buffer(8))", SECCOMP,
       (EAFNOSUPPORT,)),
    # New processes and programs.
    _p("fork", "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)", SECCOMP),
    _p("posix_spawn", "os.waitpid(os.posix_spawn('/bin/true', ['true'], {}), 0)", SECCOMP),
    _p("subprocess_run", "__import__('subprocess').run(['/bin/touch', P['canary']])", SECCOMP),
    _p("os_system",
       "status = os.system('touch ' + P['canary'])\n"
       "if status:\n    raise OSError(errno.EPERM, f'system() returned {status}')", SECCOMP),
    _p("raw_fork", "sc(57)", SECCOMP),
    _p("raw_vfork", "sc(58)", SECCOMP),
    _p("raw_clone_process", "sc(56, signal.SIGCHLD, 0, 0, 0, 0)", SECCOMP),
    _p("clone3", "sc(435, ctypes.create_string_buffer(88), 88)", SECCOMP, (ENOSYS,)),
    _p("io_uring_setup", "sc(425, 8, ctypes.create_string_buffer(120))", SECCOMP, (ENOSYS,)),
    # Kernel interfaces a jail must keep closed.
    _p("ptrace_attach_client", "sc(101, 16, P['client'], 0, 0)", OTHERS, OTHERS_ERRNOS),
    _p("ptrace_traceme", "sc(101, 0, 0, 0, 0)", SECCOMP),
    *(_p(f"process_vm_{way}_client",
         "buf = ctypes.create_string_buffer(8)\n"
         "mine = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)\n"
         "theirs = (ctypes.c_void_p * 2)(P['client_addr'], 8)\n"
         f"sc({nr}, P['client'], mine, 1, theirs, 1, 0)", OTHERS, OTHERS_ERRNOS)
      for way, nr in [("readv", 310), ("writev", 311)]),
    _p("bpf", "sc(321, 5, ctypes.create_string_buffer(128), 128)", SECCOMP),
    _p("perf_event_open", "sc(298, ctypes.create_string_buffer(128), 0, -1, -1, 0)", SECCOMP),
    _p("userfaultfd", "sc(323, 0)", SECCOMP),
    _p("mount_tmpfs", "sc(165, b'none', b'/tmp', b'tmpfs', 0, 0)", SECCOMP),
    _p("umount_proc", "sc(166, b'/proc', 2)", SECCOMP),
    _p("chroot", "os.chroot('/tmp')", SECCOMP),
    _p("pivot_root", "sc(155, b'/tmp', b'/tmp')", SECCOMP),
    _p("unshare_user", "sc(272, 0x10000000)", SECCOMP),
    _p("unshare_mount", "sc(272, 0x20000)", SECCOMP),
    _p("setns", "sc(308, 0, 0)", SECCOMP),
    _p("keyctl", "sc(250, 0, -1, 0, 0, 0)", SECCOMP),
    _p("add_key", "sc(248, b'user', b'probe', b'x', 1, -2)", SECCOMP),
    _p("init_module", "sc(175, 0, 0, b'')", SECCOMP),
    _p("finit_module", "sc(313, 0, b'', 0)", SECCOMP),
    _p("kexec_load", "sc(246, 0, 0, 0, 0)", SECCOMP),
    _p("open_by_handle_at", "sc(304, -100, ctypes.create_string_buffer(16), 0)", SECCOMP),
    _p("pidfd_open_client", "sc(434, P['client'], 0)", *NS_OTHER),
    _p("pidfd_getfd", "sc(438, 0, 0, 0)", SECCOMP),
    _p("kcmp_client", "sc(312, os.getpid(), P['client'], 0, 0, 0)", *NS_OTHER),
    _p("process_madvise", "sc(440, 0, 0, 0, 0, 0)", SECCOMP),
    # The parent: the client for a cold worker, the fork server (which forks every later
    # worker, so taking it over would reach them all) for a forked one. In the PID namespace
    # the parent (the relay) has no pid at all (getppid() is 0): the client stands in.
    *(_p(f"{way}_parent_{what}", f"open(f'/proc/{{{PARENT}}}/" + what + f"', {mode!r})"
         + (".write(b'x')" if "+" in mode else ".read(1)"), "landlock proc", (*FS, ENOENT))
      for way, what, mode in [("read", "environ", "rb"), ("read", "mem", "rb"),
                              ("write", "mem", "r+b"), ("read", "maps", "rb")]),
    _p("ptrace_attach_parent", f"sc(101, 16, {PARENT}, 0, 0)", *OTHERS_ALL),
    _p("kill_parent", f"os.kill({PARENT}, 0)", *OTHERS_ALL),
    _p("pidfd_open_parent", f"sc(434, {PARENT}, 0)", *NS_OTHER),
    # Signals, limits and scheduling of other processes.
    _p("kill_client", "os.kill(P['client'], 0)", OTHERS, OTHERS_ERRNOS),
    _p("kill_victim_sigterm", "os.kill(P['victim'], signal.SIGTERM)", OTHERS, OTHERS_ERRNOS),
    _p("kill_every_process", "os.kill(-1, 0)", SECCOMP, (EPERM, errno.ESRCH)),
    _p("kill_own_group", "os.kill(0, 0)", SECCOMP),
    _p("killpg_victim", "os.killpg(P['victim'], signal.SIGTERM)", OTHERS, OTHERS_ERRNOS),
    _p("tkill_victim", "sc(200, P['victim'], 15)", OTHERS, OTHERS_ERRNOS),
    _p("tgkill_victim", "sc(234, P['victim'], P['victim'], 15)", OTHERS, OTHERS_ERRNOS),
    _p("rt_sigqueueinfo_victim",
       "sc(129, P['victim'], 15, ctypes.create_string_buffer(128))", OTHERS, OTHERS_ERRNOS),
    _p("rt_tgsigqueueinfo_victim",
       "sc(297, P['victim'], P['victim'], 15, ctypes.create_string_buffer(128))",
       OTHERS, OTHERS_ERRNOS),
    _p("pidfd_send_signal", "sc(424, 0, 15, 0, 0)", SECCOMP),
    _p("prlimit_victim_read", "__import__('resource').prlimit(P['victim'], 7)", *NS_OTHER),
    _p("prlimit_victim_lower",
       "__import__('resource').prlimit(P['victim'], 7, (8, 8))", *NS_OTHER),
    _p("setpriority_victim", "os.setpriority(os.PRIO_PROCESS, P['victim'], 19)", *NS_OTHER),
    _p("sched_setaffinity_victim", "os.sched_setaffinity(P['victim'], {0})", *NS_OTHER),
    _p("sched_setscheduler_victim",
       "os.sched_setscheduler(P['victim'], os.SCHED_IDLE, os.sched_param(0))", *NS_OTHER),
    _p("sched_setparam_victim", "os.sched_setparam(P['victim'], os.sched_param(0))", *NS_OTHER),
    _p("ioprio_set_victim", "sc(251, 1, P['victim'], 0)", *NS_OTHER),
    _p("migrate_pages_victim", "sc(256, P['victim'], 64, 0, 0)", *NS_OTHER),
    # --- by argument (issue 23): what a syscall-level filter let through ------------------
    # Socketpairs other than a stream pair reach any pathname socket with sendto/connect.
    *(_p(f"socketpair_unix_{n}", f"sc(53, 1, {kind}, 0, ctypes.create_string_buffer(8))",
         SECCOMP, (EAFNOSUPPORT,))
      for n, kind in [("dgram", 2), ("seqpacket", 5), ("raw", 3), ("rdm", 4),
                      ("dgram_cloexec_nonblock", 2 | 0o2000000 | 0o4000)]),
    _p("socketpair_dgram_sendto_log",
       "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
       "a.sendto(b'probe', P['dgram'])", SECCOMP, (EAFNOSUPPORT,)),
    *(_p(f"stream_pair_{n}", f"a, b = socket.socketpair()\n{body}", SECCOMP)
      for n, body in [
        ("sendto_pathname", "a.sendto(b'probe', P['dgram'])"),
        ("connect_pathname", "a.connect(P['stream'])"),
        ("sendmsg_plain", "a.sendmsg([b'probe'])"),
        ("sendmsg_scm_rights_input",
         "fd = os.open(P['input'], os.O_RDONLY)\n"
         "a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, "
         "__import__('array').array('i', [fd, 1]))])"),
        ("sendmmsg", "sc(307, a.fileno(), ctypes.create_string_buffer(64), 1, 0)"),
        ("bind_abstract", "a.bind('\\0ckpt-probe-bind')"),
        ("listen", "a.listen(1)"),
        ("accept4", "sc(288, a.fileno(), 0, 0, 0)"),
    ]),
    _p("connect_raw_fd0", "sc(42, 0, 0, 0)", SECCOMP),
    # The kernel signalling another process on the worker's behalf (SIGIO), on every kind of
    # descriptor the worker can hold.
    *(_p(f"f_setown_{n}", f"import fcntl\nfd = {fd}\nfcntl.fcntl(fd, 8, P['victim'])",
         NS_OTHER[0], (*OTHERS_ERRNOS, errno.EBADF))
      for n, fd in [
        ("pipe", "os.pipe()[0]"), ("socketpair", "socket.socketpair()[0].detach()"),
        ("input_file", "os.open(P['input'], os.O_RDONLY)"),
        ("directory", "os.open('/usr/lib', os.O_RDONLY | os.O_DIRECTORY)"),
        ("dev_null", "os.open('/dev/null', os.O_RDONLY)"), ("eventfd", "os.eventfd(0)"),
        ("epoll", "__import__('select').epoll().fileno()"), ("stdin", "0"),
        ("protocol_stderr", "2"), ("o_path", "os.open(P['input'], os.O_PATH)"),
    ]),
    _p("f_setown_process_group", "import fcntl\nfcntl.fcntl(os.pipe()[0], 8, -P['victim'])",
       SECCOMP),
    _p("f_setown_ex_victim",
       "import fcntl, struct\n"
       "fcntl.fcntl(os.pipe()[0], 15, struct.pack('ii', 1, P['victim']))", *NS_OTHER),
    _p("f_setsig", "import fcntl\nfcntl.fcntl(os.pipe()[0], 10, signal.SIGTERM)", SECCOMP),
    _p("f_setfl_o_async", "import fcntl\nfcntl.fcntl(os.pipe()[0], fcntl.F_SETFL, os.O_ASYNC)",
       SECCOMP),
    _p("f_setfl_o_async_nonblock",
       "import fcntl\nr, w = socket.socketpair()\n"
       "fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)", SECCOMP),
    _p("f_notify_readable_folder",
       "import fcntl\nfcntl.fcntl(os.open('/usr/lib', os.O_RDONLY), 1026, 0x80000000 | 0x3f)",
       SECCOMP),
    *(_p(f"ioctl_{n}", f"import fcntl, struct\nfcntl.ioctl({fd}, {cmd}, {arg})", SECCOMP)
      for n, fd, cmd, arg in [
        ("fioasync_pipe", "os.pipe()[0]", 0x5452, "struct.pack('i', 1)"),
        ("fiosetown_socketpair", "socket.socketpair()[0]", 0x8901,
         "struct.pack('i', P['victim'])"),
        ("siocspgrp_socketpair", "socket.socketpair()[0]", 0x8902,
         "struct.pack('i', P['victim'])"),
        ("fs_setflags_input", "os.open(P['input'], os.O_RDONLY)", 0x40086602,
         "struct.pack('l', 0x40)"),
        ("fs_fssetxattr_input", "os.open(P['input'], os.O_RDONLY)", 0x401C5820,
         "bytes(28)"),
    ]),
    # The host's mount table and file handles.
    _p("listmount", "sc(458, ctypes.create_string_buffer(32), ctypes.create_string_buffer(8192), "
       "1024, 0)", SECCOMP, (EPERM, ENOSYS)),
    _p("statmount", "sc(457, ctypes.create_string_buffer(32), ctypes.create_string_buffer(4096), "
       "4096, 0)", SECCOMP, (EPERM, ENOSYS)),
    _p("name_to_handle_at_input",
       "sc(303, -100, P['input'].encode(), ctypes.create_string_buffer(136), "
       "ctypes.create_string_buffer(4), 0)", SECCOMP),
    _p("open_tree_root", "sc(428, -100, b'/', 1)", SECCOMP),
    _p("fsopen_tmpfs", "sc(430, b'tmpfs', 0)", SECCOMP),
    _p("file_setattr_input",
       "sc(469, -100, P['input'].encode(), ctypes.create_string_buffer(24), 24, 0)", SECCOMP,
       (EPERM, ENOSYS)),
    # Out of the client's process group, out of reach of its killpg.
    _p("setsid", "os.setsid()", SECCOMP),
    _p("setpgid_own_group", "os.setpgid(0, 0)", SECCOMP),
    # Other processes through /proc: the namespace's fresh /proc has no entry for them.
    *(_p(f"stat_proc_{n}", f"os.stat(f\"/proc/{{P['{who}']}}\")", "proc", (ENOENT,))
      for n, who in [("client", "client"), ("victim", "victim")]),
    _p("readlink_proc_client_exe", "os.readlink(f\"/proc/{P['client']}/exe\")",
       "proc landlock", (ENOENT, EACCES, EPERM)),
    # The terminal: the worker has none (its own session, pipes for 0, 1 and 2).
    _p("tiocsti_stdin", "__import__('fcntl').ioctl(0, 0x5412, b'x')", "", (errno.ENOTTY,)),
    _p("tiocsti_stderr", "__import__('fcntl').ioctl(2, 0x5412, b'x')", "", (errno.ENOTTY,)),
    _p("open_dev_tty", "open('/dev/tty', 'wb').write(b'x')", "", (errno.ENXIO, EACCES, *ROOTED)),
    # --- the host's tree (issue 23): only the fresh root hides it from stat and readlink ---
    *(_p(f"stat_{n}", f"os.stat({path})", "root", (ENOENT,)) for n, path in [
        ("decoy_key", "P['decoy']"), ("ssh_folder", "P['ssh']"),
        ("neighbour", "P['neighbour']"), ("repo_file", "P['repo_file']"),
        ("listener_socket", "P['stream']"), ("etc_passwd", "'/etc/passwd'"),
        ("dev_shm", "'/dev/shm'"), ("sys_class_net", "'/sys/class/net'"),
        ("repo_git", "P['repo_git']"),
    ]),
    _p("access_decoy_key", "if not os.access(P['decoy'], os.F_OK):\n"
       "    raise OSError(errno.ENOENT, 'not there')", "root", (ENOENT,)),
    _p("readlink_host_symlink", "os.readlink(P['host_link'])", "root", (ENOENT,)),
    _p("lstat_host_symlink", "os.lstat(P['host_link'])", "root", (ENOENT,)),
    # A folder the root keeps as a skeleton (it holds the interpreter or an input) is a folder
    # of the root's tmpfs, not the host's: another device and inode.
    *(_p(f"stat_host_folder_{n}",
         f"st = os.stat({path!r})\n"
         f"if (st.st_dev, st.st_ino) != tuple(P['host_ids'][{path!r}]):\n"
         "    raise OSError(errno.ENOENT, 'not the host folder')", "root", (ENOENT,))
      for n, path in HOST_FOLDERS.items()),
    _p("list_root_host_names",
       "if not set(os.listdir('/')) & set(P['host_root_only']):\n"
       "    raise OSError(errno.ENOENT, 'no host-only name')", FILES, (*FS, ENOENT)),
    *(_p(f"mount_table_{n}",
         f"points = {{line.split()[{field}] for line in open('/proc/self/{n}')}}\n"
         "if not points & set(P['host_mounts']):\n"
         "    raise OSError(errno.ENOENT, 'no host mount')", FILES, (*FS, ENOENT))
      for n, field in [("mountinfo", 4), ("mounts", 1)]),
]

# Harmless actions that only a missing layer allows: run where that layer is off, each must
# succeed, proving the level reported is not a claim only.
WITNESSES = {
    "landlock": _p("witness_list_root", "os.listdir('/')", LANDLOCK, FS),
    "root": _p("witness_stat_neighbour", "os.stat(P['neighbour'])", "root", (ENOENT,)),
    "seccomp": _p("witness_getxattr_input", "os.getxattr(P['input'], 'user.keep')", SECCOMP,
                  (errno.EOPNOTSUPP,)),
    "namespaces": _p(
        "witness_real_uid",
        f"if os.getuid() == {OVERFLOW_UID}:\n"
        "    raise OSError(errno.EPERM, 'inside a fresh user namespace')", "namespaces"),
    "pidns": _p("witness_parent_outside",
                "if os.getppid() in (0, 1):\n"
                "    raise OSError(errno.EPERM, 'the child of a namespace init')", "pidns"),
    "proc": _p("witness_stat_client", "os.stat(f\"/proc/{P['client']}\")", "proc", (ENOENT,)),
}

THREAD_BOMB = _p("thread_bomb", """
    import threading
    threading.stack_size(65536)
    hold = threading.Event()
    started = 0
    try:
        for started in range(5000):
            threading.Thread(target=hold.wait, daemon=True).start()
    except RuntimeError as exc:
        hold.set()
        raise OSError(errno.EAGAIN, f'started {started} threads: {exc}') from None
    hold.set()
    """, "threads", (errno.EAGAIN,))  # RLIMIT_NPROC answers EAGAIN

LEVELS = {"full": "", "no-namespaces": "namespaces", "no-pidns": "pidns", "no-proc": "proc",
          "no-root": "root",
          "no-threads": "threads", "no-landlock": "landlock", "no-seccomp": "seccomp"}


class Scene:
    """The world outside the jail: an input, a decoy key, listeners and a victim process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / "models"
        self.folder.mkdir()
        self.ssh = root / "home" / ".ssh"
        self.ssh.mkdir(parents=True, mode=0o700)
        self.decoy = self.ssh / "id_rsa"
        self.decoy.write_text("-----BEGIN OPENSSH PRIVATE KEY----- decoy\n")
        self.decoy.chmod(0o600)
        (self.folder / "neighbour.txt").write_text("another model's notes\n")
        self.canary = self.folder / "CANARY_EXECUTED"
        (self.folder / "host_link").symlink_to("/etc/passwd")
        tag = f"ckpt-probe-{os.getpid()}-{id(self)}"
        self.outside = [Path("/tmp") / tag, Path("/dev/shm") / tag]
        self.listeners = self._listen(tag)
        self.victim = subprocess.Popen(["sleep", "120"], start_new_session=True)

    def _listen(self, tag: str) -> dict[str, socket.socket]:
        out = {}
        out["stream"] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        out["stream"].bind(str(self.root / "stream.sock"))
        out["stream"].listen(8)
        out["dgram"] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        out["dgram"].bind(str(self.root / "dgram.sock"))
        out["abstract"] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        out["abstract"].bind("\0" + tag)
        out["abstract"].listen(8)
        out["abstract_dgram"] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        out["abstract_dgram"].bind("\0" + tag + "-dgram")
        out["tcp"] = socket.create_server(("127.0.0.1", 0))
        out["udp"] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        out["udp"].bind(("127.0.0.1", 0))
        for sock in out.values():
            sock.setblocking(False)
        return out

    def params(self, inputs: list[Path]) -> dict:
        """What the probes aim at, as the `P` dict they see."""
        return {
            "input": str(inputs[0]), "folder": str(self.folder), "ssh": str(self.ssh),
            "decoy": str(self.decoy), "neighbour": str(self.folder / "neighbour.txt"),
            "canary": str(self.canary),
            "repo_file": str(REPO / "pyproject.toml"), "tmp_target": str(self.outside[0]),
            "shm_target": str(self.outside[1]), "client": os.getpid(),
            "victim": self.victim.pid, "client_addr": id(self.outside),
            "stream": str(self.root / "stream.sock"), "dgram": str(self.root / "dgram.sock"),
            "abstract": self.listeners["abstract"].getsockname(),
            "abstract_dgram": self.listeners["abstract_dgram"].getsockname(),
            "tcp_port": self.listeners["tcp"].getsockname()[1],
            "udp_port": self.listeners["udp"].getsockname()[1],
            "host_link": str(self.folder / "host_link"), "repo_git": str(REPO / ".git"),
            "host_ids": {p: [os.stat(p).st_dev, os.stat(p).st_ino]
                         for p in HOST_FOLDERS.values()},
            "host_root_only": [n for n in os.listdir("/")
                               if not any(b.split("/")[1] == n for b in BOUND)
                               and n not in ("proc", "dev", "etc", "sys", "tmp")],
            "host_mounts": self.host_mounts(),
        }

    def host_mounts(self) -> list[str]:
        """The host's mount points the fresh root would not show (not bound, not /proc)."""
        with open("/proc/self/mountinfo") as fh:
            points = {line.split()[4] for line in fh}
        return sorted(p for p in points if p != "/" and not _inside(p, [*BOUND, str(self.root)]))

    def received(self) -> dict[str, str]:
        """Whatever reached a listener (nothing may)."""
        got = {}
        for name, sock in self.listeners.items():
            try:
                if sock.type == socket.SOCK_STREAM:
                    conn, _ = sock.accept()
                    got[name] = f"connection, first bytes {conn.recv(64)!r}"
                else:
                    got[name] = repr(sock.recv(64))
            except BlockingIOError:
                pass
        return got

    def close(self) -> None:
        self.victim.kill()
        self.victim.wait()
        for sock in self.listeners.values():
            sock.close()
        for path in self.outside:
            path.unlink(missing_ok=True)


def snapshot(paths: list[Path]) -> dict[str, tuple]:
    """Content, mode, owner, mtime and extended attributes of each path."""
    out = {}
    for path in paths:
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        xattrs = {name: os.getxattr(path, name) for name in os.listxattr(path)}
        out[str(path)] = (digest, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                          st.st_mtime_ns, xattrs)
    return out


def run_probes(scene: Scene, probes: list[Probe], name: str, **kwargs) -> dict:
    """One worker runs every probe of the group; each outcome keyed by the probe's name."""
    group = scene.root / name
    group.mkdir()
    inputs = [group / f"{i:03d}-{p.name}.pkl" for i, p in enumerate(probes)]
    for path in inputs:
        path.touch()
    params = scene.params(inputs)
    for path, probe in zip(inputs, probes, strict=True):
        path.write_bytes(exec_pickle(f"{PRELUDE}\nP = {params!r}\n{probe.body}\n"))
    os.setxattr(inputs[0], "user.keep", b"1")
    before = snapshot(inputs)
    request = {"op": "selftest-payload", "paths": [str(p) for p in inputs]}
    result = run_job(request, timeout=120, **kwargs)
    outcomes = dict(zip((p.name for p in probes), result["outcomes"], strict=True))
    return {"sandbox": result["sandbox"], "outcomes": outcomes, "timing": result["timing"],
            "inputs_changed": before != snapshot(inputs)}


def active_layers(sandbox: dict) -> set[str]:
    """Names of the layers the handshake says are active."""
    return {a.split(":")[0] for a in sandbox["active"]}


def not_refused(probe: Probe, outcome: dict) -> str | None:
    """Why the outcome is not the jail's refusal, or None when it is."""
    if outcome["ok"]:
        return f"{probe.name}: succeeded ({outcome['value']})"
    if outcome["errno"] not in probe.errnos:
        return f"{probe.name}: {outcome['error']} errno {outcome['errno']}: {outcome['message']}"
    return None


WORKERS = ("cold", "forked")
"""How a job's worker starts: `python -m inspector.sandbox.worker.main`, or forked by the warm
fork server (forkserver_fixtures); every probe runs against both."""


def _route(mp: pytest.MonkeyPatch, request: pytest.FixtureRequest, worker: str) -> None:
    if worker == "forked":
        mp.setattr(launch, "_fork_server", request.getfixturevalue("fork_server_handle"))


@pytest.fixture(scope="module", params=[(level, worker) for worker in WORKERS
                                        for level in LEVELS], ids="-".join)
def probed(request, tmp_path_factory):
    """The probe suite run once at one jail level, in cold or forked workers."""
    level, worker = request.param
    mp = pytest.MonkeyPatch()
    mp.setenv(client.SELFTEST_ENV, "1")
    mp.setenv(client.DISABLE_ENV, LEVELS[level])
    _route(mp, request, worker)
    scene = Scene(tmp_path_factory.mktemp(f"probes-{level}-{worker}"))
    watched = [scene.decoy, scene.ssh, scene.folder, scene.folder / "neighbour.txt"]
    try:
        before = snapshot(watched)
        handshake = run_probes(scene, [WITNESSES["namespaces"]], "handshake")["sandbox"]
        active = active_layers(handshake)
        chosen = [p for p in PROBES if not p.guards or p.guards & active]
        witnesses = [w for layer, w in WITNESSES.items() if layer not in active]
        main = run_probes(scene, chosen + witnesses, "main")
        try:
            bomb = run_probes(scene, [THREAD_BOMB], "threads")
        except SandboxError as exc:
            bomb = {"code": exc.code, "sandbox": exc.sandbox}
        assert main["timing"]["worker"] == worker
        yield {"level": level, "scene": scene, "main": main, "bomb": bomb,
               "chosen": chosen, "witnesses": witnesses, "active": active,
               "handshake": handshake, "before": before, "after": snapshot(watched)}
    finally:
        scene.close()
        mp.undo()
    assert not scene.canary.exists(), "a probe ran a program: canary written"


def test_the_level_is_reported_truthfully(probed):
    sandbox, level = probed["main"]["sandbox"], probed["level"]
    disabled = LEVELS[level]
    assert sandbox == probed["handshake"]
    if disabled:
        assert sandbox["level"] == "partial", sandbox
        assert disabled not in probed["active"] and disabled in sandbox["missing"]
        assert disabled in sandbox["description"]
    elif sandbox["level"] != "full":
        pytest.skip(f"this kernel reaches only {sandbox['description']}")
    assert sandbox["level"] == ("full" if not sandbox["missing"] else "partial")


def test_every_probe_is_refused(probed):
    outcomes = probed["main"]["outcomes"]
    failures = [why for p in probed["chosen"] if (why := not_refused(p, outcomes[p.name]))]
    ran = len(probed["chosen"]) + 1  # and the thread bomb, in a worker of its own
    print(f"{probed['level']}: {ran} probes refused, {len(failures)} not")
    assert not failures, "\n".join(failures)
    if probed["level"] == "full":
        assert ran >= 170


def test_each_missing_layer_really_is_missing(probed):
    outcomes = probed["main"]["outcomes"]
    for witness in probed["witnesses"]:
        assert outcomes[witness.name]["ok"], (witness.name, outcomes[witness.name])
    if not probed["witnesses"]:
        assert outcomes.get("witness_real_uid") is None


def test_nothing_reached_a_listener_outside(probed):
    assert probed["scene"].received() == {}


def test_input_decoy_key_and_folders_are_untouched(probed):
    assert probed["after"] == probed["before"]
    assert not probed["main"]["inputs_changed"]
    for path in probed["scene"].outside:
        assert not path.exists(), f"{path} was created"
    leftovers = {"created", "moved", "linked", "sym", "newdir", "fifo"}
    assert not leftovers & set(os.listdir(probed["scene"].folder))


def test_other_processes_are_untouched(probed):
    victim = probed["scene"].victim
    assert victim.poll() is None, "the victim process was killed"
    assert os.getpriority(os.PRIO_PROCESS, victim.pid) == os.getpriority(os.PRIO_PROCESS, 0)
    assert resource.prlimit(victim.pid, resource.RLIMIT_NOFILE)[0] > 8


def test_a_thread_bomb_stops_at_the_cap(probed):
    bomb = probed["bomb"]
    if "code" in bomb:  # no kernel cap here: the client's watchdog killed the worker
        assert bomb["code"] == "thread_limit", bomb
        assert "threads" in bomb["sandbox"]["missing"], bomb["sandbox"]
        return
    outcome = bomb["outcomes"]["thread_bomb"]
    assert not_refused(THREAD_BOMB, outcome) is None, outcome
    cap = int(next(a for a in bomb["sandbox"]["active"]
                   if a.startswith("threads:nproc=")).split("=")[1].split()[0])
    started = int(outcome["message"].split("started ")[1].split()[0])
    assert started < cap


# --- a worker that kills itself, or breaks the protocol ---------------------------------


@pytest.fixture(params=WORKERS)
def selftest(request, monkeypatch):
    monkeypatch.setenv(client.SELFTEST_ENV, "1")
    monkeypatch.delenv(client.DISABLE_ENV, raising=False)
    _route(monkeypatch, request, request.param)


def _single(tmp_path: Path, body: str, **kwargs) -> dict:
    path = tmp_path / "probe.pkl"
    path.write_bytes(exec_pickle(f"{PRELUDE}\n{textwrap.dedent(body).strip()}\n"))
    return run_job({"op": "selftest-payload", "paths": [str(path)]}, timeout=120, **kwargs)


EMITTER = ("import gc, sys\n"
           "emit = next(o for o in gc.get_objects() if type(o).__name__ == '_Emitter')\n")


def test_exec_kills_the_worker_and_runs_nothing(tmp_path, selftest, canary):
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, f"os.execv('/bin/touch', ['touch', {str(canary)!r}])")
    if SECCOMP not in active_layers(info.value.sandbox):
        pytest.skip("seccomp unavailable: execve is not blocked")
    assert info.value.code == "seccomp_violation", info.value.message


def test_a_forged_jail_line_is_a_violation_and_the_level_stays(tmp_path, selftest,
                                                               monkeypatch):
    monkeypatch.setenv(client.DISABLE_ENV, "landlock")
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, EMITTER + "emit({'type': 'jail', 'level': 'full', 'active': [], "
                "'missing': {}})")
    assert info.value.code == "protocol_violation"
    assert "second jail line" in info.value.message
    assert info.value.sandbox["level"] == "partial"  # the handshake's, not the forgery's


def test_a_forged_result_without_the_nonce_is_a_violation(tmp_path, selftest):
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, EMITTER + "emit({'type': 'result', 'outcomes': ['forged']})")
    assert info.value.code == "protocol_violation" and "nonce" in info.value.message


def test_a_forged_result_with_the_stolen_nonce_is_caught_by_the_real_one(tmp_path, selftest):
    steal = """
        frame = sys._getframe()
        while 'nonce' not in frame.f_locals:
            frame = frame.f_back
        emit({'type': 'result', 'outcomes': ['forged'], 'nonce': frame.f_locals['nonce']})
        """
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, EMITTER + textwrap.dedent(steal))
    assert info.value.code == "protocol_violation"
    assert "after the result" in info.value.message


def test_a_line_that_is_not_json_is_a_violation(tmp_path, selftest):
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, EMITTER + "emit._stream.write('not json\\n'); emit._stream.flush()")
    assert info.value.code == "protocol_violation"


def test_a_line_nested_too_deep_for_the_json_parser_is_a_violation(tmp_path):
    # json.loads raises RecursionError, not ValueError, on 200,000 nested lists
    line = b'{"type": "progress", "deep": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    path = tmp_path / "protocol"
    path.write_bytes(line)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(events.ProtocolViolation, match="unparsable"):
            list(events.read_events(fd))
    finally:
        os.close(fd)


def test_a_flood_of_lines_beyond_the_total_bound_is_a_violation(tmp_path, selftest,
                                                                monkeypatch):
    monkeypatch.setattr(events, "MAX_OUTPUT_BYTES", 4 << 20)
    flood = ("line = json.dumps({'type': 'progress', 'stage': 'x' * 900, 'done': 0, "
             "'total': 0}) + '\\n'\nfor _ in range(20000):\n    emit._stream.write(line)\n"
             "emit._stream.flush()")
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, "import json\n" + EMITTER + flood)
    assert info.value.code == "protocol_violation" and "MiB of output" in info.value.message


def _client_growth(tmp_path: Path, flood: str) -> dict:
    """Run `flood` in the jail from a fresh client process; its outcome and peak RSS growth."""
    payload = tmp_path / "flood.pkl"
    payload.write_bytes(exec_pickle(PRELUDE + EMITTER + textwrap.dedent(flood)))
    # VmHWM, not ru_maxrss: the latter keeps the forking test process's peak across exec.
    script = textwrap.dedent(f"""
        import json
        from inspector.sandbox.host.client import SandboxError, run_job
        def peak_kb():
            status = open("/proc/self/status").read()
            return int(status.split("VmHWM:")[1].split()[0])
        before = peak_kb()
        code = message = None
        try:
            run_job({{"op": "selftest-payload", "paths": [{str(payload)!r}]}}, timeout=120)
        except SandboxError as exc:
            code, message = exc.code, exc.message
        print(json.dumps({{"code": code, "message": message, "grew_kb": peak_kb() - before}}))
        """)
    env = {**os.environ, client.SELFTEST_ENV: "1"}
    env.pop(client.DISABLE_ENV, None)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=300, check=True)
    report = json.loads(out.stdout)
    print("client peak RSS growth:", report["grew_kb"] // 1024, "MiB")
    return report


def test_an_oversized_line_is_cut_off_and_the_client_stays_small(tmp_path):
    """1.5 GiB without a newline: the client kills the worker and its RSS stays bounded."""
    report = _client_growth(tmp_path, """
        fd = emit._stream.fileno()
        block = b'x' * (1 << 20)
        for _ in range(1536):
            os.write(fd, block)
        """)
    assert report["code"] == "protocol_violation", report
    assert "line longer than" in report["message"]
    assert report["grew_kb"] < 512 * 1024  # one bounded line, not the 1.5 GiB sent


def test_a_flood_on_stderr_keeps_only_a_short_tail(tmp_path):
    """1 GiB on stderr without a newline: the job still ends normally, the client stays small."""
    report = _client_growth(tmp_path, """
        block = b'x' * (1 << 20)
        for _ in range(1024):
            os.write(2, block)
        """)
    assert report["code"] is None, report  # stderr is for diagnostics, not the protocol
    assert report["grew_kb"] < 256 * 1024


# --- the required level ---------------------------------------------------------------


def test_process_only_is_refused_by_default_before_the_payload_runs(tmp_path, selftest,
                                                                    monkeypatch, canary):
    monkeypatch.setenv(client.DISABLE_ENV, "namespaces,landlock,seccomp")
    body = f"open({str(canary)!r}, 'w').close()"
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, body)
    assert info.value.code == "jail_refused"
    assert info.value.sandbox["level"] == "process-only"
    assert "--require-jail any" in info.value.message
    assert not canary.exists()
    harmless = _single(tmp_path, f"if os.getuid() != {OVERFLOW_UID}: raise OSError(1, 'x')",
                       require_jail="any")
    assert harmless["sandbox"]["level"] == "process-only"
    assert harmless["outcomes"][0]["ok"] is False  # no user namespace either: the real uid


def test_without_namespaces_landlock_and_seccomp_still_make_partial(tmp_path, selftest,
                                                                    monkeypatch):
    monkeypatch.setenv(client.DISABLE_ENV, "namespaces")
    result = _single(tmp_path, "pass")
    assert result["sandbox"]["level"] == "partial"
    assert {"landlock", "seccomp"} <= active_layers(result["sandbox"])
    with pytest.raises(SandboxError) as info:
        _single(tmp_path, "pass", require_jail="full")
    assert info.value.code == "jail_refused" and "--require-jail partial" in info.value.message


def test_the_disable_switch_is_ignored_without_the_selftest_switch(monkeypatch):
    monkeypatch.delenv(client.SELFTEST_ENV, raising=False)
    monkeypatch.setenv(client.DISABLE_ENV, "namespaces,landlock,seccomp")
    assert client.DISABLE_ENV not in client.worker_env()
    # Even handed the switch directly, a worker without the self-test switch ignores it.
    env = {**client.worker_env(), client.DISABLE_ENV: "namespaces,landlock,seccomp"}
    worker = subprocess.Popen([sys.executable, "-I", "-m", client.WORKER_MODULE], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
    try:
        worker.stdin.write(b'{"op": "inspect", "path": "/dev/null"}\n')
        worker.stdin.flush()
        handshake = json.loads(worker.stdout.readline())
    finally:
        worker.kill()
        worker.communicate()
    assert handshake["type"] == "jail"
    assert "self-test" not in json.dumps(handshake["missing"]), handshake
