"""TorchScript code is judged as code: operators that reach files or the network make an
archive dangerous (each hostile sample proven to act under torch.jit.load, and never run by
the scan), a scripted torch.nn model is suspicious with one plain line, and the list of
reaching operators is held to torch's own operator registry."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from proofs import run_each_forked

from inspector.formats.archives.script_code import (
    REACHING_CLASS_NAMESPACES,
    REACHING_NAMESPACES,
    REACHING_OPS,
)

_FILE_ARGUMENTS = {"filename", "path", "file", "filepath", "url", "uri"}
_GROUP_TYPES = ("torch.classes.c10d.", "torch.classes.dist_rpc.")


def _registry_reaching() -> dict[str, str]:
    """Every registered operator whose schema reaches outside the process: a string argument
    that names a file, or a process group or RPC argument (a group name, a ProcessGroup, a
    WorkerInfo), or an RPC primitive. The modules that register more operators when imported
    are imported first, so the registry is the same whatever ran before in this process."""
    import torch
    import torch.distributed._functional_collectives  # registers c10d_functional
    import torch.distributed.checkpoint  # registers fsdp

    out: dict[str, str] = {}
    for schema in torch._C._jit_get_all_schemas():
        args = [(a.name, str(a.type)) for a in schema.arguments]
        if any(n in _FILE_ARGUMENTS and "str" in t for n, t in args):
            out[schema.name] = "files"
        elif schema.name.startswith("prim::rpc_") or any(
                n == "group_name" or any(g in t for g in _GROUP_TYPES) for n, t in args):
            out.setdefault(schema.name, "the network")
    return out


def test_reaching_operators_are_torchs_own_registry() -> None:
    import torch

    derived = _registry_reaching()
    registered = {s.name for s in torch._C._jit_get_all_schemas()}
    covered = {op: REACHING_OPS.get(op) or REACHING_NAMESPACES.get(op.split("::")[0])
               for op in derived}
    assert {op: what for op, what in derived.items() if covered[op] != what} == {}
    # every entry names an operator or namespace this torch registers: none is a guess
    assert set(REACHING_OPS) <= registered
    assert {op.split("::")[0] for op in registered} >= set(REACHING_NAMESPACES)
    # no reaching aten operator is also a Tensor method, so `torch.X` and `ops.aten.X` are
    # its only spellings in code
    methods = {s.name for s in torch._C._jit_get_all_schemas()
               if s.arguments and s.arguments[0].name == "self"}
    assert not {op for op in REACHING_OPS if op.startswith("aten::")} & methods
    classes = {str(a.type).split("torch.classes.")[1].split(".")[0]
               for s in torch._C._jit_get_custom_class_schemas() for a in s.arguments
               if any(g in str(a.type) for g in _GROUP_TYPES)}
    assert classes <= set(REACHING_CLASS_NAMESPACES)


_HOSTILE = """
import sys, torch

canary = ""  # each model reads it when built, below

class FromFile(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))
        self.p = canary
    def forward(self, x):
        return x + self.w
    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.p, self.training)
    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]):
        self.p = state[1]
        self.training = state[2]
        t = torch.from_file(self.p, shared=True, size=16, dtype=torch.uint8)
        self.w = state[0] + t[:2].float()

class Saves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
        self.p = canary
    def forward(self, x):
        return x + self.w
    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.p, self.training)
    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]):
        self.w = state[0]
        self.p = state[1]
        self.training = state[2]
        torch.ops.aten.save(self.w, self.p)

class Indirect(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
        self.p = canary
    def forward(self, x):
        return x + self.w
    def _restore(self, path: str):
        torch.ops.aten.save(self.w, path)
    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.p, self.training)
    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]):
        self.w = state[0]
        self.p = state[1]
        self.training = state[2]
        self._restore(self.p)

class Benign(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3), torch.nn.ReLU(),
                                        torch.nn.Flatten(), torch.nn.Linear(8, 3))
        self.norm = torch.nn.LayerNorm(3)
    def forward(self, x):
        return self.norm(self.body(x)).softmax(-1)

for kind, canary, out in zip(*[iter(sys.argv[1:])] * 3, strict=True):
    model = {"from_file": FromFile, "save": Saves, "indirect": Indirect, "benign": Benign}[kind]()
    torch.jit.save(torch.jit.script(model), out)
"""


def _make(tmp_path: Path, samples: dict[str, tuple[str, Path]]) -> dict[str, Path]:
    """name -> (kind, canary): each model scripted and saved, all in one process of their own
    (torch.jit.script reads the classes' source, so the script is a file)."""
    script = tmp_path / "make_script.py"
    script.write_text(textwrap.dedent(_HOSTILE))
    outs = {name: tmp_path / f"{name}.pt" for name in samples}
    args = [str(a) for name, (kind, canary) in samples.items() for a in (kind, canary, outs[name])]
    subprocess.run([sys.executable, str(script), *args], check=True, capture_output=True,
                   timeout=300)
    return outs


def _respaced(src: Path, dst: Path) -> Path:
    """The archive with its code hand-edited: the operator spelled `ops . aten . from_file`,
    which TorchScript's importer compiles as torch.from_file."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if "/code/" in info.filename and info.filename.endswith(".py"):
                assert b"torch.from_file(" in data
                data = data.replace(b"torch.from_file(", b"ops . aten . from_file(")
            zout.writestr(info, data)
    return dst


def _scan(*paths: Path) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json",
                          *map(str, paths)], capture_output=True, text=True, timeout=600)
    return {Path(r["path"]).name: r for r in map(json.loads, out.stdout.splitlines())}


def _jit_load(*paths: Path) -> None:
    """torch.jit.load of each path, each in a process of its own; every one must succeed."""
    runs = run_each_forked(sys.executable, "import sys, torch; torch.jit.load(sys.argv[1])",
                           [[str(p)] for p in paths], paths[0].parent, ("torch",))
    assert [code for code, _ in runs] == [0] * len(paths), runs


def test_code_that_reaches_files_is_dangerous_and_runs_under_torch_jit_load(
        tmp_path: Path) -> None:
    kinds = ("from_file", "save", "indirect")
    canaries = {k: tmp_path / f"canary-{k}" for k in (*kinds, "respaced")}
    files = _make(tmp_path, {**{k: (k, canaries[k]) for k in kinds},
                             "plain": ("from_file", canaries["respaced"])})
    files["respaced"] = _respaced(files.pop("plain"), tmp_path / "respaced.pt")
    results = _scan(*files.values())
    assert not any(c.exists() for c in canaries.values())  # the scan ran none of them
    for kind, path in files.items():
        record = results[path.name]
        reach = [f for f in record["findings"] if f["code"] == "torchscript-reaches"]
        assert record["verdict"] == "dangerous", (kind, record["findings"])
        op = "aten::from_file" if kind in ("from_file", "respaced") else "aten::save"
        method = "_restore" if kind == "indirect" else "__setstate__"
        assert any(op in f["message"] and f".{method}, line" in f["message"]
                   and "while loading" in f["message"] and f["severity"] == "dangerous"
                   for f in reach), reach
    _jit_load(*files.values())
    for kind in files:
        assert canaries[kind].exists(), kind  # the real loader does the harm


def test_a_scripted_torch_nn_model_is_suspicious_with_one_plain_line(tmp_path: Path) -> None:
    path = _make(tmp_path, {"benign": ("benign", tmp_path / "unused")})["benign"]
    record = _scan(path)[path.name]
    shown = [f for f in record["findings"] if f["severity"] != "info"]
    assert record["verdict"] == "suspicious"
    assert [(f["code"], f["message"]) for f in shown] == [(
        "torchscript", "TorchScript runs its own code on load; no file, process or network "
        "operation found")]
    assert [g for g in record["globals"] if g["severity"] != "safe"] == []
    _jit_load(path)  # a real TorchScript archive
