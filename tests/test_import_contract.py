"""The layers import only what they may: read from the source, so no import has to run.

- `core` never imports torch, safetensors or Qt, nor any other package of the project (every
  process imports it).
- Only `sandbox/worker/` (what runs inside the jailed worker), `tensors/` (the torch-side readers
  the worker and the ledger share), `guard/` and `ledger/` (what runs inside the user's own
  training process) import torch or safetensors.
- The process boundary is the package boundary: nothing under `sandbox/host/` imports a worker
  module or `tensors/`; what the two sides share is `sandbox.protocol`. The ledger imports no
  module of the sandbox. The readers the host checks the worker's answers with (`rawtensors/`)
  import only `core`, `formats` and `layout`, so no reader of the input runs its code.
- `guard/` never imports Qt, the GUI, the CLI or the sandbox; the GUI and the report never
  import `guard/`; the CLI imports only guard's torch-free modules (`GUARD_TORCH_FREE`), which
  import no torch themselves, nor any other guard module.
- `ledger/` never imports Qt, the GUI, the CLI or the report; nothing outside it imports it.
- The GUI and the report reach the sandbox only through its client.
- The worker's op table names only modules of the worker and `tensors/`.
- CLI commands never import each other (what they share is in `cli/common.py`).
- Format modules (`formats/`) never import the scan's engine or its context, not even for
  types: they reach nested content through the context handed to them.
- Imports between the project's modules form no cycle, imports inside functions included.
- `layout` never imports `scan`, and `integrity` never imports `shards`: between each pair
  imports go one way (the scan uses where a save's tensors lie; the shards use the index
  reader and the hashes).
- Every package says in its docstring what it owns, and no folder holds more than 15 modules.
- `signing/` imports of the project only `core`, `integrity` and itself (never torch, Qt, the
  GUI, the CLI or the sandbox: tensor digests are injected), and it alone imports the OpenSSF
  Model Signing reference library and its stack (`model_signing`, `OpenSSL`, `sigstore`,
  `in_toto_attestation`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from inspector.cli import COMMANDS
from inspector.sandbox.worker.main import OPS

PACKAGE = Path(__file__).resolve().parent.parent / "inspector"
HEAVY = ("torch", "safetensors")
GUARD_TORCH_FREE = ("inspector.guard",)
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
    assert "torch" in _imports(PACKAGE / "tensors" / "load.py")
    assert "inspector.sandbox.host.client.inspect_file" in _imports(PACKAGE / "gui" / "pipeline.py")


def test_core_never_imports_torch_qt_or_the_rest_of_the_project():
    assert not _violations(lambda mod, name: mod.startswith("inspector.core")
                           and (name.split(".")[0] in HEAVY + QT
                                or (name.startswith("inspector.")
                                    and not name.startswith("inspector.core"))))


TORCH_SIDE = ("inspector.sandbox.worker", "inspector.tensors", "inspector.guard",
              "inspector.ledger")


def test_only_the_worker_the_tensor_readers_the_guard_and_the_ledger_import_torch():
    assert not _violations(lambda mod, name: not mod.startswith(TORCH_SIDE)
                           and name.split(".")[0] in HEAVY)


def test_the_host_side_never_imports_the_worker_side():
    worker_side = ("inspector.sandbox.worker", "inspector.tensors")
    assert not _violations(lambda mod, name: mod.startswith("inspector.sandbox.host")
                           and name.startswith(worker_side))


def test_the_raw_readers_import_only_core_formats_and_layout():
    allowed = ("inspector.core", "inspector.formats", "inspector.layout", "inspector.rawtensors")
    assert not _violations(lambda mod, name: mod.startswith("inspector.rawtensors")
                           and name.startswith("inspector") and not name.startswith(allowed))
    assert "inspector.rawtensors.readers" in _imports(
        MODULES["inspector.sandbox.host.claims.expected"])


ONE_WAY = {"inspector.layout": "inspector.scan", "inspector.integrity": "inspector.shards"}


def test_layout_and_integrity_never_import_the_packages_above_them():
    assert not _violations(lambda mod, name: any(
        mod.startswith(low) and name.startswith(high) for low, high in ONE_WAY.items()))
    assert "inspector.layout.dcp_items.listed_files" in _imports(
        MODULES["inspector.scan.discover"])
    assert "inspector.integrity.shard_index" in _imports(MODULES["inspector.shards.shard_set"])


def test_the_ledger_imports_no_module_of_the_sandbox():
    assert not _violations(lambda mod, name: mod.startswith("inspector.ledger")
                           and name.startswith("inspector.sandbox"))


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
def test_gui_and_report_reach_the_sandbox_only_through_its_host_side(layer):
    assert not _violations(lambda mod, name: mod.startswith(layer)
                           and name.startswith("inspector.sandbox")
                           and name not in ("inspector.sandbox", "inspector.sandbox.host")
                           and not name.startswith(("inspector.sandbox.host.client",
                                                    "inspector.sandbox.host.consistency_job")))


def test_worker_ops_live_inside_the_worker_or_the_tensor_readers():
    outside = {op: target for op, target in OPS.items()
               if not target.startswith(("inspector.sandbox.worker.", "inspector.tensors."))}
    assert not outside
    for target in OPS.values():
        assert target.split(":")[0] in MODULES, f"{target} names no module"


def test_cli_commands_never_import_each_other():
    commands = {c.module for c in COMMANDS.values()}
    assert not _violations(lambda mod, name: mod in commands and name in commands
                           and name != mod)


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (`a.b.c` may be a name in module `a.b`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_no_import_cycles_imports_inside_functions_included():
    graph = {}
    for mod, path in MODULES.items():
        deps = {_resolve(name) for name in _imports(path) if name.startswith("inspector.")}
        # a package importing its own modules (its interface) is not a cycle of design
        graph[mod] = {d for d in deps if d and d != mod and not d.startswith(mod + ".")}
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


def test_format_modules_never_import_the_scan_engine_or_its_context():
    scan_side = ("inspector.scan.engine", "inspector.scan.context")
    found = [f"{mod} imports {name}" for mod, path in sorted(MODULES.items())
             if mod.startswith("inspector.formats")
             for name in _imports(path)
             if name.rpartition(".")[0] in scan_side or name in scan_side]
    assert not found
    assert any(mod.startswith("inspector.formats.") for mod in MODULES)


def test_every_package_says_what_it_owns_and_no_folder_holds_more_than_15_modules():
    per_folder: dict[Path, int] = {}
    for mod, path in MODULES.items():
        per_folder[path.parent] = per_folder.get(path.parent, 0) + 1
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc and len(doc.split()) >= 8, f"{mod} has no docstring saying what it owns"
    crowded = {str(p.relative_to(PACKAGE)): n for p, n in per_folder.items() if n > 15}
    assert not crowded


SIGNING_MAY_IMPORT = ("inspector.core", "inspector.integrity", "inspector.signing")
OMS_STACK = ("model_signing", "OpenSSL", "sigstore", "sigstore_models", "in_toto_attestation")


def test_signing_imports_only_core_integrity_and_the_reference_library():
    assert not _violations(lambda mod, name: mod.startswith("inspector.signing")
                           and ((name.startswith("inspector.")
                                 and not name.startswith(SIGNING_MAY_IMPORT))
                                or name.split(".")[0] in HEAVY + QT))
    assert any(mod.startswith("inspector.signing.") for mod in MODULES)


def test_only_signing_imports_the_oms_reference_library():
    assert not _violations(lambda mod, name: not mod.startswith("inspector.signing")
                           and name.split(".")[0] in OMS_STACK)
