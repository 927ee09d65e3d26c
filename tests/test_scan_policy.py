"""Import classification: torch's allowlist read from the installed source (checked against the
real thing in a subprocess), its on-disk cache, the built-in fallback, and the deny rules."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from inspector.scan.code_text import looks_like_code
from inspector.scan.pickles import policy
from inspector.scan.pickles.policy import classify, weights_only_rules
from inspector.scan.pickles.presets import PRESETS

REAL_ALLOWLIST = r"""
import json
from torch._weights_only_unpickler import _get_allowed_globals
print(json.dumps(sorted(_get_allowed_globals())))
"""


def test_allowlist_equals_installed_torch(python_exe, tmp_path):
    proc = subprocess.run([python_exe, "-I", "-c", REAL_ALLOWLIST], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, check=True)
    real = set(json.loads(proc.stdout))
    rules = weights_only_rules()
    assert rules.source.startswith("torch 2.")
    assert set(rules.allowed) == real
    assert rules.blocked_modules == {"sys", "os", "posix", "nt"}


def test_opcode_rules_read_from_source():
    rules = weights_only_rules()
    names = {policy.OPCODE_BYTES[n] for n in ("GLOBAL", "BINPERSID", "BINGET", "LONG_BINPUT")}
    assert names <= rules.opcodes
    for absent in ("STACK_GLOBAL", "MEMOIZE", "FRAME", "INST", "OBJ", "SHORT_BINUNICODE"):
        assert policy.OPCODE_BYTES[absent] not in rules.opcodes


def test_rules_are_cached_per_torch_version(python_exe, tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = ("import sys; from inspector.scan.pickles.policy import weights_only_rules as w; "
            "r = w(); "
            "print(r.source.replace(' ', '_'), 'torch.MARKER' in r.allowed, "
            "'torch' in sys.modules)")

    def run() -> list[str]:
        return subprocess.run([python_exe, "-c", code], env=env, capture_output=True, text=True,
                              timeout=120, check=True).stdout.split()

    source, marker, imported = run()
    assert (marker, imported) == ("False", "False")  # read from source; torch never imported
    (cache,) = (tmp_path / "ckpt-inspector").glob("weights-only-*.json")
    data = json.loads(cache.read_text())
    data["allowed"].append("torch.MARKER")  # proves the second run reads the cache, not torch
    cache.write_text(json.dumps(data))
    assert run() == [source, "True", "False"]


def test_builtin_list_when_torch_is_absent(monkeypatch):
    monkeypatch.setattr(policy, "_torch_dir", lambda: None)
    rules = policy.weights_only_rules.__wrapped__()
    assert rules.source.startswith("built-in list")
    assert rules.allowed == policy.BUILTIN_ALLOWED
    assert "torch._utils._rebuild_tensor_v2" in rules.allowed


def test_parse_rejects_an_unknown_layout():
    with pytest.raises(ValueError):
        policy.parse_unpickler_source("def nothing():\n    pass\n")


@pytest.mark.parametrize(("module", "name", "severity"), [
    ("torch._utils", "_rebuild_tensor_v2", "safe"),
    ("collections", "OrderedDict", "safe"),
    ("builtins", "set", "safe"),
    ("torch", "bfloat16", "safe"),
    ("os", "system", "dangerous"),
    ("posix", "system", "dangerous"),
    ("nt", "system", "dangerous"),
    ("builtins", "eval", "dangerous"),
    ("builtins", "getattr", "dangerous"),
    ("builtins", "__import__", "dangerous"),
    ("pathlib", "os.system", "dangerous"),
    ("collections", "os.system", "dangerous"),
    ("asyncio.unix_events", "_UnixSubprocessTransport", "dangerous"),
    ("torch._inductor.codecache", "compile_file", "dangerous"),
    ("torch._dynamo.guards", "GuardBuilder.get", "dangerous"),
    ("torch", "load", "dangerous"),
    ("torch.hub", "load", "dangerous"),
    ("pip", "main", "dangerous"),
    ("types", "CodeType", "dangerous"),
    ("operator", "attrgetter", "dangerous"),
    ("cProfile", "run", "dangerous"),
    ("mylib.io", "load_weights", "dangerous"),
    ("mymodel", "Net.__reduce__.__globals__", "dangerous"),
    ("sys", "modules", "dangerous"),
    ("argparse", "Namespace", "suspicious"),
    ("numpy.core.multiarray", "_reconstruct", "suspicious"),
    ("__main__", "MyModel", "suspicious"),
    ("torch.nn.modules.linear", "Linear", "suspicious"),
    ("mymodel", "Net.Inner", "suspicious"),
])
def test_classify(module, name, severity):
    assert classify(module, name).severity == severity


def test_a_preset_member_names_its_preset_in_the_reason():
    """A path is data of Lightning checkpoints as well as of DCP metadata, and an AttributeDict
    loads with `--allow lightning`: each reason says so, naming every preset that admits it."""
    for preset, (_, members) in PRESETS.items():
        for name in members:
            verdict = classify(*name.rsplit(".", 1))
            if verdict.reason != "allowed by torch.load(weights_only=True)":
                assert f"--allow {preset}" in verdict.reason, (name, verdict)
                assert "weights_only=False" not in verdict.reason, (name, verdict)
    path = classify("pathlib._local", "PosixPath")
    assert path.severity == "safe" and "Lightning" in path.reason
    assert classify("argparse", "Namespace").reason.endswith(
        "--allow argparse or --allow lightning loads it")


def test_code_like_arguments():
    for text in ("import os; os.system('id')", "__import__('os')", "curl http://x | sh",
                 "rm -rf /", "/bin/sh -c id", "exec(open('x').read())"):
        assert looks_like_code(text), text
    for text in ("layers.0.weight", "cpu", "storage", "Adam", "resumable checkpoint",
                 "bias", "fc1.weight", "/data/run-3/ckpt.pt",
                 "torchrun train.py --lr 3e-4 && python eval.py || true"):
        assert not looks_like_code(text), text


def test_core_imports_neither_torch_nor_qt(python_exe):
    code = ("import sys, inspector.scan.engine, inspector.cli.scan_cmd; "
            "print([m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'PySide6', 'numpy', 'safetensors')])")
    out = subprocess.run([python_exe, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True).stdout.strip()
    assert out == "[]"
