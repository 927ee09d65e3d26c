"""The jail by argument, the PID namespace and the client's parse bounds (issue 23).

Three kinds of test:
- the seccomp filter run on synthetic `struct seccomp_data` by a small BPF interpreter, so
  every argument rule is checked on its near variants (each socket type and flag, each fcntl
  command, a pointer's high word) without a process;
- payloads inside the real jailed worker, cold and forked, for what must still work (a stream
  socketpair, O_NONBLOCK) and for the PID namespace (the worker is PID 2 beside an init, and
  it dies with its client even after clearing its own death signal; with the PID namespace
  switched off the same payload outlives its client, as the level says);
- protocol lines built to cost the client the most memory per byte, each refused (or, at the
  bounds, admitted) with the client's peak RSS growth measured in a fresh process.

The hostile probes of the same issue (datagram socketpairs, F_SETOWN on every kind of
descriptor, O_ASYNC, listmount, file handles, /proc of other processes) are in
tests/test_jail_probes.py's PROBES, so they run at every level and in both workers.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jail_payloads import X86_64_LINUX, alive, exec_pickle
from test_jail_probes import EMITTER, REPO, _client_growth

from inspector.sandbox.host import client
from inspector.sandbox.worker import jail, seccomp

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytest_plugins = ("forkserver_fixtures", "jail_payloads")

pytestmark = X86_64_LINUX

PID = 4242
ALLOW = 0x7FFF0000
NRS = seccomp._SYSCALLS["x86_64"]


def run_filter(prog: list[tuple[int, int, int, int]], name: str, *args: int,
               arch: int = 0xC000003E) -> int:
    """What the classic-BPF program returns for this call (a small interpreter of the
    instructions `seccomp_program` emits)."""
    words = [*args, *[0] * (6 - len(args))]
    data = struct.pack("=iIQ6Q", NRS[name], arch, 0, *(w & (2**64 - 1) for w in words))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:
            acc &= k
        elif code == 0x05:
            pc += k
        elif code in (0x15, 0x35, 0x45):
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if hit else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unknown BPF instruction {code:#x}")


def refused_with(prog, name: str, *args: int) -> int | None:
    """The errno the filter answers, None when it allows the call."""
    ret = run_filter(prog, name, *args)
    if ret == ALLOW:
        return None
    assert ret & 0xFFFF0000 == 0x00050000, f"{name}{args}: {ret:#x}"
    return ret & 0xFFFF


@pytest.fixture(scope="module")
def prog():
    return seccomp.seccomp_program("x86_64", PID)


SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000


@pytest.mark.parametrize(("family", "kind", "expected"), [
    (1, 1, None), (1, 1 | SOCK_CLOEXEC, None), (1, 1 | SOCK_NONBLOCK | SOCK_CLOEXEC, None),
    (1, 2, errno.EAFNOSUPPORT), (1, 2 | SOCK_CLOEXEC, errno.EAFNOSUPPORT),
    (1, 3, errno.EAFNOSUPPORT), (1, 4, errno.EAFNOSUPPORT), (1, 5, errno.EAFNOSUPPORT),
    (1, 5 | SOCK_NONBLOCK, errno.EAFNOSUPPORT), (1, 1 | 0x100, errno.EAFNOSUPPORT),
    (2, 1, errno.EAFNOSUPPORT), (1 | 1 << 32, 2, errno.EAFNOSUPPORT),
])
def test_socketpair_is_a_unix_stream_pair_or_nothing(prog, family, kind, expected):
    assert refused_with(prog, "socketpair", family, kind, 0, 0) == expected


@pytest.mark.parametrize(("dest", "expected"), [
    (0, None), (0x7FFF_0000_1000, errno.EPERM), (1 << 32, errno.EPERM), (1, errno.EPERM)])
def test_sendto_passes_only_without_a_destination(prog, dest, expected):
    assert refused_with(prog, "sendto", 3, 0x1000, 5, 0, dest, 110) == expected


@pytest.mark.parametrize(("cmd", "arg", "expected"), [
    (8, PID, errno.EPERM), (8, 0, errno.EPERM), (15, 0x1000, errno.EPERM),
    (10, 15, errno.EPERM), (1026, 0x3F, errno.EPERM), (1024, 0, errno.EPERM),
    (4, 0o20000, errno.EPERM), (4, 0o20000 | 0o4000, errno.EPERM),
    (4, 0o4000, None), (4, 0, None), (3, 0, None), (9, 0, None), (1030, 3, None),
    (2, 1, None), (6, 0x1000, None),
])
def test_fcntl_refuses_owners_signals_notifications_leases_and_o_async(prog, cmd, arg,
                                                                       expected):
    assert refused_with(prog, "fcntl", 5, cmd, arg) == expected


@pytest.mark.parametrize(("cmd", "expected"), [
    (0x5452, errno.EPERM), (0x8901, errno.EPERM), (0x8902, errno.EPERM),
    (0x40086602, errno.EPERM), (0x40046602, errno.EPERM), (0x401C5820, errno.EPERM),
    (0x5421, None), (0x541B, None), (0x80086601, None),  # FIONBIO, FIONREAD, FS_IOC_GETFLAGS
])
def test_ioctl_refuses_the_spellings_of_o_async_and_f_setown_and_file_flags(prog, cmd,
                                                                             expected):
    assert refused_with(prog, "ioctl", 5, cmd, 0) == expected


@pytest.mark.parametrize("name", ["connect", "bind", "listen", "accept", "accept4",
                                  "sendmsg", "sendmmsg", "listmount", "statmount",
                                  "name_to_handle_at", "open_by_handle_at", "open_tree",
                                  "fsopen", "setsid", "setpgid", "file_setattr"])
def test_calls_that_reach_out_are_refused_whatever_their_arguments(prog, name):
    assert refused_with(prog, name, 0, 0, 0) == errno.EPERM


def test_threads_and_own_signals_still_pass(prog):
    assert refused_with(prog, "clone", 0x3D0F00) is None  # glibc's pthread_create flags
    assert refused_with(prog, "clone", 0x01200011) == errno.EPERM  # fork()'s
    assert refused_with(prog, "kill", PID, 15) is None
    assert refused_with(prog, "kill", 1, 0) == errno.EPERM  # the namespace's init
    assert refused_with(prog, "prlimit64", 0, 7) is None


def test_every_rule_is_data_with_its_reason_and_a_number_on_both_architectures():
    refused = [n for r in seccomp.REFUSALS for n in r.names]
    ruled = [r.name for r in seccomp.ARGUMENT_RULES]
    assert len(ruled) == len(set(ruled)), "a second block for one call would never run"
    assert not set(refused) & set(ruled)
    for table in seccomp._SYSCALLS.values():
        assert all(name in table for name in ruled)
    assert all(any(n in t for t in seccomp._SYSCALLS.values()) for n in refused)
    reasons = [r.why for r in (*seccomp.REFUSALS, *seccomp.ARGUMENT_RULES)]
    reasons += list(seccomp.ALLOWED.values())
    assert all(len(why) > 30 for why in reasons)
    allowed = {n.strip() for names in seccomp.ALLOWED for n in names.split(",")}
    assert not allowed & set(refused)


@pytest.mark.parametrize("guard", jail.FULL_GUARDS)
def test_full_needs_every_guard(guard):
    active = [f"{g}:x" for g in jail.FULL_GUARDS]
    assert jail.level_name(active) == "full"
    assert jail.level_name([a for a in active if not a.startswith(guard + ":")]) == "partial"


# --- in the real jail -------------------------------------------------------------------


def test_what_the_worker_needs_still_works(tmp_path, jailed):
    outcome = jailed(tmp_path, """
        import fcntl
        a, b = socket.socketpair()
        a.send(b'ping')
        assert b.recv(4) == b'ping'
        sc(44, a.fileno(), b'pong', 4, 0, 0, 0)  # sendto without an address: send()
        assert b.recv(4) == b'pong'
        fcntl.fcntl(a, fcntl.F_SETFL, os.O_NONBLOCK)
        assert fcntl.fcntl(a, fcntl.F_GETFL) & os.O_NONBLOCK
        assert fcntl.fcntl(a, fcntl.F_GETOWN) == 0
        r, w = os.pipe()
        fcntl.fcntl(r, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        """)
    assert outcome["ok"], outcome


def test_the_worker_sees_only_its_own_pid_namespace(tmp_path, jailed):
    outcome = jailed(tmp_path, """
        seen = [n for n in (1, 2, P_CLIENT) if os.path.exists(f'/proc/{n}')]
        raise LookupError(f'{os.getpid()} {os.getppid()} {seen}')
        """.replace("P_CLIENT", str(os.getpid())))
    assert outcome["error"] == "LookupError", outcome
    # PID 2 beside init, its parent (the relay) outside; the client's pid names nothing in
    # this /proc (tids above 2 are the worker's own threads)
    assert outcome["message"] == "2 0 [1, 2]", outcome


def _descendants(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [c for child in map(int, children) for c in (child, *_descendants(child))]


CLEAR_DEATH_SIGNAL = EMITTER + (
    "import ctypes, time\n"
    "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: none\n"
    "emit({'type': 'progress', 'stage': 'asleep', 'done': 0, 'total': 0})\n"
    "time.sleep(300)\n")

CLIENT = """
import json
from inspector.sandbox.host import client
with client.fork_server(enabled={forked}):
    client.run_job({{"op": "selftest-payload", "paths": [{payload!r}]}}, timeout=600,
                   on_event=lambda e: print(json.dumps(e), flush=True))
"""


def _start_client(tmp_path: Path, forked: bool, disable: str = "") -> tuple[subprocess.Popen,
                                                                           dict]:
    """A client process running a payload that cleared its death signal, past the handshake."""
    payload = tmp_path / "undying.pkl"
    payload.write_bytes(exec_pickle(CLEAR_DEATH_SIGNAL))
    env = {**os.environ, client.SELFTEST_ENV: "1", client.DISABLE_ENV: disable}
    parent = subprocess.Popen(
        [sys.executable, "-c", CLIENT.format(forked=forked, payload=str(payload))],
        stdout=subprocess.PIPE, env=env, cwd=REPO, text=True)
    handshake = json.loads(parent.stdout.readline())
    assert handshake["type"] == "jail", handshake
    assert json.loads(parent.stdout.readline())["stage"] == "asleep"  # past its prctl
    return parent, handshake


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 60
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:  # started by this test: never left running
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize("forked", [False, True], ids=["cold", "forked"])
def test_a_worker_that_cleared_its_death_signal_dies_with_its_killed_client(tmp_path, forked):
    parent, handshake = _start_client(tmp_path, forked)
    assert handshake["level"] == "full", handshake
    tree = _descendants(parent.pid)
    assert len(tree) >= 3, tree  # relay, init and worker (and the fork server)
    parent.kill()
    parent.wait()
    assert not _wait_gone(tree), "a process of the job outlived its killed client"


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_forked_job_is_one_fork_of_the_server_beside_its_init(tmp_path):
    """Root's fork server makes the job's PID namespace and init itself: no relay."""
    if os.geteuid() != 0:
        pytest.skip("only a server that may make PID namespaces (root) spares the relay")
    parent, handshake = _start_client(tmp_path, forked=True)
    try:
        assert handshake["level"] == "full", handshake
        (server,) = _children(parent.pid)
        children = _children(server)
        commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    for pid in children}
        # setpriv execs cat; the Python stand-in keeps its command line
        inits = [pid for pid, argv in commands.items()
                 if argv[0] == b"/usr/bin/cat" or b"PR_SET_PDEATHSIG" in b" ".join(argv)]
        assert len(children) == 2 and len(inits) == 1, commands
        (worker,) = set(children) - set(inits)
        assert _children(worker) == []  # the worker itself, not a relay
        assert Path(f"/proc/{worker}/status").read_text().split("NSpid:")[1].split()[1] == "2"
    finally:
        tree = _descendants(parent.pid)
        parent.kill()
        parent.wait()
        assert not _wait_gone(tree)


def test_killing_only_the_relay_ends_the_namespace(tmp_path):
    """The init holds its death signal towards the relay: the worker cannot outlive them."""
    parent, _ = _start_client(tmp_path, forked=False)
    try:
        tree = _descendants(parent.pid)
        relay = tree[0]
        os.kill(relay, signal.SIGKILL)
        assert not _wait_gone(tree), "the worker outlived the namespace's init"
    finally:
        parent.kill()
        parent.wait()


def test_without_the_pid_namespace_the_level_says_so_and_the_worker_survives(tmp_path):
    """The degraded jail is really missing the guard it reports missing."""
    parent, handshake = _start_client(tmp_path, forked=False, disable="pidns")
    assert handshake["level"] == "partial"
    assert {"pidns", "proc"} <= set(handshake["missing"]), handshake
    tree = _descendants(parent.pid)
    assert len(tree) == 1, tree  # no relay and no init: the worker itself
    parent.kill()
    parent.wait()
    time.sleep(1)
    survived = alive(tree[0])
    if survived:  # started by this test: not left running
        os.kill(tree[0], signal.SIGKILL)
    assert survived, "expected the worker to outlive its client without the init"


# --- what a protocol line may cost the client -------------------------------------------


def _line_flood(line_expr: str) -> str:
    """A payload that writes one protocol line built by `line_expr` (bytes) and waits."""
    return f"fd = emit._stream.fileno()\nline = {line_expr}\nos.write(fd, line + b'\\n')\n"


@pytest.mark.parametrize(("shape", "expr"), [
    ("dicts", "b'{\"type\": \"progress\", \"a\": [' + b','.join([b'{}'] * 1_200_000) + b']}'"),
    ("lists", "b'{\"type\": \"progress\", \"a\": [' + b','.join([b'[]'] * 1_200_000) + b']}'"),
    ("strings", "b'{\"type\": \"progress\", \"a\": [' + b','.join([b'\"ab\"'] * 3_000_000)"
                " + b']}'"),
    ("items", "b'{\"type\": \"progress\", \"a\": [' + b','.join([b'0'] * 9_000_000) + b']}'"),
])
def test_a_line_dense_in_structure_is_a_violation_and_the_client_stays_small(tmp_path, shape,
                                                                             expr):
    report = _client_growth(tmp_path, EMITTER + _line_flood(expr))
    assert report["code"] == "protocol_violation", report
    assert "a line with more than" in report["message"]
    assert report["grew_kb"] < 256 * 1024, report


@pytest.mark.parametrize(("shape", "expr"), [
    ("deep_dicts", "b'{\"type\": \"progress\", \"a\": ' + b'{\"a\": ' * 50_000 + b'0'"
                   " + b'}' * 50_001"),
    ("huge_integer", "b'{\"type\": \"progress\", \"a\": ' + b'9' * 5_000_000 + b'}'"),
])
def test_a_line_too_deep_or_a_number_too_long_is_a_violation(tmp_path, shape, expr):
    report = _client_growth(tmp_path, EMITTER + _line_flood(expr))
    assert report["code"] == "protocol_violation", report
    assert "unparsable" in report["message"], report
    assert report["grew_kb"] < 256 * 1024, report


WORST_ADMITTED = ("b'{\"type\": \"progress\", \"stage\": \"x\", \"done\": 0, \"total\": 0, "
                  "\"a\": [' + b','.join([b'{}'] * 1_040_000 + [b'\"ab\"'] * 2_700_000"
                  " + [b'1000'] * 4_600_000) + b']}'")


def test_the_costliest_line_the_bounds_admit_is_measured(tmp_path):
    """Containers, strings and integers (past the cached small ones) each just inside their
    bound in one line: the client takes it, and its growth is the worst case
    docs/security.md quotes."""
    report = _client_growth(tmp_path, EMITTER + _line_flood(WORST_ADMITTED))
    assert report["code"] is None, report
    print("worst admitted line: client grew", report["grew_kb"] >> 10, "MiB")
    assert report["grew_kb"] < 1024 * 1024, report


INIT_HOLDER = """
import os, sys, time
from inspector.sandbox.worker import jail
if sys.argv[1] == "python":
    jail._which = lambda name: None
command = jail.init_command()
assert (command[0].endswith("setpriv")) == (sys.argv[1] == "setpriv"), command
r, w = os.pipe()
init = os.posix_spawn(command[0], command, {}, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0)])
if os.fork() == 0:  # holds the pipe open: only the death signal can end init now
    os.close(r)
    time.sleep(120)
    os._exit(0)
print(init, flush=True)
time.sleep(120)
"""


def _reading_stdin(pid: int) -> bool:
    """Whether the process is blocked in read(0, ...) (x86_64 system call 0)."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[:2] == ["0", "0x0"]
    except OSError:
        return False


@pytest.mark.parametrize("variant", ["setpriv", "python"])
def test_the_init_dies_with_its_parent_even_with_its_pipe_held_open(variant):
    if variant == "setpriv" and not jail.init_command()[0].endswith("setpriv"):
        pytest.skip("util-linux setpriv is not installed here")
    holder = subprocess.Popen([sys.executable, "-c", INIT_HOLDER, variant], cwd=REPO,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        init = int(holder.stdout.readline())
        keeper = [p for p in _descendants(holder.pid) if p != init]
        deadline = time.monotonic() + 60
        while not _reading_stdin(init) and time.monotonic() < deadline:
            time.sleep(0.02)  # past its prctl: blocked in read(0, ...) on the pipe
        assert _reading_stdin(init)
        holder.kill()
        holder.wait()
        assert not _wait_gone([init]), "init outlived its parent"
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
    assert keeper
