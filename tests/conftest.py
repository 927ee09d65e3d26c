"""Shared fixtures: offscreen Qt, the outside corpus, canary files and screenshot output."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# torch's (and OpenBLAS's) thread pool spins while it waits: two test workers on CI's two cores,
# each with a pool of two, spent CPU spinning that the other worker needed (test_ledger_moments'
# torch-only cases took twice the CPU under load). The tests and the commands they start compute
# on one thread; jailed workers get a scrubbed environment (launch.worker_env), so they keep a
# user's defaults. Set before anything imports torch, which reads it once.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "picklescan"
ARTIFACTS = REPO / "tests" / "artifacts"
BACKSTOP_S = 60
"""How long past its timeout a stuck test may run before the whole run stops."""

_real_stderr: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Keep a handle on the terminal's stderr before output capture takes over, and keep
    xdist's --dist loadfile to the collection's order (LONG_FIRST)."""
    global _real_stderr
    _real_stderr = os.dup(sys.stderr.fileno())
    # pytest-xdist (3.6 on) hands files out by their number of tests, most first, unless told
    # not to: the README clone test's file (two tests, the longest) went out near the end and
    # one worker idled for minutes while it ran.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.fixture(autouse=True)
def _stop_the_run_if_stuck(request: pytest.FixtureRequest):
    """Print every thread's stack and end the run when a test outlives its timeout.

    pytest-timeout's signal interrupts Python code only; a thread stuck in C++ (a Qt wait, a
    lock) would hold the run until CI's own limit with nothing printed.
    """
    marker = request.node.get_closest_marker("timeout")
    timeout = float(marker.args[0] if marker and marker.args else request.config.getini("timeout"))
    faulthandler.dump_traceback_later(timeout + BACKSTOP_S, exit=True, file=_real_stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`hostile(source)`: every jailed worker started from here on first runs `source` (a lying
    or dying loader, `hostile_worker`)."""
    from hostile_worker import arm

    return lambda source: arm(tmp_path, monkeypatch, source)


@pytest.fixture
def fast_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the environment's torch subprocess probe (a report's environment section)."""
    from inspector.core import envinfo

    real = envinfo.collect
    monkeypatch.setattr(envinfo, "collect", lambda probe_torch=True: real(probe_torch=False))


_torch_builds: dict[tuple[str, float], dict] = {}
"""What torch's probe answered in this run, per interpreter and timeout (answers only)."""


@pytest.fixture(autouse=True)
def _torch_probed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process report asks torch's CUDA and cuDNN versions of a fresh interpreter that
    imports torch (about 3 CPU-seconds; some 70 reports in the suite): the run asks once and
    later reports get a copy of the answer. A failed probe is asked again. The probe itself is
    tested in an interpreter of its own (test_report_model)."""
    from inspector.core import envinfo

    real = envinfo.torch_build_info

    def once(python: str = sys.executable, timeout: float = 120.0) -> dict:
        key = (python, timeout)
        if key not in _torch_builds:
            answer = real(python, timeout)
            if not answer:
                return answer
            _torch_builds[key] = answer
        return dict(_torch_builds[key])

    monkeypatch.setattr(envinfo, "torch_build_info", once)


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A path a malicious payload writes to when it runs; tests assert it never appears."""
    path = tmp_path / "CANARY_EXECUTED"
    yield path
    assert not path.exists(), f"payload executed: canary {path} was written"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The public scanner corpus beside the checkout; skipped where it is absent."""
    if not (CORPUS / "labels.tsv").is_file():
        pytest.skip(f"outside corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Folder for screenshots and other files a person looks at after a run (with its gui/)."""
    # gui/ is made here, not by whichever test happens to run first, so any test may save there
    (ARTIFACTS / "gui").mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def python_exe() -> str:
    """The interpreter running the tests, for subprocess checks."""
    return sys.executable


@pytest.fixture(autouse=True)
def _no_guard_outlives_its_test():
    """A guard a test leaves alive (a halted one, held by its traceback's frames until the next
    collection) stays registered with the health gate: a later test's ledger save would ask it,
    or name it on stderr. Each test starts with none (the gate holds guards weakly, so this only
    ends what collection would end at a time of its own)."""
    yield
    health_gate = sys.modules.get("inspector.run.health_gate")
    if health_gate is not None:
        health_gate._CHECKS.clear()


@pytest.fixture(autouse=True)
def _collect_garbage_on_the_main_thread():
    """The GUI switches automatic collection off (inspector.gui.ui_gc); collect between tests."""
    yield
    ui_gc = sys.modules.get("inspector.gui.ui_gc")
    if ui_gc is not None and not gc.isenabled():
        ui_gc.collect_if_due()


@pytest.fixture(scope="module", autouse=True)
def _warm_fork_server(request: pytest.FixtureRequest):
    """In-process jobs of a test module fork from one warm server, as the app's do: a cold
    worker costs a fresh interpreter and `import torch` (about 1 s, several at load), a fork
    about 40 ms. A module that tests how workers start, counts sandbox processes or switches
    jail guards off through the environment (which a server reads once) sets
    `OWN_WORKERS = True` and gets none; a single test asks for `cold_workers`."""
    from inspector.sandbox.host import client, launch

    if getattr(request.module, "OWN_WORKERS", False):
        client.stop_fork_server()
    elif launch._fork_server is None:
        # where it cannot start, jobs start cold workers, as everywhere without a server
        with contextlib.suppress(client.ForkServerError):
            client.start_fork_server(keep_warm=True)
    yield


@pytest.fixture
def cold_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within the test, jobs start cold workers (they read the environment it sets)."""
    from inspector.sandbox.host import launch

    monkeypatch.setattr(launch, "_fork_server", None)


LONG_FIRST = (
    "test_readme_commands.py", "test_gpu_check_script.py", "test_scan_rt55_source_loaders.py",
    "test_scan_remote_code.py", "test_ledger_moments.py", "test_signing_report.py",
    "test_batch_shards.py", "test_cli_broken_pipe.py", "test_ledger_faults.py",
    "test_gui_lifetimes.py", "test_scan_native_code.py", "test_report_guard.py",
)
"""The files that took longest in a whole run (--durations=0, summed per file), longest first:
each worker takes the next file when it is done, so the long ones go out while the other
worker still has work to share."""


def _start_rank(item: pytest.Item) -> int:
    """A LONG_FIRST file's place in it; every other file after them."""
    name = item.path.name
    return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the longest files first, longest of all first, the rest in their order: with --dist
    loadfile a long file handed out last kept one worker busy while the other sat idle."""
    items.sort(key=_start_rank)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The warm server ends with the run."""
    client = sys.modules.get("inspector.sandbox.host.client")
    if client is not None:
        client.stop_fork_server()
