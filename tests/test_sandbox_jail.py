"""Containment: code that escaped weights_only runs inside the jail and can do nothing harmful.

The test-only `selftest-payload` operation unpickles malicious samples with the plain
`pickle` module inside the jailed worker. Each assertion is skipped, with the reason, only
where the kernel lacks the feature that enforces it (the jail level names what is missing).
"""

from __future__ import annotations

import errno
import os
import struct
import sys
from pathlib import Path

import pytest
from factories import MARK, PROTO2, REDUCE, STOP, TUPLE, call, p_global, p_int, p_unicode

from inspector.sandbox.host import client
from inspector.sandbox.host.client import SandboxError, run_job
from inspector.sandbox.worker.seccomp import seccomp_program

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the full jail is Linux-only")


@pytest.fixture(autouse=True)
def _selftest_env(monkeypatch):
    monkeypatch.setenv(client.SELFTEST_ENV, "1")


def _call_ints(module: str, name: str, *args: int) -> bytes:
    return PROTO2 + p_global(module, name) + MARK + b"".join(p_int(a) for a in args) + TUPLE \
        + REDUCE + STOP


def _run_payloads(folder: Path, pickles: list[bytes], **limits) -> dict:
    paths = []
    for i, data in enumerate(pickles):
        paths.append(folder / f"payload{i}.pkl")
        paths[-1].write_bytes(data)
    request = {"op": "selftest-payload", "paths": [str(p) for p in paths], "limits": limits}
    return run_job(request, timeout=60)


def _require(sandbox: dict, layer: str, *others: str) -> None:
    """Skip unless `layer` (or one of `others`, any of which enforces the test) is active."""
    active = {a.split(":")[0] for a in sandbox["active"]}
    if not {layer, *others} & active:
        reason = sandbox["missing"].get(layer, "not active")
        print(f"skipping: {layer} unavailable here: {reason}")
        pytest.skip(f"{layer} unavailable on this kernel: {reason}")


# Landlock refuses with EACCES; in the fresh root a host path is not there, and what is there
# (the inputs, the skeleton of folders above them) is read-only.
FILE_REFUSALS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT)


@pytest.fixture(scope="module")
def escape(tmp_path_factory):
    """One jailed run of many escape attempts; each test checks one of them."""
    import os as _os

    _os.environ[client.SELFTEST_ENV] = "1"
    root = tmp_path_factory.mktemp("escape")
    canary = root / "CANARY_EXECUTED"
    targets = [root / "created.txt", Path("/tmp") / f"ckpt-escape-{_os.getpid()}",
               Path("/dev/shm") / f"ckpt-escape-{_os.getpid()}", Path.home() / "ckpt-escape"]
    attempts = {
        "write_canary": call("builtins", "exec", f"open({str(canary)!r}, 'w').close()"),
        "os_system": call("os", "system", f"touch '{canary}'"),
        "subprocess": call("builtins", "eval",
                           f"__import__('subprocess').run(['touch', {str(canary)!r}])"),
        "fork": call("builtins", "eval", "__import__('os').fork()"),
        "tcp": _call_ints("socket", "socket", 2, 1),
        "udp": _call_ints("socket", "socket", 2, 2),
        "tcp6": _call_ints("socket", "socket", 10, 1),
        "mkdir": call("os", "mkdir", str(root / "newdir")),
        "read_secret": call("builtins", "eval", "open('/etc/hostname').read()"),
        "append_input": call("builtins", "eval", f"open({str(root / 'payload0.pkl')!r}, 'ab')"),
    }
    attempts.update({f"create_{i}": call("builtins", "eval", f"open({str(t)!r}, 'w')")
                     for i, t in enumerate(targets)})
    result = _run_payloads(root, list(attempts.values()))
    outcomes = dict(zip(attempts, result["outcomes"], strict=True))
    yield {"sandbox": result["sandbox"], "outcomes": outcomes, "canary": canary,
           "targets": targets, "root": root}
    assert not canary.exists(), "payload executed: canary written"
    _os.environ.pop(client.SELFTEST_ENV, None)


def test_jail_level_is_reported(escape):
    sandbox = escape["sandbox"]
    assert sandbox["level"] in ("full", "partial", "process-only")
    assert any(a.startswith("rlimits") for a in sandbox["active"])
    print("jail level:", sandbox)


def test_payload_ran_but_canary_never_appears(escape):
    outcomes = escape["outcomes"]
    # The payloads really were executed by pickle (not refused), so the jail is what stopped them.
    assert outcomes["read_secret"]["ok"] is False
    assert not escape["canary"].exists()


@pytest.mark.parametrize("name", ["write_canary", "create_0", "create_1", "create_2", "create_3",
                                  "mkdir", "append_input"])
def test_payload_cannot_create_or_modify_files(escape, name):
    _require(escape["sandbox"], "landlock", "root")
    outcome = escape["outcomes"][name]
    assert outcome["ok"] is False and outcome["errno"] in FILE_REFUSALS, outcome
    for target in escape["targets"]:
        assert not target.exists(), f"{target} was created"
    assert not (escape["root"] / "newdir").exists()


def test_payload_cannot_read_outside_the_inputs(escape):
    _require(escape["sandbox"], "landlock", "root")
    outcome = escape["outcomes"]["read_secret"]
    assert outcome["ok"] is False and outcome["errno"] in FILE_REFUSALS, outcome


@pytest.mark.parametrize("name", ["tcp", "udp", "tcp6"])
def test_payload_cannot_open_internet_sockets(escape, name):
    _require(escape["sandbox"], "seccomp")
    outcome = escape["outcomes"][name]
    assert outcome["ok"] is False and outcome["errno"] == errno.EAFNOSUPPORT, outcome


@pytest.mark.parametrize("name", ["fork", "subprocess"])
def test_payload_cannot_start_a_process(escape, name):
    _require(escape["sandbox"], "seccomp")
    outcome = escape["outcomes"][name]
    assert outcome["ok"] is False and outcome["errno"] == errno.EPERM, outcome


def test_os_system_starts_no_shell(escape):
    _require(escape["sandbox"], "seccomp")
    outcome = escape["outcomes"]["os_system"]
    # system() could not create a child: status 127 << 8, and no canary.
    assert outcome["ok"] and outcome["value"] != "0", outcome
    assert not escape["canary"].exists()


def test_exec_kills_the_worker(tmp_path, canary):
    exec_payload = (PROTO2 + p_global("os", "execv") + p_unicode("/bin/touch") + MARK
                    + p_unicode("touch") + p_unicode(str(canary)) + b"l" + b"\x86" + REDUCE + STOP)
    with pytest.raises(SandboxError) as info:
        _run_payloads(tmp_path, [exec_payload])
    if "seccomp" not in {a.split(":")[0] for a in (info.value.sandbox or {}).get("active", [])}:
        pytest.skip("seccomp unavailable: execve is not blocked")
    assert info.value.code == "seccomp_violation", info.value.message


def test_cpu_burner_is_stopped_by_the_cpu_limit(tmp_path):
    burner = call("builtins", "exec", "while True:\n    pass")
    with pytest.raises(SandboxError) as info:
        _run_payloads(tmp_path, [burner], cpu_seconds=1)
    assert info.value.code == "cpu_limit", info.value.message


def test_memory_bomb_is_stopped_by_the_memory_limit(tmp_path):
    bombs = [call("builtins", "eval", "bytearray(8 << 30)"),
             call("builtins", "exec", "x = []\nwhile True:\n    x.append(bytearray(1 << 24))")]
    result = _run_payloads(tmp_path, bombs, memory_mb=256)
    assert [o["error"] for o in result["outcomes"]] == ["MemoryError", "MemoryError"]


def test_timeout_kills_the_whole_group(tmp_path):
    sleeper = call("builtins", "exec", "import time\ntime.sleep(60)")
    with pytest.raises(SandboxError) as info:
        (tmp_path / "sleep.pkl").write_bytes(sleeper)
        run_job({"op": "selftest-payload", "paths": [str(tmp_path / "sleep.pkl")]}, timeout=1.5)
    assert info.value.code == "timeout"
    leftover = [p for p in os.listdir("/proc") if p.isdigit() and _is_worker(p)]
    assert not leftover, f"worker processes left running: {leftover}"


def _is_worker(pid: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"inspector.sandbox.worker.main" in cmdline and _ppid(pid) == os.getpid()


def _ppid(pid: str) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1])


def test_selftest_operation_does_not_exist_without_the_switch(tmp_path, monkeypatch):
    monkeypatch.delenv(client.SELFTEST_ENV)
    (tmp_path / "p.pkl").write_bytes(call("builtins", "len", "x"))
    with pytest.raises(SandboxError) as info:
        run_job({"op": "selftest-payload", "paths": [str(tmp_path / "p.pkl")]}, timeout=60)
    assert info.value.code == "unknown_op"


def test_seccomp_filter_checks_the_architecture_first():
    prog = seccomp_program("x86_64", pid=4242)
    assert prog[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert prog[2][3] == 0x80000000  # any other architecture is killed
    assert prog[-1][3] == 0x7FFF0000  # everything not listed is allowed
    kills = {ins[3] for i, ins in enumerate(prog[:-1]) if ins[0] == 0x15
             and prog[i + 1] == (0x06, 0, 0, 0x80000000)}
    assert {59, 322} <= kills  # execve, execveat
    assert struct.calcsize("=HBBI") == 8
