"""Every jailed job ends (`sandbox.host.deadlines`): a worker whose payload sleeps is killed at
the wall-clock or the idle limit, and the CLI says which limit and how to raise it.

The payload runs inside a real `inspect` job through the jail's self-test hook
(`protocol.PAYLOAD_ENV`, unpickled by `selftest.run_prelude` once the worker is jailed). The
limits are small so the tests are short; nothing here asserts how long anything took.
"""

from __future__ import annotations

import pickle
import time

import pytest
import torch
from safetensors.torch import save_file

from inspector.cli import main
from inspector.sandbox.host import deadlines
from inspector.sandbox.host.deadlines import (
    BASE_S,
    IDLE_S,
    IDLE_TIMEOUT_ENV,
    PER_GIB_S,
    TIMEOUT_ENV,
    for_job,
)
from inspector.sandbox.protocol import PAYLOAD_ENV, SELFTEST_ENV, Limits


class _Sleep:
    """Unpickles as `time.sleep(seconds)`: a payload that never reports and never ends."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self):
        return time.sleep, (self.seconds,)


@pytest.fixture
def sleeping(tmp_path, monkeypatch):
    """A small safetensors file, and every worker from here on sleeps 600 s once jailed."""
    payload = tmp_path / "sleep.pkl"
    payload.write_bytes(pickle.dumps(_Sleep(600)))
    monkeypatch.setenv(SELFTEST_ENV, "1")
    monkeypatch.setenv(PAYLOAD_ENV, str(payload))
    for name in (TIMEOUT_ENV, IDLE_TIMEOUT_ENV):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "small.safetensors"
    save_file({"w": torch.ones(4, 4)}, str(path))
    yield path
    deadlines.set_idle_timeout(None)  # the CLI's setting is process-wide


def _error_line(capsys) -> str:
    """The one `error:` line of inspect's output (no traceback anywhere)."""
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    [line] = [ln for ln in out.out.splitlines() if ln.startswith("error:")]
    return line


def test_the_idle_limit_ends_a_sleeping_worker_and_names_its_option(sleeping, capsys):
    code = main(["inspect", str(sleeping), "--idle-timeout", "2", "--require-jail", "any"])
    line = _error_line(capsys)
    assert code == 5  # inspect's documented exit for a worker that timed out
    assert "reported nothing for 2 s (the idle limit)" in line
    assert "--idle-timeout SECONDS" in line and IDLE_TIMEOUT_ENV in line


def test_the_wall_clock_limit_ends_a_sleeping_worker_and_names_its_option(sleeping, capsys,
                                                                           monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "2")  # the environment's limit, with no option given
    code = main(["inspect", str(sleeping), "--require-jail", "any"])
    line = _error_line(capsys)
    assert code == 5
    assert f"did not finish within 2 s ({TIMEOUT_ENV})" in line
    assert "--timeout SECONDS" in line


def test_the_idle_limit_from_the_environment_applies_without_an_option(sleeping, capsys,
                                                                        monkeypatch):
    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "2")
    code = main(["inspect", str(sleeping), "--require-jail", "any", "--json"])
    out = capsys.readouterr().out
    assert code == 5
    assert '"idle_timeout"' in out and "--idle-timeout SECONDS" in out


def test_the_default_wall_limit_scales_with_the_inputs(tmp_path):
    small, big = tmp_path / "small.bin", tmp_path / "big.bin"
    small.write_bytes(b"x")
    with open(big, "wb") as fh:
        fh.truncate(3 << 30)  # sparse: 3 GiB that occupy no disk
    env: dict[str, str] = {}
    limits = Limits.for_input(3 << 30).to_json()  # as the operations size them
    one = for_job({"path": str(small), "limits": limits}, None, env)
    three = for_job({"path": str(small), "paths": [str(big)], "limits": limits}, None, env)
    assert one.wall == pytest.approx(BASE_S, abs=1)
    assert three.wall == pytest.approx(BASE_S + 3 * PER_GIB_S, abs=1)
    assert "3.00 GiB" in three.wall_origin
    assert one.idle == three.idle == IDLE_S


def test_the_default_wall_limit_is_never_below_the_jobs_cpu_limit(tmp_path):
    request = {"path": str(tmp_path / "absent"), "limits": Limits(cpu_seconds=5000).to_json()}
    assert for_job(request, None, {}).wall == 5000


def test_a_given_limit_wins_and_zero_means_none(tmp_path):
    request = {"path": str(tmp_path), "limits": Limits.for_input(0).to_json()}
    assert for_job(request, 7, {TIMEOUT_ENV: "9"}).wall == 7
    assert for_job(request, None, {TIMEOUT_ENV: "9"}).wall == 9
    assert for_job(request, 0, {}).wall is None
    assert for_job(request, None, {IDLE_TIMEOUT_ENV: "0"}).idle is None
    # a value that is no number of seconds leaves the default
    assert for_job(request, None, {IDLE_TIMEOUT_ENV: "soon"}).idle == IDLE_S
    assert for_job(request, None, {TIMEOUT_ENV: "-1"}).wall == BASE_S
