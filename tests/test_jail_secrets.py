"""A jailed worker reads no secret: not the client's environment, not the user's home.

The client runs in a subprocess whose own environment holds tokens (`HF_TOKEN`,
`AWS_SECRET_ACCESS_KEY`) and whose HOME is a fake folder holding a key file. Hostile code runs
in the worker through the jail's self-test op and looks everywhere it can: its own
environment, every `/proc/N/environ` it can open (the client's named by PID), the key file;
in cold workers and in workers forked from the warm fork server.
For every jail the test machine can produce (guards left off with `protocol.DISABLE_ENV`), the
default requirement either refuses the jail before the start line (so the code never runs) or
the code finds nothing. With `--require-jail any` the same code does find the secrets where
the jail leaves them readable: the probe is real, and the refusal is what stops it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from inspector.sandbox.protocol import DISABLE_ENV, SELFTEST_ENV, hides_secrets

SECRET = "s3cr3t-token-7f1c9a"

CLIENT = r'''
import contextlib, json, os, pickle, sys
from inspector.sandbox.host.jobs import SandboxError, run_job
from inspector.sandbox.host.launch import fork_server

SOURCE = """
import glob, json, os
secret = %(secret)r
found = [f"env:{k}" for k, v in os.environ.items() if secret in v]
for path in [%(client)r, %(key)r, *sorted(glob.glob("/proc/[0-9]*/environ"))]:
    try:
        with open(path, "rb") as fh:
            if secret.encode() in fh.read():
                found.append(path)
    except OSError:
        pass
raise RuntimeError(json.dumps(sorted(set(found))))
"""


class Probe:
    def __reduce__(self):
        return exec, (SOURCE % {"secret": os.environ["HF_TOKEN"],
                                "client": f"/proc/{os.getpid()}/environ",
                                "key": sys.argv[2]}, {})


with open(sys.argv[1], "wb") as fh:
    pickle.dump(Probe(), fh)
forked = fork_server() if sys.argv[4] == "forked" else contextlib.nullcontext()
try:
    with forked:
        result = run_job({"op": "selftest-payload", "paths": [sys.argv[1]]},
                         require_jail=sys.argv[3])
except SandboxError as exc:
    print(json.dumps({"refused": exc.code, "message": exc.message}))
else:
    [outcome] = result["outcomes"]
    print(json.dumps({"found": json.loads(outcome["message"]),
                      "level": result["sandbox"]["level"],
                      "active": result["sandbox"]["active"],
                      "worker": result["timing"]["worker"]}))
'''

DISABLED = ["", "landlock", "root", "proc", "pidns", "namespaces", "seccomp",
            "landlock,root", "landlock,proc", "landlock,pidns", "root,proc,pidns",
            "landlock,root,proc,pidns,namespaces",
            "landlock,root,proc,pidns,namespaces,seccomp,capabilities"]


def _probe(tmp_path, disabled: str, required: str, worker: str = "cold") -> dict:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n")
    probe = tmp_path / "probe" / "probe.pkl"
    probe.parent.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "HF_TOKEN": SECRET,
           "AWS_SECRET_ACCESS_KEY": SECRET, SELFTEST_ENV: "1", DISABLE_ENV: disabled}
    run = subprocess.run([sys.executable, "-c", CLIENT, str(probe), str(key), required, worker],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer.get("worker", worker) == worker  # a forked job really was forked
    return answer


@pytest.mark.parametrize(("disabled", "worker"), [
    *((d, "cold") for d in DISABLED),
    *((d, "forked") for d in ("", "landlock", "root,proc,pidns", "landlock,root"))])
def test_no_secret_is_readable_at_any_jail_the_default_accepts(tmp_path, disabled, worker):
    answer = _probe(tmp_path, disabled, "partial", worker)
    if "refused" in answer:  # before the start line: the hostile code never ran
        assert answer["refused"] == "jail_refused"
        assert "--require-jail any" in answer["message"]
        return
    assert answer["found"] == [], answer
    assert hides_secrets(answer["active"])


@pytest.mark.parametrize(("disabled", "leaks"), [
    ("landlock,root", ["id_ed25519"]),  # partial: seccomp, the namespaces, its own /proc
    ("landlock,root,proc,pidns,namespaces,seccomp,capabilities", ["id_ed25519", "/environ"]),
])
def test_a_jail_without_landlock_or_its_own_root_is_refused_by_default(tmp_path, disabled,
                                                                       leaks):
    refused = _probe(tmp_path, disabled, "partial")
    assert refused["refused"] == "jail_refused"
    if "namespaces" not in disabled:  # a partial jail: the line says what is missing
        assert "without Landlock or a mount namespace" in refused["message"]
    # accepted anyway, the same code reads what that jail leaves in reach
    accepted = _probe(tmp_path, disabled, "any")
    for leak in leaks:
        assert any(path.endswith(leak) for path in accepted["found"]), accepted
    assert not any(path.startswith("env:") for path in accepted["found"])  # scrubbed anyway


def test_a_forked_worker_gets_the_same_scrubbed_environment(tmp_path):
    """The fork server starts from the allow-listed environment, not the client's: even with
    every guard off, a forked worker's own environment holds no token."""
    accepted = _probe(tmp_path, "landlock,root,proc,pidns,namespaces,seccomp,capabilities",
                      "any", "forked")
    assert not any(path.startswith("env:") for path in accepted["found"]), accepted
    assert any(path.endswith("id_ed25519") for path in accepted["found"])  # the probe works
