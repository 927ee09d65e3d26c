"""What a load would do, judged (issue 34): each hostile sample is first proven to run its
payload under its real loader in a throwaway process (its canary appears), then scanned through
the scan engine and the `ckpt-inspector scan` command: dangerous, and the canary never appears.
The benign files of real tools are never dangerous, each with the verdict its rule gives."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from load_time_samples import BENIGN, HOSTILE, LOADER, SPELLING_TWINS
from proofs import run_each_forked

from inspector.scan.engine import scan_file


def _remove(path: Path) -> None:
    if path.is_dir():
        for child in sorted(path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        path.rmdir()
    else:
        path.unlink()


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Every hostile sample, built and proven to run its payload under its loader."""
    work = tmp_path_factory.mktemp("load-time")
    samples = {}
    for name, (_, build, _) in HOSTILE.items():
        canary = work / f"{name}.canary"
        samples[name] = (build(work / f"{name}.bin", canary), canary)
        assert not canary.exists()
    runs = [[HOSTILE[name][0], str(path)] for name, (path, _) in samples.items()]
    outputs = run_each_forked(python_exe, LOADER, runs, work, ("joblib", "torch", "torch.package"),
                              isolated=True)
    for (name, (_, canary)), (code, output) in zip(samples.items(), outputs, strict=True):
        assert code == 0, output
        assert canary.exists(), f"{name}: the payload did not run under {HOSTILE[name][0]}"
        _remove(canary)
    return samples


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_sample_is_dangerous_and_never_run(proven, name):
    path, canary = proven[name]
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    evidence = [f.message for f in res.findings if f.severity == "dangerous"]
    evidence += [f"{g.import_name}: {g.reason}" for g in res.globals if g.severity == "dangerous"]
    assert any(HOSTILE[name][2] in e for e in evidence), evidence
    assert not canary.exists()


def test_the_scan_command_calls_every_hostile_sample_dangerous(proven, python_exe):
    """`ckpt-inspector scan` on the whole folder: one dangerous line per sample, exit 2."""
    paths = [str(path) for path, _ in proven.values()]
    proc = subprocess.run([python_exe, "-m", "inspector", "scan", "--json", *paths],
                          capture_output=True, text=True, timeout=600)
    results = {Path(r["path"]).name: r["verdict"] for r in map(json.loads,
                                                              proc.stdout.splitlines())}
    assert results == {Path(p).name: "dangerous" for p in paths}, proc.stderr[-2000:]
    assert proc.returncode == 2
    assert not [c for _, c in proven.values() if c.exists()]


# The verdict each benign file's rule gives: scikit-learn's classes and NumPy arrays need
# weights_only=False (suspicious, never dangerous); hyper-parameter containers are
# suspicious with the preset that admits them named.
BENIGN_VERDICTS = {
    "sklearn_pipeline_joblib": "suspicious",
    "sklearn_models_joblib": "suspicious",
    "numpy_generators_pickle": "suspicious",
    "grad_scaler_object": "suspicious",
    "numpy_arrays_joblib": "suspicious",
    "numpy_arrays_joblib_compressed": "suspicious",
    "lightning_namespace_hparams": "suspicious",
    "lightning_omegaconf_hparams": "suspicious",
    "package_of_a_model": "suspicious",  # its own model code runs at load: package-code
} | dict.fromkeys(SPELLING_TWINS, "suspicious")  # code that runs at load, reaching nothing


@pytest.fixture(scope="module")
def benign(tmp_path_factory):
    work = tmp_path_factory.mktemp("load-time-benign")
    return {name: build(work / f"{name}.bin") for name, build in BENIGN.items()}


def test_every_benign_builder_has_a_verdict():
    assert set(BENIGN_VERDICTS) == set(BENIGN)


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_benign_file_of_a_real_tool_is_never_dangerous(benign, name):
    res = scan_file(benign[name])
    assert res.verdict == BENIGN_VERDICTS[name], res.to_json()
    assert not [f for f in res.findings if f.severity == "dangerous"]
    assert not [g for g in res.globals if g.severity == "dangerous"]
    # joblib's reading steps over array data as joblib does: every import is one it reaches
    assert not [f for f in res.findings if f.code in ("malformed", "joblib-array-unread",
                                                      "parser-differential")], res.to_json()


@pytest.mark.parametrize("name", ["lightning_namespace_hparams", "lightning_omegaconf_hparams"])
def test_hyper_parameters_name_the_preset_that_loads_them(benign, name):
    """Every global that is not safe names the --allow preset that admits it."""
    res = scan_file(benign[name])
    flagged = [g for g in res.globals if g.severity != "safe"]
    assert flagged
    assert all("--allow " in g.reason for g in flagged), [(g.import_name, g.reason)
                                                          for g in flagged]


@pytest.mark.parametrize(("name", "preset"), [("lightning_namespace_hparams", "argparse"),
                                              ("lightning_omegaconf_hparams", "omegaconf")])
def test_the_named_preset_loads_the_hyper_parameters_with_weights_only(benign, name, preset):
    """The jailed worker (torch.load(weights_only=True)) refuses the file without the preset
    and loads it, hyper-parameters included, with exactly the preset's globals allowed."""
    from inspector.sandbox.host import client
    from inspector.scan.pickles.presets import PRESETS

    refused = client.inspect_file(benign[name])
    assert refused.error is not None
    assert f"--allow {preset}" in refused.error.message, refused.error
    report = client.inspect_file(benign[name], allow_globals=list(PRESETS[preset][1]))
    assert report.error is None, report.error
    keys = {o.key for o in report.objects}
    assert any(k.startswith("hyper_parameters.") for k in keys), sorted(keys)[:20]


BENIGN_SOURCE = '''
import logging
import os
from pathlib import Path

import torch

logger = logging.getLogger(__name__)
ROOT = os.path.join(os.path.dirname(__file__), "assets")
HERE = Path(__file__).parent


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pretrained = torch.load(os.path.join(ROOT, "w.pt"))  # runs when called, not loaded

    def forward(self, x):
        return getattr(self, "pretrained") * x
'''
HOSTILE_SOURCE = '''
import os as o
from pathlib import Path


def _setup():
    return __import__("subprocess").Popen(["id"])


class Box:
    handle = _setup()

    def __setstate__(self, state):
        o.system("id")
        Path("/tmp/x").write_text("y")
'''


def test_package_sources_are_judged_by_what_runs_at_load():
    """Everyday module code (os.path, logging, super, getattr, a torch.load inside a method
    nobody calls while loading) is no finding; what the class body and __setstate__ reach is,
    through aliases, attribute chains and the module's own functions."""
    from inspector.formats.archives.torch_package import judge_source

    imports, bad = judge_source(BENIGN_SOURCE)
    assert imports == ["logging", "os", "pathlib.Path", "torch"] and bad == []
    _, bad = judge_source(HOSTILE_SOURCE)
    assert sorted(b.split(":", 1)[0] for b in bad) == [
        "os.system", "pathlib.Path.write_text", "subprocess.Popen"], bad


@pytest.mark.parametrize("statement", [
    "(torch).save(x, p)", "((torch)).save(x, p)", "(ops.aten).save(x, p)",
    "(ops).aten.save(x, p)", "(torch  # a comment\n ).from_file(p, True, 2)",
    "(torch.ops.aten\n).from_file(p, True, 2)"])
def test_every_spelling_of_a_reaching_operator_is_found(statement):
    """What TorchScript's compiler resolves a spelling to, parentheses, comments and line
    breaks aside (Python's parser reads the code as TorchScript's does)."""
    from inspector.formats.archives.script_code import op_uses

    code = f"def f(x: Tensor, p: str):\n    {statement}\n"
    assert [u.op for u in op_uses(code) if u.reaches] in (["aten::save"], ["aten::from_file"])


@pytest.mark.parametrize("names", [
    ["a/data.pkl", "a/constants.pkl", "a/CODE/__torch__.py"],
    ["a/DATA.PKL", "a/Constants.Pkl", "a/Code/__TORCH__.PY"]])
def test_a_torchscript_archive_is_known_by_the_names_torch_finds(names):
    """torch's reader (miniz) finds a record by its name in any ASCII letter case."""
    from inspector.formats.archives.script_code import code_members
    from inspector.formats.archives.zipread import Member
    from inspector.formats.sniffing import zip_kind

    assert zip_kind(names) == "torchscript"
    members = [Member(n, n, 0, 0, 0, 0, 0, 0, 0, 0, 0) for n in names]
    assert [m.name for m in code_members(members)] == [names[2]]


def test_a_bare_name_is_judged_as_every_star_imported_module_would_bind_it():
    from inspector.formats.archives.torch_package import judge_source

    imports, bad = judge_source("from math import *\nfrom os import *\nsystem('id')\n"
                                "x = getcwd()\n")
    assert imports == ["math.*", "os.*"]
    assert [b.split(":", 1)[0] for b in bad] == ["os.system"], bad
    assert judge_source("from os import *\nx = getcwd()\n")[1] == []


def test_every_method_an_opcode_runs_is_run_at_load_in_package_source():
    """One registry of the methods unpickling runs unasked, read by both judges."""
    from inspector.formats.archives.torch_package import RUN_AT_LOAD
    from inspector.scan.pickles.opcodes import IMPLICIT_METHODS

    assert {m for methods in IMPLICIT_METHODS.values() for m in methods} | {
        "__del__", "__setattr__", "__hash__"} <= RUN_AT_LOAD


@pytest.mark.parametrize(("statement", "op"), [
    ("torch.autograd.save(x, p)", "aten::save"),
    ("ops.c10d.autograd.save(x, p)", "aten::save"),
    ("t = torch\n    t.save(x, p)", "aten::save"),
    ("self = torch\n    self.save(x, p)", "aten::save"),
    ("s = torch.save\n    s(x, p)", "aten::save"),
    ("o = ops.aten\n    o.from_file(p, True, 2)", "aten::from_file"),
    ('getattr(torch, "sa" "ve")(x, p)', "aten::save"),
    ('getattr(getattr(ops, "aten"), "save")(x, p)', "aten::save"),
    ("r = rpc_async\n    r(p, x)", "prim::rpc_async"),
    ("c = ops.c10d\n    c.barrier(x)", "c10d::*"),
    ("c = torch.classes\n    c.dist_rpc.Agent(x)", "dist_rpc::*")])
def test_a_reaching_operator_is_found_through_any_binding(statement, op):
    """The compiler reaches an operator through any binding of its module or of itself to a
    name (`t = torch`, `s = torch.save`), `torch.autograd` (mapped back to aten) and getattr
    (whose string it joins): the operator's or namespace's name is an attribute whatever the
    binding."""
    from inspector.formats.archives.script_code import op_uses

    code = f"def f(self, x: Tensor, p: str):\n    {statement}\n"
    assert op in [u.op for u in op_uses(code) if u.reaches]


def test_everyday_torchscript_names_reach_nothing():
    from inspector.formats.archives.script_code import op_uses

    code = ("def f(self, x: Tensor):\n    t = torch\n    y = getattr(self, \"0\")\n"
            "    saved = t.zeros(2)\n    return ops.aten.add(x, y.save_mode)\n")
    assert [u for u in op_uses(code) if u.reaches] == []
