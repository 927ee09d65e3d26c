"""`run latest` prints the path a resume loads for scripts (`$(ckpt-inspector run latest RUN)`):
the exact bytes of the checked checkpoint's name, or nothing and exit 2. An escaped spelling
(`step-1\\u202f000.pt` for a trainer's `f"step-{step:n}"` under fr_FR) names another file,
which someone who can write the run folder plants; the real loader runs it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
import torch

from inspector.cli import main
from inspector.core.termtext import escape
from inspector.ledger import save
from inspector.run import journal

KEY = "the trainer's seal key"
ENV = {**os.environ, journal.KEY_ENV: KEY}


class _Payload:
    """A pickle that creates `canary` when loaded with weights_only=False."""

    def __init__(self, canary):
        self.canary = str(canary)

    def __reduce__(self):
        return (open, (self.canary, "w"))


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(journal.KEY_ENV, KEY)


def _run(run, name):
    """A run of two saves, the newer one named `name`; that checkpoint's full path."""
    save({"w": torch.full((4,), 1.0)}, run / "ckpt" / "step-500.pt", step=500, run_dir=run)
    save({"w": torch.full((4,), 2.0)}, run / "ckpt" / name, step=1000, run_dir=run)
    return run / "ckpt" / name


def _latest(run, *extra):
    return subprocess.run([sys.executable, "-m", "inspector", "run", "latest", *extra, str(run)],
                          capture_output=True, env=ENV, check=False)


def _loaded(stdout: bytes) -> list[float]:
    """What a script that loads the printed path gets (weights_only: nothing of it runs)."""
    return torch.load(os.fsdecode(stdout.removesuffix(b"\n")), weights_only=True)["w"].tolist()


# names a trainer writes that `escape` rewrites: fr_FR's {step:n} (U+202F), a no-break space,
# a tab, a byte that is no UTF-8 (a legacy file system)
EXACT = {"narrow no-break space": "step-1\u202f000.pt", "no-break space": "step-1\u00a0000.pt",
         "tab": "step\t1000.pt", "undecodable byte": os.fsdecode(b"step-1000-\xff.pt"),
         "twin": "step-1000.pt"}


@pytest.mark.parametrize("case", list(EXACT))
def test_a_pipe_gets_the_exact_bytes_of_the_checked_file(tmp_path, keyed, case):
    real = _run(tmp_path / "run", EXACT[case])
    done = _latest(tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == os.fsencode(str(real)) + b"\n"
    assert _loaded(done.stdout) == [2.0] * 4


def test_the_escaped_spelling_is_a_planted_file_the_loader_runs_and_we_never_name(tmp_path,
                                                                                  keyed):
    real = _run(tmp_path / "run", "step-1\u202f000.pt")
    canary = tmp_path / "CANARY"
    planted = real.parent / escape(real.name)  # step-1\u202f000.pt, spelt out
    assert planted != real
    torch.save({"w": torch.full((4,), -666.0), "x": _Payload(canary)}, planted)
    # the harm: what a script loading the escaped spelling gets runs its payload
    subprocess.run([sys.executable, "-c", "import sys, torch; torch.load(sys.argv[1], "
                    "weights_only=False)", str(planted)], check=True, env=ENV)
    assert canary.exists()
    canary.unlink()
    done = _latest(tmp_path / "run")
    assert done.returncode == 0 and done.stdout == os.fsencode(str(real)) + b"\n"
    assert _loaded(done.stdout) == [2.0] * 4
    assert not canary.exists()  # nothing of ours loaded the planted file


# a name no line printed for scripts can hold as it is: a line break ends the line early, an
# escape or BiDi override drives the terminal the line reaches
REFUSED = {"line break": "step-1\n000.pt", "escape sequence": "step-\x1b[2J1000.pt",
           "BiDi override": "step-\u202e1000.pt", "line separator": "step-\u20281000.pt"}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_path_no_line_holds_exactly_is_refused_and_json_gives_it(tmp_path, keyed, case):
    real = _run(tmp_path / "run", REFUSED[case])
    done = _latest(tmp_path / "run")
    assert (done.returncode, done.stdout) == (2, b"")
    assert b"cannot be printed exactly" in done.stderr and b"--json" in done.stderr
    doc = json.loads(_latest(tmp_path / "run", "--json").stdout)
    assert os.fsencode(doc["location"]) == os.fsencode(str(real))


class _Terminal(io.TextIOWrapper):
    """A stdout that says it is a terminal, its bytes kept."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("name", "code"), [("step-1\u202f000.pt", 2), ("step-1000.pt", 0)],
                         ids=["narrow no-break space", "twin"])
def test_a_terminal_gets_a_path_only_as_it_is(tmp_path, keyed, monkeypatch, name, code):
    """On a terminal a path is printed only where it shows as it is: one `escape` rewrites
    would be copied as its escaped spelling, another file's name."""
    real = _run(tmp_path / "run", name)
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", _Terminal(raw, encoding="utf-8"))
    assert main(["run", "latest", str(tmp_path / "run")]) == code
    sys.stdout.flush()
    assert raw.getvalue() == (os.fsencode(str(real)) + b"\n" if code == 0 else b"")
