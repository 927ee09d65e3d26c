"""`inspect` end to end: static scan, file hash, jailed weights_only load, contract, CLI codes."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
import zipfile
from pathlib import Path

import factories
import pytest
import torch

from inspector.checkpoint.results import LoadError
from inspector.cli import main
from inspector.core.progress import Cancelled, CancelToken
from inspector.sandbox.host.client import inspect_file

OWN_WORKERS = True  # how workers start is under test here: no session fork server

pytest_plugins = ("sandbox_fixtures",)  # fixture: unchanged


def _digest(t: torch.Tensor) -> str:
    raw = t.int_repr() if t.is_quantized else t
    return hashlib.sha256(raw.contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()


def test_cli_json_gives_the_inspect_contract(tmp_path, capsys, unchanged):
    path = unchanged(factories.save_state_dict(tmp_path / "model.pt"))
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None, report["error"]
    for key in ("path", "size", "sha256", "format", "scan", "sandbox", "digest_algorithm",
                "tensors", "objects", "error"):
        assert key in report
    assert report["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert report["format"] == "pytorch-zip" and report["scan"]["verdict"] == "safe"
    assert report["digest_algorithm"] == "sha256"
    assert report["sandbox"]["level"] in ("full", "partial", "process-only")
    assert report["timing"]["startup_s"] > 0
    state = factories.small_state_dict()
    by_key = {t["key"]: t for t in report["tensors"]}
    assert set(by_key) == set(state)
    for key, t in state.items():
        rec = by_key[key]
        assert rec["digest"] == _digest(t)
        assert rec["shape"] == list(t.shape) and rec["dtype"] == "float32"
        assert rec["min"] == pytest.approx(float(t.min())) and rec["nan"] == 0


def test_inspect_training_checkpoint_every_dtype_and_nested_containers(tmp_path, unchanged):
    state = {"train": factories.training_checkpoint(),
             "dtypes": factories.every_dtype_state_dict(),
             "nested": factories.nested_containers()}
    path = unchanged(factories.save_state_dict(tmp_path / "all.pt", state))
    events = []
    report = inspect_file(path, on_event=events.append)
    assert report.error is None, report.error
    kinds = [e["type"] for e in events]
    assert kinds[0] == "jail" and kinds.count("tensor") == len(report.tensors)
    assert kinds.count("object") == len(report.objects)
    by_key = {t.key: t for t in report.tensors}
    assert "train.optimizer.state.0.exp_avg" in by_key
    for name, t in state["dtypes"].items():
        rec = by_key[f"dtypes.{name}"]
        assert rec.digest == _digest(t), name
    assert "quantized" in by_key["dtypes.qint8"].flags
    assert by_key["dtypes.bfloat16"].max == 5.0
    assert sorted(by_key["nested.shared.0"].shared_with) == ["nested.shared.1"]
    objects = {o.key: o for o in report.objects}
    assert objects["train.epoch"].repr == "3"
    assert objects["train.optimizer.param_groups.0.lr"].type == "builtins.float"
    assert objects["nested.big_int"].repr == str(2**70)


def test_legacy_format_loads_without_mmap(tmp_path, unchanged):
    path = unchanged(factories.save_legacy(tmp_path / "legacy.pt"))
    report = inspect_file(path)
    assert report.error is None and report.format == "pytorch-legacy"
    assert len(report.tensors) == 4


def test_weights_only_refusal_names_globals_and_allowing_exactly_them_loads(
        tmp_path, capsys, unchanged):
    state = {"w": torch.ones(3), "hparams": argparse.Namespace(lr=0.5, layers=2)}
    path = unchanged(factories.save_state_dict(tmp_path / "hp.pt", state))
    assert main(["inspect", str(path), "--json"]) == 5
    refused = json.loads(capsys.readouterr().out)
    assert refused["error"]["code"] == "weights_only_refused"
    assert refused["error"]["globals"] == ["argparse.Namespace"]
    assert "argparse.Namespace" in refused["error"]["message"]
    assert main(["inspect", str(path), "--allow-global", "argparse.Namespace"]) == 1
    out = capsys.readouterr().out
    assert "hparams.lr: builtins.float = 0.5" in out and "hparams.layers" in out
    assert "2 non-tensor values" in out


def test_dangerous_file_is_refused_and_an_override_still_needs_weights_only(
        tmp_path, canary, capsys, unchanged):
    path = unchanged(factories.mal_zip_data_pkl(tmp_path / "evil.pt", canary))
    assert main(["inspect", str(path)]) == 2
    assert "dangerous" in capsys.readouterr().out
    report = inspect_file(path)
    assert report.scan.verdict == "dangerous"
    assert report.error.code == "refused_dangerous"
    assert report.sandbox is None  # no worker was started
    # Overridden, the file reaches the worker, where weights_only itself refuses it.
    report = inspect_file(path, override_dangerous=True)
    assert report.error.code == "weights_only_refused"
    assert report.sandbox.level
    assert any(g.endswith("system") for g in report.error.globals)
    allowed = inspect_file(path, allow_globals=report.error.globals,
                           override_dangerous=True)
    assert allowed.error.code == "refused_global"


def test_torchscript_is_never_loaded(tmp_path, unchanged):
    # its weights are read from their records (tests/test_torchscript_static.py), its code shown
    path = unchanged(factories.save_torchscript(tmp_path / "script.pt"))
    report = inspect_file(path, override_dangerous=True)
    assert report.error is None and report.format == "torchscript"
    assert {t.key for t in report.tensors} == {"weight", "bias"}
    assert report.code and report.scan.verdict == "suspicious"


def _clear(error: LoadError) -> None:
    assert error.message and "\n" not in error.message
    assert "Traceback" not in error.message


def test_truncated_archive_gives_a_clear_error(tmp_path, unchanged):
    data = factories.save_state_dict(tmp_path / "full.pt").read_bytes()
    path = tmp_path / "truncated.pt"
    path.write_bytes(data[: len(data) * 2 // 3])
    unchanged(path)
    report = inspect_file(path)
    assert report.error.code in ("load_failed", "unsupported_format"), report.error
    _clear(report.error)


def test_bit_damaged_pickle_gives_a_clear_error(tmp_path, unchanged):
    path = factories.save_state_dict(tmp_path / "damaged.pt")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + 2 : start + 40] = bytes(b ^ 0x5A for b in data[start + 2 : start + 40])
    path.write_bytes(bytes(data))
    unchanged(path)
    report = inspect_file(path, override_dangerous=True)
    assert report.error is not None
    assert report.error.code in ("load_failed", "weights_only_refused",
                                 "unsupported_format"), report.error
    _clear(report.error)


def test_cancel_stops_the_worker_and_raises(tmp_path):
    path = factories.save_state_dict(tmp_path / "model.pt")
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        inspect_file(path, cancel=token)
    assert time.monotonic() - started < 10
    assert not _my_workers()


def _my_workers() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and b"inspector.sandbox.worker.main" in cmd:
            found.append(int(pid))
    return found


def test_not_a_checkpoint_exits_3(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert main(["inspect", str(text)]) == 3
    assert "cannot load" in capsys.readouterr().out


def test_safetensors_file_is_inspected_without_torch_load(tmp_path, unchanged):
    state = {"w": torch.randn(5, 3), "b": torch.arange(4, dtype=torch.int16),
             "h": torch.randn(6).bfloat16(), "s": torch.tensor(1.5)}
    path = unchanged(factories.save_safetensors(tmp_path / "m.safetensors", state))
    report = inspect_file(path)
    assert report.error is None and report.format == "safetensors"
    by_key = {t.key: t for t in report.tensors}
    assert {k: by_key[k].digest for k in state} == {k: _digest(t) for k, t in state.items()}
    assert by_key["b"].max == 3 and by_key["s"].mean == 1.5


def test_an_interactive_caller_can_ask_the_worker_to_yield_the_cores(tmp_path):
    path = tmp_path / "sd.pt"
    torch.save({"w": torch.ones(4)}, path)
    report = inspect_file(path, limits={"nice": 10})
    assert report.error is None and len(report.tensors) == 1
    assert any(layer.startswith("rlimits") and "nice+10" in layer
               for layer in report.sandbox.active)
    assert not any("nice" in layer for layer in inspect_file(path).sandbox.active)


@pytest.fixture
def degraded(monkeypatch):
    """Leave jail layers off through the self-test switch; restore the required level after."""
    from inspector.sandbox.host import client, jobs

    monkeypatch.setattr(jobs, "_required_jail", client.DEFAULT_REQUIRED_JAIL)
    monkeypatch.setenv(client.SELFTEST_ENV, "1")

    def leave_off(layers: str) -> None:
        monkeypatch.setenv(client.DISABLE_ENV, layers)

    return leave_off


def test_require_jail_full_refuses_a_partial_jail_before_loading(tmp_path, capsys, degraded):
    path = factories.save_state_dict(tmp_path / "model.pt")
    degraded("namespaces")
    assert main(["inspect", str(path), "--json", "--require-jail", "full"]) == 9
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["code"] == "jail_refused" and report["tensors"] == []
    assert report["sandbox"]["level"] == "partial"
    assert "namespaces" in report["sandbox"]["description"]
    assert main(["inspect", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sandbox"]["level"] == "partial"


def test_process_only_is_refused_by_default_and_allowed_with_any(tmp_path, capsys, degraded):
    path = factories.save_state_dict(tmp_path / "model.pt")
    degraded("namespaces,landlock,seccomp")
    assert main(["inspect", str(path)]) == 9
    out = capsys.readouterr().out
    assert "process-only" in out and "--require-jail any" in out
    assert main(["inspect", str(path), "--json", "--require-jail", "any"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and report["sandbox"]["level"] == "process-only"
    assert len(report["tensors"]) == len(factories.small_state_dict())


@pytest.mark.parametrize("argv", [
    ["inspect", "F"], ["convert", "F"], ["diff", "A", "B"], ["consistency", "F"],
    ["report", "F", "-o", "r.json"], ["verify", "F", "--manifest", "M"],
    ["manifest", "create", "F", "-o", "m.json"],
])
def test_every_command_that_loads_takes_require_jail(argv):
    from inspector.cli import build_parser

    args = build_parser(argv[0]).parse_args([*argv, "--require-jail", "any"])
    assert args.require_jail == "any"
    assert build_parser(argv[0]).parse_args(argv).require_jail == "partial"
