"""The fork server: forked workers give the cold worker's answers, fail the same ways, and
neither a dying child nor a dying parent leaves anything running (the jail probes run through
it too, in test_jail_probes.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import factories
import pytest
from test_jail_probes import PRELUDE, exec_pickle

from inspector.checkpoint.results import InspectResult
from inspector.core.progress import Cancelled, CancelToken
from inspector.sandbox.host import client, forkclient, launch
from inspector.sandbox.host.client import SandboxError, run_job

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytest_plugins = ("forkserver_fixtures", "sandbox_fixtures")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the fork server is Linux-only")

REPO = Path(__file__).resolve().parent.parent


def _payload(tmp_path: Path, body: str) -> dict:
    path = tmp_path / "payload.pkl"
    path.write_bytes(exec_pickle(f"{PRELUDE}\n{textwrap.dedent(body).strip()}\n"))
    return {"op": "selftest-payload", "paths": [str(path)]}


@pytest.fixture
def selftest(monkeypatch):
    monkeypatch.setenv(client.SELFTEST_ENV, "1")
    monkeypatch.delenv(client.DISABLE_ENV, raising=False)


def _children(pid: int) -> list[int]:
    """Live processes whose parent is `pid`."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(name))
    return out


def _forked_copies(pid: int) -> list[int]:
    """Children of the server that are forked copies of it (workers), not namespace inits."""
    server = Path(f"/proc/{pid}/cmdline").read_bytes()
    out = []
    for child in _children(pid):
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes() == server:
                out.append(child)
        except OSError:
            continue
    return out


def _gone(pid: int, within: float = 60.0) -> bool:
    """Whether `pid` has exited (or is a zombie) within a generous bound."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _without_timing(report: InspectResult) -> dict:
    contract = report.contract
    scan = {k: v for k, v in contract["scan"].items() if k != "elapsed_ms"}
    return {**{k: v for k, v in contract.items() if k != "timing"}, "scan": scan}


def test_inspect_through_the_server_equals_the_cold_worker(tmp_path, unchanged, monkeypatch,
                                                            fork_server_handle):
    path = unchanged(factories.save_training_checkpoint(tmp_path / "train.pt"))
    cold = client.inspect_file(path)
    monkeypatch.setattr(launch, "_fork_server", fork_server_handle)
    warm = client.inspect_file(path)
    assert cold.timing["worker"] == "cold" and warm.timing["worker"] == "forked"
    assert cold.error is None and warm.error is None
    assert warm.tensors and _without_timing(warm) == _without_timing(cold)


def test_digests_and_conversion_through_the_server_equal_the_cold_worker(
        tmp_path, unchanged, monkeypatch, fork_server_handle):
    path = unchanged(factories.save_every_dtype(tmp_path / "dtypes.pt"))
    cold = client.tensor_digests(path)
    cold_out = client.convert_file(path, tmp_path / "cold.safetensors", skip_unsupported=True)
    monkeypatch.setattr(launch, "_fork_server", fork_server_handle)
    assert client.tensor_digests(path) == cold
    # The output descriptor reaches the forked child at the number the request names.
    warm_out = client.convert_file(path, tmp_path / "warm.safetensors", skip_unsupported=True)
    assert warm_out["verified"] and cold_out["verified"]
    assert warm_out["timing"]["worker"] == "forked"
    assert (tmp_path / "warm.safetensors").read_bytes() == (tmp_path / "cold.safetensors"
                                                             ).read_bytes()


def test_each_job_gets_its_own_child_jailed_as_a_cold_worker(tmp_path, monkeypatch,
                                                             fork_server_handle):
    paths = [factories.save_state_dict(tmp_path / f"m{i}.pt", factories.small_state_dict(i))
             for i in range(3)]
    cold = client.inspect_file(paths[0]).sandbox
    monkeypatch.setattr(launch, "_fork_server", fork_server_handle)
    reports = [client.inspect_file(p) for p in paths]
    assert all(r.error is None and r.timing["worker"] == "forked" for r in reports)
    assert all(r.sandbox == cold for r in reports)
    assert _gone_all(fork_server_handle.pid)  # every child reaped
    # Still one thread: no pool a fork would copy half-alive into the next child.
    assert len(os.listdir(f"/proc/{fork_server_handle.pid}/task")) == 1


@pytest.mark.parametrize(("body", "code"), [
    ("os.kill(os.getpid(), signal.SIGKILL)", "worker_killed"),
    ("ctypes.string_at(0)", "worker_crashed"),
])
def test_a_child_that_dies_mid_job_leaves_the_server_serving(tmp_path, forked, selftest, body,
                                                             code):
    with pytest.raises(SandboxError) as info:
        run_job(_payload(tmp_path, body), timeout=120)
    assert info.value.code == code, info.value.message
    assert info.value.sandbox is not None  # it died after the handshake, inside the jail
    after = run_job(_payload(tmp_path, "pass"), timeout=120)
    assert after["timing"]["worker"] == "forked" and after["outcomes"][0]["ok"]


def test_a_child_killed_from_outside_mid_job_leaves_the_server_serving(tmp_path, forked,
                                                                       selftest):
    events: list[dict] = []
    failure: list[BaseException] = []
    request = _payload(tmp_path, "import time\ntime.sleep(300)")

    def job() -> None:
        try:
            run_job(request, on_event=events.append, timeout=600)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=job)
    thread.start()
    deadline = time.monotonic() + 120
    # The server's other children are the PID namespaces' inits (cat), a job's own or one
    # still ending after an earlier job: the worker is the child that is a copy of the server.
    while not (kids := _forked_copies(forked.pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert kids, "no child was forked"
    while not events and time.monotonic() < deadline:  # past the handshake, in the payload
        time.sleep(0.02)
    os.kill(kids[0], signal.SIGKILL)
    thread.join(timeout=120)
    assert isinstance(failure[0], SandboxError) and failure[0].code == "worker_killed"
    assert run_job(_payload(tmp_path, "pass"), timeout=120)["outcomes"][0]["ok"]


def test_timeout_and_cancel_kill_the_forked_child(tmp_path, forked, selftest):
    request = _payload(tmp_path, "import time\ntime.sleep(300)")
    with pytest.raises(SandboxError) as info:
        run_job(request, timeout=3)
    assert info.value.code == "timeout"
    cancel = CancelToken()
    threading.Timer(3, cancel.cancel).start()
    with pytest.raises(Cancelled):
        run_job(request, cancel=cancel, timeout=600)
    assert _gone_all(forked.pid)


def _gone_all(server_pid: int) -> bool:
    deadline = time.monotonic() + 60
    while _children(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _children(server_pid)


def test_the_server_and_its_children_die_with_their_parent(tmp_path):
    """A client killed mid-job: the server sees EOF and exits, the child gets SIGKILL."""
    request = _payload(tmp_path, "import time\ntime.sleep(300)")
    script = textwrap.dedent(f"""
        import json, os, sys, threading
        from inspector.sandbox.host import client
        with client.fork_server() as server:
            print(json.dumps({{"server": server.pid}}), flush=True)
            client.run_job({request!r}, timeout=600)
        """)
    env = {**os.environ, client.SELFTEST_ENV: "1"}
    env.pop(client.DISABLE_ENV, None)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              env=env, cwd=REPO, text=True)
    try:
        server = json.loads(parent.stdout.readline())["server"]
        deadline = time.monotonic() + 120
        while not (kids := _forked_copies(server)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert kids, "the job never started"
        everything = _children(server)  # the worker and its namespace's init
    finally:
        parent.kill()
        parent.wait()
    assert _gone(server), "the fork server outlived its parent"
    assert all(_gone(pid) for pid in everything), "the job outlived the server"


def test_the_server_dies_with_its_parent_while_a_forked_child_holds_the_socket():
    """A client that crashed after forking (a child holds its end of the socket, so no EOF
    comes): the server sees that its parent is gone and exits."""
    script = textwrap.dedent("""
        import json, os, signal, sys, time
        from inspector.sandbox.host import client
        server = client.start_fork_server()
        if os.fork() == 0:  # inherits every descriptor, the server's socket too
            time.sleep(60)
            os._exit(0)
        print(json.dumps({"server": server.pid}), flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
        """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              cwd=REPO, text=True, start_new_session=True)
    try:
        server = json.loads(parent.stdout.readline())["server"]
        parent.wait(timeout=60)
        assert parent.returncode == -signal.SIGSEGV
        assert _gone(server), "the fork server outlived its parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


def test_without_a_server_the_block_uses_cold_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(forkclient, "SERVER_MODULE", "inspector.sandbox.no_such_module")
    path = factories.save_state_dict(tmp_path / "m.pt")
    with client.fork_server() as server:
        assert server is None
        report = client.inspect_file(path)
    assert report.error is None and report.timing["worker"] == "cold"


def test_outside_a_block_jobs_are_cold(tmp_path):
    assert launch._fork_server is None
    with client.fork_server(enabled=False) as server:
        assert server is None
    path = factories.save_state_dict(tmp_path / "m.pt")
    assert client.inspect_file(path).timing["worker"] == "cold"


def test_report_over_a_folder_forks_a_worker_per_file(tmp_path, monkeypatch):
    from inspector.cli import main
    from inspector.core import envinfo

    real = envinfo.collect
    monkeypatch.setattr(envinfo, "collect", lambda probe_torch=True: real(probe_torch=False))
    folder = tmp_path / "run"
    folder.mkdir()
    for i in range(3):
        factories.save_state_dict(folder / f"step-{i}.pt", factories.small_state_dict(i))
    spawned: list[int] = []
    real_spawn = forkclient.ForkServer.spawn

    def spawn(self, *args, **kwargs):
        worker = real_spawn(self, *args, **kwargs)
        spawned.append(worker.pid)
        return worker

    monkeypatch.setattr(forkclient.ForkServer, "spawn", spawn)
    docs = {}
    for how, extra in (("warm", []), ("cold", ["--cold-workers"])):
        out = tmp_path / f"{how}.json"
        assert main(["report", str(folder), "-o", str(out), *extra]) == 0
        docs[how] = json.loads(out.read_text())["files"]
    # per file one forked worker for the load and one for the scan's jailed readings
    # (`scan.readings`), and none with --cold-workers
    assert len(spawned) == 6
    assert launch._fork_server is None  # the server is gone with the command
    assert [f["tensors"] for f in docs["warm"]] == [f["tensors"] for f in docs["cold"]]
    assert [f["load"]["sandbox_level"] for f in docs["warm"]] == [
        f["load"]["sandbox_level"] for f in docs["cold"]]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no pool on one core")
def test_a_server_with_a_thread_pool_refuses_to_serve():
    """Without OPENBLAS_NUM_THREADS=1 numpy's import starts a pool: forking then would copy
    its locks half-held into every child, so the server says it is not ready."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = client.worker_env()
    server = subprocess.Popen([sys.executable, "-I", "-m", forkclient.SERVER_MODULE,
                               str(theirs.fileno()), str(os.getpid())],
                              pass_fds=(theirs.fileno(),), env=env, stderr=subprocess.DEVNULL)
    theirs.close()
    try:
        ours.settimeout(300)
        hello = json.loads(ours.recv(4096))
    finally:
        ours.close()
        server.wait(timeout=60)
    assert hello["ready"] is False and "threads after the imports" in hello["error"], hello
