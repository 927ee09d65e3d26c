"""Hostile samples proven under their real loader, and scanned without running them.

A proof runs each sample in a throwaway process with a canary path beside it: the payload, if
the loader runs it, writes there. `canary_folders` gives each sample its own folder under one
short /tmp folder (tar member names hold 100 bytes, so the canary paths stay short); `proof`
records what a run created and empties the folder again, so that a later scan is judged by
what *it* leaves there (`scan_runs_nothing`, `cli_calls_all_dangerous`). `run_each_forked`
runs a loader over many samples, each in a process of its own forked from one interpreter that
has imported the loaders' libraries once (a fresh interpreter per sample cost about 1 s each
where it imported torch).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from inspector.scan.engine import scan_file
from inspector.scan.result import ScanResult

Proof = tuple[Path, Path, list[str], str]
"""A proven sample: its file, its canary folder, what its loader's run created there, and that
run's output."""


@contextmanager
def canary_folders(prefix: str, names: Iterable[str]) -> Iterator[tuple[Path, dict[str, Path]]]:
    """A short /tmp folder and an empty canary folder in it per name; all removed at the end."""
    short = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folders = {name: short / str(i) for i, name in enumerate(names)}
    for folder in folders.values():
        folder.mkdir()
    try:
        yield short, folders
    finally:
        for folder in folders.values():
            folder.rmdir()
        short.rmdir()


def proof(path: Path, canary_dir: Path, output: str) -> Proof:
    """What the loader's run of `path` created in `canary_dir` (then removed again)."""
    ran = [p.name for p in canary_dir.iterdir()]
    for p in sorted(canary_dir.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    return path, canary_dir, ran, output


# Runs in a fresh interpreter: imports the loaders' libraries, then forks one child per run,
# which executes the loader as `python -c LOADER ARGS...` would and exits. The parent never
# loads a sample, so no payload can change what the next run sees. As with subprocess.run, a
# run's output is read until every process holding its pipe has closed it (a payload's
# program started without a wait has finished too); the parent prints each run's exit code
# and output as one JSON list.
_FORKING_DRIVER = r"""
import json, os, select, sys, time, traceback
job = json.load(sys.stdin)
for name in job["preload"]:
    __import__(name)
outputs = []
for args, cwd in zip(job["runs"], job["cwds"], strict=True):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.chdir(cwd)
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        sys.argv = ["-c", *args]
        code = 0
        try:
            exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + job["timeout"]
    while True:
        if not select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))[0]:
            os.kill(pid, 9)
            chunks.append(b"\nkilled: the run outlived its timeout")
            break
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    status = os.waitpid(pid, 0)[1]
    outputs.append((os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")))
print(json.dumps(outputs))
"""


def run_each_forked(python_exe: str, code: str, runs: list[list[str]], cwd: Path | list[Path],
                    preload: Iterable[str], isolated: bool = False,
                    env: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """The exit code and output of `python [-I] -c code *args` for each args of `runs`, in
    `cwd` (or each in its own, a list), with `env` (else ours): each run in a child forked
    from one interpreter that imported `preload` first."""
    cwds = [str(c) for c in cwd] if isinstance(cwd, list) else [str(cwd)] * len(runs)
    job = {"code": code, "runs": runs, "cwds": cwds, "preload": list(preload), "timeout": 300}
    proc = subprocess.run([python_exe, *(["-I"] if isolated else []), "-c", _FORKING_DRIVER],
                          input=json.dumps(job), capture_output=True, text=True,
                          cwd=cwds[0] if cwds else None, env=env,
                          timeout=300 + 60 * len(runs), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [(code, output) for code, output in json.loads(proc.stdout.splitlines()[-1])]


def payload_runs_test(names: Iterable[str]) -> Callable[..., None]:
    """The test, one case per sample name, that each sample's payload ran under its loader (its
    run created a file in its canary folder); it reads the module's `proven` fixture."""

    @pytest.mark.parametrize("name", sorted(names))
    def test(proven: dict[str, Proof], name: str) -> None:
        _, _, ran, output = proven[name]
        assert ran, f"{name}: the payload did not run under its loader: {output}"

    return test


def scan_runs_nothing(path: Path, canary_dir: Path) -> ScanResult:
    """The static scan of a proven sample, checked to have run none of it and changed no byte."""
    before = path.read_bytes()
    res = scan_file(path)
    assert not any(canary_dir.iterdir()), "the scan executed the payload"
    assert path.read_bytes() == before
    return res


def cli_calls_all_dangerous(python_exe: str, folder: Path, names: Iterable[str]) -> None:
    """`ckpt-inspector scan --json FOLDER`, in a process of its own, exits 2 and calls every
    named file of the folder dangerous."""
    proc = subprocess.run([python_exe, "-m", "inspector", "scan", "--json", str(folder)],
                          capture_output=True, text=True, timeout=300, check=False)
    rows = {json.loads(line)["path"]: json.loads(line) for line in proc.stdout.splitlines()}
    assert proc.returncode == 2, proc.stderr
    verdicts = {name: rows[str(folder / name)]["verdict"] for name in names}
    assert set(verdicts.values()) == {"dangerous"}, verdicts
