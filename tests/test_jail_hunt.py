"""Escapes found by a hunt inside the jailed worker, each pinned by a test (cold and forked).

Like tests/test_jail_probes.py, every payload is Python source the test-only
`selftest-payload` operation unpickles with plain `pickle` inside the real jail; a payload
finishes normally only when its action succeeded. What these add to the probe suite:

- System V IPC lives in the IPC namespace, not the file system: Landlock never sees it. A
  worker in the host's IPC namespace attached the user's own shared-memory segments (an X11
  MIT-SHM image of another program's window, say) and created segments that outlive it,
  holding memory no rlimit of the worker counts, after the worker and its client are gone.
- memfd_create: a conversion raises RLIMIT_FSIZE to its output's bound, and every anonymous
  memory file could then grow to that bound, outside the address-space limit.
- inotify and fanotify marks are placed on a path without opening it, so Landlock did not
  refuse a watch on a folder outside the jail (names of the files created or opened there).
- A cold worker whose client was killed (SIGKILL, or SIGTERM's default action) kept running
  with nobody left to kill it; a forked worker already dies with its server.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from jail_payloads import PRELUDE, X86_64_LINUX, alive, exec_pickle

from inspector.sandbox.host import client

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytest_plugins = ("forkserver_fixtures", "jail_payloads")

pytestmark = X86_64_LINUX

REPO = Path(__file__).resolve().parent.parent
IPC_CREAT, IPC_RMID, SHM_RDONLY, IPC_PRIVATE = 0o1000, 0, 0o10000, 0


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    return libc


def _segments() -> list[dict]:
    """The System V shared-memory segments of this IPC namespace (/proc/sysvipc/shm)."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    names = lines[0].split()
    return [dict(zip(names, line.split(), strict=False)) for line in lines[1:]]


def test_the_users_sysv_shared_memory_is_out_of_reach(tmp_path, jailed):
    """A 0600 segment of the user's (what an X11 client shares with the server) stays unread."""
    libc = _libc()
    shmid = libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o600)
    if shmid < 0:
        pytest.skip(f"no System V shared memory here: {os.strerror(ctypes.get_errno())}")
    try:
        address = libc.shmat(shmid, None, 0)
        ctypes.memmove(address, b"SECRET-WINDOW-PIXELS", 20)
        libc.shmdt(ctypes.c_void_p(address))
        outcome = jailed(tmp_path, f"""
            libc.shmat.restype = ctypes.c_void_p
            address = libc.shmat({shmid}, None, {SHM_RDONLY})
            if address in (None, 2**64 - 1):
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
            ctypes.string_at(address, 20)
            """)
    finally:
        libc.shmctl(shmid, IPC_RMID, None)
    assert not outcome["ok"], f"the jail read the user's segment: {outcome['value']}"
    assert outcome["errno"] in (errno.EPERM, errno.EINVAL, errno.EIDRM), outcome
    assert "SECRET" not in outcome["message"]


def test_no_sysv_segment_is_created_to_outlive_the_worker(tmp_path, jailed):
    """64 MiB of shared memory, touched page by page, must not be made, let alone kept."""
    outcome = jailed(tmp_path, f"""
        libc.shmat.restype = ctypes.c_void_p
        shmid = libc.shmget({IPC_PRIVATE}, 64 << 20, {IPC_CREAT | 0o600})
        if shmid < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        address = libc.shmat(shmid, None, 0)
        if address not in (None, 2**64 - 1):
            ctypes.memset(address, 1, 64 << 20)
            libc.shmdt(ctypes.c_void_p(address))
        raise LookupError(f'made {{os.getpid()}} {{shmid}}')
        """)
    if outcome.get("error") == "LookupError":  # the payload got its segment: say where it is
        pid = int(outcome["message"].split()[1])
        left = [s for s in _segments() if int(s["cpid"]) == pid]
        for segment in left:  # made by this test's worker: removed, not left to the machine
            _libc().shmctl(int(segment["shmid"]), IPC_RMID, None)
        assert not left, f"the worker left {len(left)} segment(s) behind: {left}"
        pytest.fail(f"the jail made a shared-memory segment: {outcome['message']}")
    assert outcome["errno"] == errno.EPERM, outcome


def test_posix_message_queues_are_refused(tmp_path, jailed):
    outcome = jailed(tmp_path, "sc(240, b'ckpt-hunt-mq', os.O_CREAT | os.O_RDWR, 0o600, 0)")
    assert not outcome["ok"], outcome
    assert outcome["errno"] in (errno.EPERM, errno.EACCES), outcome


def test_memfd_cannot_hold_memory_beside_a_conversion(tmp_path, jailed):
    """With a conversion's file-size bound, each memfd could hold that much, uncounted."""
    outcome = jailed(tmp_path, """
        fd = os.memfd_create('hoard')
        for _ in range(16):
            os.write(fd, b'x' * (1 << 20))
        """, output_bytes=64 << 20)
    assert not outcome["ok"], "a 16 MiB memfd was filled inside the jail"
    assert outcome["errno"] in (errno.ENOSYS, errno.EPERM), outcome


def test_memfd_secret_is_refused(tmp_path, jailed):
    """Its pages stay in the file once unmapped: the same hoard as a memfd's."""
    outcome = jailed(tmp_path, "fd = sc(447, 0)\nos.ftruncate(fd, 16 << 20)",
                     output_bytes=64 << 20)
    assert not outcome["ok"], outcome
    assert outcome["errno"] in (errno.ENOSYS, errno.EPERM), outcome


@pytest.mark.parametrize("body", [
    "fd = sc(294, 0)\nsc(254, fd, {folder!r}.encode(), 0xfff)",  # inotify_init1, add_watch
    "sc(300, 0x200, 0)",  # fanotify_init(FAN_REPORT_FID): unprivileged since Linux 5.13
], ids=["inotify", "fanotify"])
def test_no_watch_on_a_folder_outside_the_jail(tmp_path, jailed, body):
    outside = tmp_path / "home"
    outside.mkdir()
    outcome = jailed(tmp_path, body.format(folder=str(outside)))
    assert not outcome["ok"], f"a watch outside the jail was placed: {outcome['value']}"
    assert outcome["errno"] == errno.EPERM, outcome


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def test_a_cold_worker_dies_with_its_client(tmp_path):
    """The client killed mid-job (no finally runs): its sleeping worker must not live on."""
    payload = tmp_path / "sleep.pkl"
    payload.write_bytes(exec_pickle("import time\ntime.sleep(300)\n"))
    script = textwrap.dedent(f"""
        from inspector.sandbox.host import client
        client.run_job({{"op": "selftest-payload", "paths": [{str(payload)!r}]}}, timeout=600,
                       on_event=lambda e: print("started", flush=True))
        """)
    env = {**os.environ, client.SELFTEST_ENV: "1"}
    env.pop(client.DISABLE_ENV, None)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              env=env, cwd=REPO, text=True)
    workers: list[int] = []
    try:
        assert parent.stdout.readline().strip() == "started", "the job never started"
        workers = _children(parent.pid)
        assert workers, "no worker found"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 60
    while any(map(alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in workers if alive(pid)]
    for pid in left:  # ours: the worker this test started; do not leave it running
        os.kill(pid, signal.SIGKILL)
    assert not left, "the worker outlived its killed client"


def test_the_worker_holds_no_capability(tmp_path, jailed):
    """A fresh user namespace gives its creator every capability inside it; none may stay."""
    outcome = jailed(tmp_path, """
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        sc(125, header, data)  # capget
        if data[0] | data[1] | data[3] | data[4]:
            raise LookupError(f'effective {data[3] << 32 | data[0]:#x}')
        """)
    assert outcome["ok"], outcome


ROOT_WITHOUT_USERNS = """
import ctypes, errno, json
from inspector.sandbox.worker import jail

class Libc:
    \"\"\"libc, but the kernel refuses a user namespace (user.max_user_namespaces=0).\"\"\"
    def __init__(self, real):
        self._real = real
    def __getattr__(self, name):
        return getattr(self._real, name)
    def unshare(self, flags):
        if flags & jail.CLONE_NEWUSER:
            ctypes.set_errno(errno.ENOSPC)
            return -1
        return self._real.unshare(flags)

jail.libc = Libc(jail.libc)
level = jail.apply_jail(jail.JailConfig(read_paths=[]))
libc = ctypes.CDLL(None, use_errno=True)
header = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)()
assert libc.syscall(ctypes.c_long(125), header, data) == 0  # capget
# syslog(SYSLOG_ACTION_SIZE_BUFFER): needs CAP_SYSLOG with kernel.dmesg_restrict, else none
kernel_log = libc.syscall(ctypes.c_long(103), 10, None, 0)
print(json.dumps({"level": level["level"], "active": level["active"],
                  "effective": data[3] << 32 | data[0],
                  "kernel_log": ctypes.get_errno() if kernel_log < 0 else "read"}))
"""


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0,
                    reason="only root keeps real capabilities when its user namespace fails")
def test_root_without_a_user_namespace_keeps_no_capability():
    """The jail still says `full` (a network namespace, Landlock, seccomp) for root whose user
    namespace the kernel refused; its real capabilities (reboot, raw I/O, the kernel log,
    real-time scheduling) must be gone all the same."""
    out = subprocess.run([sys.executable, "-I", "-c", ROOT_WITHOUT_USERNS], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert any("user namespace refused" in a for a in report["active"]), report
    assert report["effective"] == 0, f"capabilities kept: {report}"
    assert report["kernel_log"] == errno.EPERM, report


SCHEDULING_CLIENT = """
import json, os, resource, sys
sys.path.insert(0, {tests!r})
from inspector.sandbox.host import client
# An audio-group user (limits.conf: @audio - rtprio 95, - nice -19), as many desktops set up.
resource.setrlimit(resource.RLIMIT_RTPRIO, (95, 95))
resource.setrlimit(resource.RLIMIT_NICE, (40, 40))
result = client.run_job({{"op": "selftest-payload", "paths": [{payload!r}]}}, timeout=120)
print(json.dumps(result["outcomes"]))
"""


@pytest.mark.parametrize("body", [
    "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))",
    "os.nice(-5)",
], ids=["realtime", "higher_priority"])
def test_the_worker_cannot_raise_its_scheduling_above_the_users(tmp_path, body):
    """A real-time worker spinning on every core starves the desktop; rlimits a user may hold
    for audio (RLIMIT_RTPRIO, RLIMIT_NICE) must not pass into the jail."""
    payload = tmp_path / "sched.pkl"
    payload.write_bytes(exec_pickle(PRELUDE + body + "\n"))
    script = SCHEDULING_CLIENT.format(tests=str(REPO / "tests"), payload=str(payload))
    env = {**os.environ, client.SELFTEST_ENV: "1"}
    env.pop(client.DISABLE_ENV, None)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and "not allowed to raise maximum limit" in out.stderr:
        pytest.skip("this user may not raise RLIMIT_RTPRIO/RLIMIT_NICE to set the scene")
    assert out.returncode == 0, out.stderr
    outcome = json.loads(out.stdout)[0]
    assert not outcome["ok"], f"the worker raised its scheduling: {body}"
    assert outcome["errno"] in (errno.EPERM, errno.EACCES), outcome


def test_no_lease_on_an_input(tmp_path, jailed):
    """A read lease stalls whoever opens the file for writing (a training run saving over the
    checkpoint being inspected) for the kernel's lease-break-time, 45 s by default."""
    outcome = jailed(tmp_path, f"""
        import fcntl
        fd = os.open({str(tmp_path / "payload.pkl")!r}, os.O_RDONLY)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        """)
    assert not outcome["ok"], "the worker took a lease on its input"
    assert outcome["errno"] == errno.EPERM, outcome
