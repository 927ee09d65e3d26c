"""The scan names every global the load will need, so allowing what it lists loads in one round.

NumPy 2 pickles a dtype as numpy.dtype('f4') and torch.load(weights_only=True) then checks the
class of that object (numpy.dtypes.Float32DType), a name the pickle never spells: the scan
predicts it from the call's argument.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch
from factories import mal_os_system

from inspector.cli import main
from inspector.scan.engine import scan_file
from inspector.scan.pickles.policy import classify
from inspector.scan.pickles.presets import PRESETS, allow_flags, numpy_dtype_class
from inspector.tensors.load import allowed_global

CODES = ["f2", "f4", "f8", "f16", "c8", "c16", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
         "b1", "O8", "V8", "U3", "S4", "M8", "m8", "<f4", ">i2", "|b1"]

_LOAD = """
import importlib, sys, torch
names = sys.argv[2:]
objs = [getattr(importlib.import_module(n.rpartition(".")[0]), n.rpartition(".")[2])
        for n in names]
with torch.serialization.safe_globals(objs):
    torch.load(sys.argv[1], weights_only=True)
"""


@pytest.mark.parametrize("code", CODES)
def test_dtype_class_names_match_numpy(code):
    cls = type(np.dtype(code))
    assert numpy_dtype_class(np.dtype(code).__reduce__()[1][0]) == (
        f"{cls.__module__}.{cls.__name__}")
    assert numpy_dtype_class(code) == f"{cls.__module__}.{cls.__name__}"


def test_unknown_codes_predict_nothing():
    assert numpy_dtype_class("not a code") is None and numpy_dtype_class("f3") is None


@pytest.fixture
def numpy_checkpoint(tmp_path):
    path = tmp_path / "with_numpy.pt"
    arrays = {code: np.zeros(3, dtype=code) for code in ("f2", "f4", "f8", "i1", "i4", "i8",
                                                          "u1", "b1", "c8")}
    torch.save({"model": {"w": torch.ones(2)}, "arrays": arrays, "best": np.float32(0.5),
                "step": np.int64(7), "dtype": np.dtype("f4")}, path)
    return path


def _needed(path) -> list[str]:
    scan = scan_file(path).to_json()
    assert scan["verdict"] == "suspicious"
    return [f"{g['module']}.{g['name']}" for g in scan["globals"] if g["severity"] != "safe"]


def _loads(path, names) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LOAD, str(path), *names],
                          capture_output=True, text=True, timeout=120)


def test_allowing_what_the_scan_lists_loads_in_one_round(numpy_checkpoint):
    needed = _needed(numpy_checkpoint)
    assert {"numpy.dtypes.Float32DType", "numpy.dtypes.Int64DType",
            "numpy.dtypes.BoolDType"} <= set(needed)
    done = _loads(numpy_checkpoint, needed)
    assert done.returncode == 0, done.stderr[-800:]
    # without the predicted classes the same load is refused: the prediction is what helps
    without = _loads(numpy_checkpoint, [n for n in needed if not n.startswith("numpy.dtypes.")])
    assert without.returncode != 0 and "DType" in without.stderr


def test_inspect_in_the_jail_loads_with_one_round_of_allow_global(numpy_checkpoint, capsys):
    flags = [arg for name in _needed(numpy_checkpoint) for arg in ("--allow-global", name)]
    assert main(["inspect", str(numpy_checkpoint), "--json", *flags]) == 1  # loaded, suspicious
    result = json.loads(capsys.readouterr().out)
    assert result["error"] is None and result["tensors"]


def test_presets_admit_nothing_dangerous_and_resolve_here():
    for name, (_, members) in PRESETS.items():
        for dotted in members:
            module, _, leaf = dotted.rpartition(".")
            assert classify(module, leaf).severity != "dangerous", (name, dotted)
            assert allowed_global(dotted) is not None, (name, dotted)


def test_allow_flags_prefer_a_preset_and_name_the_rest():
    assert allow_flags(["numpy.ndarray", "foo.Bar", "numpy.dtypes.Float32DType"]) == [
        "--allow", "numpy", "--allow-global", "foo.Bar"]
    assert allow_flags(["numpy.dtypes.ObjectDType"]) == [
        "--allow-global", "numpy.dtypes.ObjectDType"]


def test_the_refusal_prints_the_flags_that_load_it(numpy_checkpoint, capsys):
    assert main(["inspect", str(numpy_checkpoint), "--json"]) == 5
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "weights_only_refused"
    flags = shlex.split(error["message"].split("if you trust them, add: ", 1)[1])
    assert flags == ["--allow", "numpy"]
    assert main(["inspect", str(numpy_checkpoint), "--json", *flags]) == 1  # loaded, suspicious
    result = json.loads(capsys.readouterr().out)
    assert result["error"] is None and result["tensors"]


def test_a_preset_never_lets_a_dangerous_file_load(tmp_path, canary, capsys):
    path = mal_os_system(tmp_path / "evil.pt", canary)
    assert main(["inspect", str(path), "--json", "--allow", "numpy", "--allow", "argparse"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "refused_dangerous"


def test_a_refused_build_names_the_class_the_pickle_never_spells(numpy_checkpoint, capsys):
    short = [n for n in _needed(numpy_checkpoint) if not n.startswith("numpy.dtypes.")]
    flags = [arg for name in short for arg in ("--allow-global", name)]
    assert main(["inspect", str(numpy_checkpoint), "--json", *flags]) == 5
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "weights_only_refused"
    assert any(g.startswith("numpy.dtypes.") for g in error["globals"]), error
