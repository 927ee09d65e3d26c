"""The README's two commands, copied from it verbatim, work in a fresh clone of the repository.

(Its links, the commands and exit codes it names: tests/test_docs_reference.py.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NESTED = "CKPT_INSPECTOR_README_TEST"
"""Set inside the clone's own test run, so the clone does not clone itself again."""
CLEAN_ENV = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "VIRTUAL_ENV")


def readme_commands() -> list[str]:
    """The indented command lines under the README's "Two commands" heading."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## Two commands\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README.md lost its '## Two commands' section"
    return re.findall(r"^    (scripts/\S+.*)$", section.group(1), re.M)


def test_readme_names_the_run_and_test_commands():
    assert readme_commands() == ["scripts/run.sh [FILE]", "scripts/test.sh"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci  # CI runs exactly the README's test command


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(os.environ.get(NESTED) == "1", reason="already inside the README test")
@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_readme_commands_in_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items()
           if k not in CLEAN_ENV and not k.startswith("PYTHON")}
    # pip byte-compiles every module it installs (about 18,000 files: torch, PySide6, the dev
    # extra), about half of the set-up's CPU time; the clone's commands compile what they
    # import. scripts/setup.sh compiles the project's own modules itself, as always. (pip reads
    # PIP_COMPILE=0 as --no-compile; PIP_NO_COMPILE=1 would mean the opposite.)
    env.update({NESTED: "1", "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_COMPILE": "0"})
    run_cmd, test_cmd = readme_commands()

    # [FILE] is optional: without it the app opens on the built-in sample, and without a
    # display it runs the headless inspection of that sample.
    run = subprocess.run(["bash", "-c", run_cmd.replace(" [FILE]", "")], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "needs a display" in run.stderr
    assert "tensors" in run.stdout and "sha256" in run.stdout
    assert (clone / ".venv" / "bin" / "ckpt-inspector").exists()

    # The whole suite is what CI runs; here one small test file proves the command sets up
    # and runs ruff and pytest (arguments after it go to pytest, as the README says).
    test = subprocess.run(["bash", "-c", f"{test_cmd} {shlex.quote('tests/test_hashing.py')}"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=1500)
    assert test.returncode == 0, (test.stdout + test.stderr)[-3000:]
    assert re.search(r"\d+ passed", test.stdout), test.stdout[-2000:]
