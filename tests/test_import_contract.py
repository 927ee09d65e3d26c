"""The layers import only what they may: read from the source, so no import has to run.

- `core` never imports torch, safetensors or Qt (it runs in every process, the GUI included).
- Only code under `sandbox/` (what runs inside the jailed worker), `guard/` and `ledger/` (what
  runs inside the user's own training process) imports torch or safetensors.
- `guard/` never imports Qt, the GUI, the CLI or the sandbox; the GUI and the report never
  import `guard/`; the CLI imports only guard's torch-free modules (`GUARD_TORCH_FREE`), which
  import no torch themselves, nor any other guard module.
- `ledger/` never imports Qt, the GUI, the CLI or the report; nothing outside it imports it.
- The GUI and the report reach the sandbox only through its client.
- The worker's op table names only modules inside `sandbox/`.
- CLI commands never import each other (what they share is in `cli/common.py`).
- Format modules (`core/formats/`) never import the scan or its context at module level:
  they reach nested content through the context handed to them.
- Module-level imports between the project's modules form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from inspector.sandbox.worker import OPS

PACKAGE = Path(__file__).resolve().parent.parent / "inspector"
HEAVY = ("torch", "safetensors")
GUARD_TORCH_FREE = ("inspector.guard", "inspector.guard.order_diff")
QT = ("PySide6", "pyqtgraph", "shiboken6")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts).removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path, top_level_only: bool = False) -> list[str]:
    """Every module an import statement in `path` names (function-level ones too, unless
    `top_level_only`); `from a import b` names both a and a.b."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def _violations(rule) -> list[str]:
    return [f"{mod} imports {name}" for mod, path in sorted(MODULES.items())
            for name in _imports(path) if rule(mod, name)]


def test_the_import_reader_sees_imports_inside_functions():
    assert "torch" in _imports(PACKAGE / "sandbox" / "load.py")
    assert "inspector.sandbox.client.inspect_file" in _imports(PACKAGE / "gui" / "pipeline.py")


def test_core_never_imports_torch_safetensors_or_qt():
    assert not _violations(lambda mod, name: mod.startswith("inspector.core")
                           and name.split(".")[0] in HEAVY + QT)


def test_only_the_sandbox_the_guard_and_the_ledger_import_torch_or_safetensors():
    inside = ("inspector.sandbox", "inspector.guard", "inspector.ledger")
    assert not _violations(lambda mod, name: not mod.startswith(inside)
                           and name.split(".")[0] in HEAVY)


def test_the_guard_never_imports_qt_the_gui_the_cli_or_the_sandbox():
    banned = ("inspector.gui", "inspector.cli", "inspector.sandbox")
    assert not _violations(lambda mod, name: mod.startswith("inspector.guard")
                           and (name.split(".")[0] in QT or name.startswith(banned)))


@pytest.mark.parametrize("layer", ["inspector.gui", "inspector.report"])
def test_gui_and_report_never_import_the_guard(layer):
    assert not _violations(lambda mod, name: mod.startswith(layer)
                           and name.startswith("inspector.guard"))


def test_the_cli_imports_only_the_guards_torch_free_modules():
    assert not _violations(lambda mod, name: mod.startswith("inspector.cli")
                           and name.startswith("inspector.guard")
                           and name.rpartition(".")[0] not in GUARD_TORCH_FREE
                           and name not in GUARD_TORCH_FREE)
    for mod in GUARD_TORCH_FREE:
        names = _imports(MODULES[mod])
        assert not [n for n in names if n.split(".")[0] in HEAVY], mod
        assert not [n for n in names if n.startswith("inspector.guard")
                    and n not in GUARD_TORCH_FREE and n.rpartition(".")[0]
                    not in GUARD_TORCH_FREE], mod


def test_the_ledger_never_imports_qt_or_the_app_and_nothing_else_imports_it():
    apps = ("inspector.gui", "inspector.cli", "inspector.report")
    assert not _violations(lambda mod, name: mod.startswith("inspector.ledger")
                           and (name.split(".")[0] in QT or name.startswith(apps)))
    assert not _violations(lambda mod, name: not mod.startswith("inspector.ledger")
                           and name.startswith("inspector.ledger"))


@pytest.mark.parametrize("layer", ["inspector.gui", "inspector.report"])
def test_gui_and_report_reach_the_sandbox_only_through_its_client(layer):
    assert not _violations(lambda mod, name: mod.startswith(layer)
                           and name.startswith("inspector.sandbox")
                           and name != "inspector.sandbox"
                           and not name.startswith("inspector.sandbox.client"))


def test_worker_ops_live_inside_the_sandbox():
    outside = {op: target for op, target in OPS.items()
               if not target.startswith("inspector.sandbox.")}
    assert not outside
    for target in OPS.values():
        assert target.split(":")[0] in MODULES, f"{target} names no module"


def test_cli_commands_never_import_each_other():
    assert not _violations(lambda mod, name: mod.startswith("inspector.cli.")
                           and name.startswith("inspector.cli.") and name.endswith("_cmd")
                           and name != mod and mod != "inspector.cli")


def test_no_import_cycles_at_module_level():
    graph = {}
    for mod, path in MODULES.items():
        graph[mod] = {name if name in MODULES else name.rpartition(".")[0]
                      for name in _imports(path, top_level_only=True)
                      if name.startswith("inspector.")} & MODULES.keys() - {mod}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        stack.append(mod)
        for dep in sorted(graph[mod]):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state:
            cycle = visit(mod)
            assert cycle is None, " -> ".join(cycle)


def test_format_modules_reach_the_scan_only_through_the_context_handed_to_them():
    scan_side = ("inspector.core.scan", "inspector.core.scan_context")
    found = [f"{mod} imports {name}" for mod, path in sorted(MODULES.items())
             if mod.startswith("inspector.core.formats")
             for name in _imports(path, top_level_only=True)
             if name.rpartition(".")[0] in scan_side or name in scan_side]
    assert not found
    assert any(mod.startswith("inspector.core.formats.") for mod in MODULES)
