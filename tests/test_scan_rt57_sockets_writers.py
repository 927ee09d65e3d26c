"""torch's own socket openers and file writers are on the deny list (round 57).

Round 56 denied torch's process launchers; what opens a socket or writes a file through torch
stayed merely suspicious: `torch.distributed.init_process_group('gloo', 'file://PATH', ...)`
in a pickle creates PATH (and with `tcp://` listens or connects), `torch.onnx.export` in
shipped source writes its file anywhere. `init_process_group` also hid behind a star import
(`torch/distributed/__init__.py` does `from .distributed_c10d import *`), which the re-export
reader did not follow. Each hostile sample is proven under its real loader (a canary appears)
and scanned (dangerous, the canary never appears), beside a twin that stays suspicious."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.scan.pickles.policy import classify


def _reduce(module: str, name: str, args: tuple) -> bytes:
    """A protocol-2 pickle calling `module.name(*args)` under that name."""
    return (b"\x80\x02c" + f"{module}\n{name}\n".encode() + pickle.dumps(args, 2)[2:-1]
            + b"R.")


def _scan(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(path)],
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.splitlines()[0])


@pytest.mark.parametrize(("module", "name"), [
    ("torch.distributed", "init_process_group"),
    ("torch.distributed.distributed_c10d", "init_process_group"),
    ("torch.distributed.rendezvous", "rendezvous"),
    ("torch.distributed.device_mesh", "init_device_mesh"),
    ("torch.onnx", "export"),
    ("torch.utils.tensorboard", "SummaryWriter"),
    ("torch.utils.hipify.hipify_python", "hipify"),
    ("torch.profiler", "tensorboard_trace_handler"),
])
def test_torch_socket_openers_and_file_writers_are_dangerous(module, name):
    verdict = classify(module, name)
    assert verdict.severity == "dangerous", verdict


@pytest.mark.parametrize(("module", "name"), [
    ("torch.distributed", "is_available"),
    ("torch.distributed", "new_group"),
    ("torch.distributed.device_mesh", "DeviceMesh"),
    ("torch.distributed.tensor", "DTensor"),
])
def test_what_opens_and_writes_nothing_keeps_its_verdict(module, name):
    assert classify(module, name).severity == "suspicious"


def test_init_process_group_in_a_pickle_is_dangerous_and_never_run(tmp_path):
    canary = tmp_path / "store"
    hostile, twin = tmp_path / "hostile.pkl", tmp_path / "twin.pkl"
    hostile.write_bytes(_reduce("torch.distributed", "init_process_group",
                                ("gloo", f"file://{canary}", None, 1, 0)))
    # a REDUCE outside the allow-lists is dangerous whatever it calls: the twin only names one
    twin.write_bytes(b"\x80\x02ctorch.distributed\nis_available\n.")
    res = _scan(hostile)
    assert res["verdict"] == "dangerous", res
    assert "init_process_group" in json.dumps(res["globals"])
    assert _scan(twin)["verdict"] == "suspicious"
    assert not canary.exists()
    # the store's file is removed when its last user exits: looked for before the child ends
    ran = subprocess.run([sys.executable, "-c", "import os, pickle, sys; "
                          "pickle.load(open(sys.argv[1], 'rb')); "
                          "print(os.path.exists(sys.argv[2]))",
                          str(hostile), str(canary)], capture_output=True, text=True, timeout=300)
    assert ran.stdout.split() == ["True"], f"the payload did not run: {ran.stderr[-2000:]}"


def test_shipped_source_exporting_onnx_is_dangerous_and_never_run(tmp_path):
    pytest.importorskip("onnx")
    canary = tmp_path / "out.onnx"
    hostile, twin = tmp_path / "hostile", tmp_path / "twin"
    body = "import torch\nm = torch.nn.Linear(2, 2)\n"
    for folder, tail in ((hostile, f"torch.onnx.export(m, (torch.zeros(1, 2),), {str(canary)!r}, "
                                   "dynamo=False)\n"),
                         (twin, "m(torch.zeros(1, 2))\n")):
        folder.mkdir()
        (folder / "modeling_x.py").write_text(body + tail)
    res = _scan(hostile)
    assert res["verdict"] == "dangerous", res
    assert "torch.onnx.export" in json.dumps(res["findings"])
    assert not canary.exists()
    assert _scan(twin)["verdict"] == "suspicious"
    ran = subprocess.run([sys.executable, "-c", "import modeling_x"], cwd=hostile,
                         capture_output=True, text=True, timeout=300)
    assert canary.exists(), f"the payload did not run under import: {ran.stderr[-2000:]}"
