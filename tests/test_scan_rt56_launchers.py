"""torch's own process launchers are on the deny list (round 56).

Shipped source calling `torch.distributed.run.main(['--no-python', 'touch', ...])` (torchrun's
entry point) ran a program at import while the scan said suspicious, as for a call of
`torch.distributed.is_available`. The deny list now names torchrun and its kin under "run
code", and a sweep of the installed torch's source (read with `ast`, never imported) holds it
to every module that starts a process itself: subprocess, os's runners, multiprocessing's and
torch.multiprocessing's process starters, urlretrieve of a program. The hostile source is
proven under a plain import (a canary appears) and scanned (dangerous, the canary never
appears), beside a twin that only asks whether torch.distributed is available."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.scan.pickles.policy import DENY, classify

# What starts a process (or fetches a program to run), by the dotted name a call reaches
_RUNNERS = re.compile(
    r"^(subprocess\.\w+|os\.(system|popen|exec\w*|spawn\w*|posix_spawn\w*|fork\w*)"
    r"|multiprocessing(\.\w+)*\.(Process|Pool|get_context)"
    r"|torch\.multiprocessing(\.\w+)*\.(spawn|start_processes|Process)"
    r"|urllib\.request\.urlretrieve|concurrent\.futures\.ProcessPoolExecutor)$")
_PREFILTER = re.compile(r"subprocess|os\.system|os\.popen|os\.exec|os\.spawn|posix_spawn|Popen"
                        r"|Process\(|start_processes|urlretrieve")
# torchrun's entry points reach the launcher through other modules (elastic_launch, the agent)
ENTRY_POINTS = ("torch.distributed.run.main", "torch.distributed.launch.main",
                "torch.distributed.launcher.api.elastic_launch",
                "torch.distributed.elastic.multiprocessing.start_processes")


def _imports(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _starts_processes(tree: ast.Module) -> set[str]:
    """The process-starting calls a module's source makes (by what its imports name)."""
    names, found = _imports(tree), set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target, parts = node.func, []
        while isinstance(target, ast.Attribute):
            parts.append(target.attr)
            target = target.value
        if isinstance(target, ast.Name):
            full = ".".join([names.get(target.id, target.id), *reversed(parts)])
            if _RUNNERS.match(full):
                found.add(full)
    return found


def _under_deny(module: str) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:i]) in DENY for i in range(1, len(parts) + 1))


def test_every_torch_module_that_starts_a_process_is_denied():
    root = Path(importlib.util.find_spec("torch").submodule_search_locations[0])
    undenied, read = [], 0
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("torch", *path.relative_to(root).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        text = path.read_text(encoding="utf-8", errors="replace")
        if _under_deny(module) or not _PREFILTER.search(text):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        read += 1
        runs = _starts_processes(tree)
        if runs:
            undenied.append(f"{module}: {sorted(runs)[:3]}")
    assert read > 5, "too few torch modules mention a process runner: the sweep reads nothing"
    assert not undenied, undenied


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_torchrun_s_entry_points_are_dangerous(entry):
    module, _, name = entry.rpartition(".")
    verdict = classify(module, name)
    assert verdict.severity == "dangerous" and "run code" in verdict.reason, verdict


def test_what_torch_distributed_does_not_launch_is_not_denied():
    """Names of torch.distributed that start nothing keep their old verdict."""
    for module, name in (("torch.distributed", "is_available"),
                         ("torch.distributed.checkpoint.metadata", "Metadata")):
        assert classify(module, name).severity != "dangerous"


# --- shipped source, proven ----------------------------------------------------------------

def _source(canary: Path | None) -> str:
    if canary is None:
        return "import torch\nfrom torch.distributed import is_available\nis_available()\n"
    return ("import torch\nfrom torch.distributed.run import main\n"
            "main(['--standalone', '--nproc-per-node', '1', '--no-python', 'touch', "
            f"{str(canary)!r}])\n")


def _scan(folder: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(folder)],
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.splitlines()[0])


def test_shipped_source_calling_torchrun_is_dangerous_and_never_run(tmp_path):
    pytest.importorskip("torch.distributed.run")
    canary = tmp_path / "canary"
    hostile, twin = tmp_path / "hostile", tmp_path / "twin"
    for folder, text in ((hostile, _source(canary)), (twin, _source(None))):
        folder.mkdir()
        (folder / "modeling_x.py").write_text(text)
    res = _scan(hostile)
    assert res["verdict"] == "dangerous", res
    assert "torch.distributed.run.main" in json.dumps(res["findings"])
    assert not canary.exists()
    assert _scan(twin)["verdict"] == "suspicious"
    ran = subprocess.run([sys.executable, "-c", "import modeling_x"], cwd=hostile,
                         capture_output=True, text=True, timeout=300)
    assert canary.exists(), f"the payload did not run under import: {ran.stderr[-2000:]}"
