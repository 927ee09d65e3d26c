"""The console entry ends a subcommand's process without the interpreter's teardown
(`cli.entry`): what a normal exit guarantees must still hold. Every line of output arrives,
atexit handlers and non-daemon threads finish first, and the command's status is the
process's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factories import save_state_dict, small_state_dict

# A handler, and a thread still busy when the command returns: the quick exit must not cut
# either short. A global whose finalizer only the interpreter's teardown runs tells the two
# exits apart.
PRELUDE = """
import atexit, sys, threading, time
import inspector.cli as cli
class Teardown:
    def __del__(self):
        print("teardown ran", file=sys.stderr, flush=True)
marker = Teardown()
atexit.register(lambda: print("atexit handler ran", file=sys.stderr, flush=True))
returned = threading.Event()
command = cli.main
def main(argv=None):
    try:
        return command(argv)
    finally:
        returned.set()
cli.main = main
def late():
    returned.wait()
    time.sleep(0.3)
    print("thread finished", file=sys.stderr, flush=True)
threading.Thread(target=late).start()
sys.argv = ["ckpt-inspector", *sys.argv[1:]]
cli.entry()
"""


def test_a_command_exits_with_its_status_after_its_output_handlers_and_threads(
        tmp_path: Path) -> None:
    for n in range(40):  # more JSON lines than one write of stdout's buffer
        save_state_dict(tmp_path / f"m{n:02d}.pt", small_state_dict(seed=n))
    (tmp_path / "evil.pkl").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    proc = subprocess.run([sys.executable, "-c", PRELUDE, "scan", "--json", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 41
    assert {r["verdict"] for r in lines} == {"safe", "dangerous"}
    assert proc.returncode == 2  # dangerous, as `scan` says it
    assert "thread finished" in proc.stderr
    assert proc.stderr.index("thread finished") < proc.stderr.index("atexit handler ran")
    assert "teardown ran" not in proc.stderr  # the quick exit


def test_a_mistyped_command_keeps_the_ordinary_exit(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PRELUDE, "scna", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "did you mean 'scan'?" in proc.stderr
    assert "atexit handler ran" in proc.stderr
    assert "teardown ran" in proc.stderr  # the interpreter's own exit, teardown and all
