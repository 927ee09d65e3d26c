"""The README's five recipes and its fleet lines, copied from it verbatim and run in a shell as
a user runs them after the README's set-up: `ckpt-inspector` from the set-up's `.venv` on PATH
(the interpreter running these tests), in a folder holding the files they name.

The files are real torch.save checkpoints; `suspect.pt` is `good.pt` damaged three ways (a NaN,
one flipped exponent bit, one drifted element), so `diff`'s lines must lead with the NaN. The
fleet lines run against a local S3-compatible server (moto, the dev extra) holding a bucket
named `models`, with `JOB_COMPLETION_INDEX` set for each of the eight job slices as a Kubernetes
Indexed Job sets it; `telemetry --serve` is stopped with Ctrl-C once it answers a scrape.
(The clone-and-set-up test is tests/test_readme_commands.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
"""The set-up's `.venv/bin`, where `ckpt-inspector` is."""


def readme_lines(heading: str) -> list[str]:
    """The indented `ckpt-inspector …` lines under a README heading, comments cut off."""
    text = (REPO / "README.md").read_text()
    section = re.search(rf"^## {heading}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"README.md lost its '## {heading}' section"
    return [line.split("  #")[0].strip()
            for line in re.findall(r"^    (ckpt-inspector .+)$", section.group(1), re.M)]


def later_line(heading: str) -> list[str]:
    """Commands a recipe's comment names for later (`# …; later: ckpt-inspector …`)."""
    text = (REPO / "README.md").read_text()
    section = re.search(rf"^## {heading}\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)
    return re.findall(r"later: (ckpt-inspector [^\n#]+)", section)


def shell(line: str, cwd: Path, env: dict | None = None, timeout: int = 600):
    """One README line through bash, as typed."""
    run_env = {**(env or os.environ), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=run_env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """model.pt, good.pt, suspect.pt and a models/ folder, as the recipes name them."""
    weights = {name: torch.linspace(-1, 1, 64).reshape(8, 8) * (n + 1)
               for n, name in enumerate(("a", "b", "c"))}
    torch.save(weights, tmp_path / "model.pt")
    torch.save(weights, tmp_path / "good.pt")
    suspect = {name: t.clone() for name, t in weights.items()}
    suspect["a"][0, 0] = 0.123  # drift
    suspect["b"].view(torch.int32)[1, 1] ^= 1 << 23  # one flipped exponent bit, still finite
    suspect["c"][2, 2] = float("nan")
    torch.save(suspect, tmp_path / "suspect.pt")
    (tmp_path / "models").mkdir()
    torch.save(weights, tmp_path / "models" / "step-100.pt")
    return tmp_path


def test_the_five_recipes_run_verbatim(workdir: Path):
    scan, inspect, convert, manifest, diff = readme_lines("Five recipes")
    done = shell(scan, workdir)
    assert done.returncode == 0 and done.stdout.startswith("SAFE"), done.stdout + done.stderr
    done = shell(inspect, workdir)
    assert done.returncode == 0 and "health:   Weights OK" in done.stdout, done.stderr
    done = shell(convert, workdir)
    assert done.returncode == 0, done.stderr
    assert (workdir / "model.safetensors").is_file()
    done = shell(manifest, workdir)
    assert done.returncode == 0 and (workdir / "SHA256SUMS").is_file(), done.stderr
    (verify,) = later_line("Five recipes")
    done = shell(verify, workdir)
    assert done.returncode == 0 and "OK             models/step-100.pt" in done.stdout, (
        done.stdout + done.stderr)
    done = shell(diff, workdir)
    assert done.returncode == 1, done.stderr
    rows = [line.strip() for line in done.stdout.splitlines()
            if line.startswith("  ") and not line.startswith("    ")]
    assert "NaN" in rows[0] and "single-bit" in rows[1] and "drift" in rows[2], done.stdout


def _scrape(url: str, deadline: float) -> str | None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.read().decode()
        except OSError:
            time.sleep(0.2)
    return None


def test_the_fleet_lines_run_verbatim(tmp_path: Path):
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the dev extra")
    boto3 = pytest.importorskip("boto3")
    serve, scan, merge = readme_lines("At fleet scale")

    # telemetry --serve: the Prometheus endpoint answers, then Ctrl-C ends it cleanly. It
    # starts with Ctrl-C at its default, as from a terminal: a process that inherits SIGINT
    # ignored keeps ignoring it (Python installs no KeyboardInterrupt handler then), and a
    # test worker can hand it down ignored (once seen on CI: SIGINT and SIGQUIT both ignored).
    terminal = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "os.execvp('bash', ['bash', '-c', 'exec ' + sys.argv[1]])")
    server = subprocess.Popen([sys.executable, "-c", terminal, serve], cwd=tmp_path, text=True,
                              env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        page = _scrape("http://127.0.0.1:9400/metrics", time.monotonic() + 120)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            out, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()  # never left holding the port for the tests after
            server.communicate()
            raise
    assert page is not None, out + err
    assert "# TYPE" in page and "serving http://127.0.0.1:9400/metrics" in out, out + err
    assert server.returncode == 0, err

    # scan s3://models/ in eight job slices, then merge their results files
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}
    s3 = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s3.start()
    try:
        host, port = s3.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket="models")
        for n in range(5):
            path = tmp_path / f"ckpt-{n}.pt"
            torch.save({"w": torch.full((4,), float(n))}, path)
            client.upload_file(str(path), "models", f"run/ckpt-{n}.pt")
        env = {**os.environ, **keys, "AWS_ENDPOINT_URL": endpoint}
        for index in range(8):
            done = shell(scan, tmp_path, {**env, "JOB_COMPLETION_INDEX": str(index)})
            assert done.returncode == 0, done.stderr
        assert len(list(tmp_path.glob("r*.jsonl"))) == 8
        done = shell(merge, tmp_path, env)
    finally:
        s3.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "fleet.html").read_text()
    assert all(f"ckpt-{n}.pt" in page for n in range(5))
