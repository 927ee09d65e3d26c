"""The device a consistency reply names is this host's (`sandbox.host.claims.consistency`): a
CUDA run only where the NVIDIA driver lists the GPU of that device minor (/dev/nvidiactl,
/dev/nvidiaN, /proc/driver/nvidia/gpus/*/information: what the jail reads before it is
entered), labelled with the model name the driver gives it; `auto` asks for that GPU where the
host has one, so a CPU answer is refuted. A fault asked before a run the loop never reaches is
refused before any work, by the CLI (exit 5), the engine and the app's pane.

Lies run as hostile code inside a real `consistency` job (the jail's self-test hook); a GPU
host is this host's driver files as the host reads them, replaced.
"""

from __future__ import annotations

import os

import pytest
import torch

from inspector.cli import main
from inspector.sandbox.host import consistency_job
from inspector.sandbox.host.claims import consistency
from inspector.sandbox.host.consistency_job import ConsistencyRequest, run_consistency
from inspector.sandbox.host.jobs import SandboxError, run_job

REFUTED, BAD_REQUEST = 6, 5
H100 = "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90)"

FAKE_DEVICE = """
    import torch
    import inspector.sandbox.worker.consistency.op as op
    DEVICE, LABEL = {device!r}, {label!r}
    op.choose_device = lambda spec: (torch.device("cpu"), LABEL)
    real = op.json_safe
    def safe(obj):
        out = real(obj)
        if isinstance(out, dict):
            if out.get("type") == "device":
                out.update(device=DEVICE, label=LABEL)
            elif "device_label" in out:
                out.update(device=DEVICE, device_label=LABEL)
        return out
    op.json_safe = safe
"""
"""A worker that runs on the CPU and says it ran on DEVICE, labelled LABEL."""


def _file(tmp_path):
    g = torch.Generator().manual_seed(0)
    path = tmp_path / "c.pt"
    torch.save({"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}, path)
    return path


def _fake(hostile, device: str, label: str) -> None:
    hostile(FAKE_DEVICE.format(device=device, label=label))


def _gpu_host(monkeypatch, model: str) -> None:
    """This host's driver lists one GPU, of device minor 0, named `model`."""
    monkeypatch.setattr(consistency, "host_gpu_model", lambda minor: model if minor == 0
                        else None)


def _run(path, device: str) -> int:
    return main(["consistency", str(path), "--device", device, "--repeats", "3"])


def test_a_gpu_run_on_a_host_without_a_gpu_is_refuted(tmp_path, hostile, capsys) -> None:
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this host has an NVIDIA driver")
    path = _file(tmp_path)
    _fake(hostile, "cuda:0", H100)
    request = ConsistencyRequest(str(path), device="cuda:0", repeats=3).to_request()
    assert run_job(request, timeout=300)["device_label"] == H100  # the lie, unchecked
    assert _run(path, "cuda:0") == REFUTED
    err = capsys.readouterr().err
    assert "this host has no NVIDIA GPU of device minor 0" in err


def test_a_gpu_named_otherwise_than_its_driver_names_it_is_refuted(tmp_path, hostile, capsys,
                                                                   monkeypatch) -> None:
    path = _file(tmp_path)
    _gpu_host(monkeypatch, "NVIDIA A10G")
    _fake(hostile, "cuda:0", H100)
    assert _run(path, "cuda:0") == REFUTED
    assert "labelled cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90), but this host's GPU is " \
           "NVIDIA A10G" in capsys.readouterr().err


def test_a_gpu_named_as_its_driver_names_it_passes(tmp_path, hostile, capsys,
                                                   monkeypatch) -> None:
    """The twin of the one above: the label the worker gives a GPU (`bitcheck.choose_device`:
    the device and torch's name for it, which is the driver's)."""
    path = _file(tmp_path)
    _gpu_host(monkeypatch, "NVIDIA A10G")
    _fake(hostile, "cuda:0", "cuda:0 (NVIDIA A10G)")
    assert _run(path, "cuda:1") == REFUTED  # no GPU of minor 1 on this host
    capsys.readouterr()
    assert _run(path, "cuda:0") == 0
    assert "CONSISTENT on cuda:0 (NVIDIA A10G)" in capsys.readouterr().out


def test_auto_asks_for_the_hosts_gpu_and_a_cpu_answer_is_refuted(tmp_path, hostile, capsys,
                                                                 monkeypatch) -> None:
    path = _file(tmp_path)
    here = consistency.host_gpu_model(0) is not None and consistency._torch_built_for_cuda()
    assert ConsistencyRequest(str(path)).to_request()["device"] == ("cuda:0" if here else "auto")
    _gpu_host(monkeypatch, "NVIDIA A10G")
    # the CPU wheel (this project's pin) on a GPU host: auto runs on the CPU, as before
    monkeypatch.setattr(consistency, "_torch_built_for_cuda", lambda: False)
    assert ConsistencyRequest(str(path)).to_request()["device"] == "auto"
    monkeypatch.setattr(consistency, "_torch_built_for_cuda", lambda: True)
    request = ConsistencyRequest(str(path), repeats=3).to_request()
    assert request["device"] == "cuda:0"
    assert request["limits"]["memory_mb"] >= 1 << 20
    _fake(hostile, "cpu", "CPU (no CUDA device found)")
    assert run_job(request, timeout=300)["device"] == "cpu"  # the worker says it found none
    assert _run(path, "auto") == REFUTED
    assert "the run was asked on cuda:0, reported on cpu" in capsys.readouterr().err


def test_the_driver_files_name_the_gpu_of_each_minor(tmp_path, monkeypatch) -> None:
    """`host_gpu_model` reads the driver's information files as `fresh_root` does."""
    gpus, dev = tmp_path / "gpus", tmp_path / "dev"
    for address, minor, model in (("0000:01:00.0", 1, "NVIDIA A10G"),
                                  ("0000:02:00.0", 0, "NVIDIA GeForce RTX 3090")):
        (gpus / address).mkdir(parents=True)
        (gpus / address / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 77\nGPU UUID: \t GPU-eaf2\n"
            f"Bus Location: \t {address}\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n")
    dev.mkdir()
    real = consistency.os.path.exists
    monkeypatch.setattr(consistency, "DRIVER_GPUS", str(gpus))
    monkeypatch.setattr(consistency.os.path, "exists", lambda p: real(
        str(p).replace("/dev/", f"{dev}/", 1)) if str(p).startswith("/dev/") else real(p))
    assert consistency.host_gpu_model(0) is None  # no /dev/nvidiactl: no driver
    (dev / "nvidiactl").touch()
    (dev / "nvidia0").touch()
    assert consistency.host_gpu_model(0) == "NVIDIA GeForce RTX 3090"
    assert consistency.host_gpu_model(1) is None  # its node is not there
    (dev / "nvidia1").touch()
    assert consistency.host_gpu_model(1) == "NVIDIA A10G"
    assert consistency.host_gpu_model(2) is None


@pytest.mark.parametrize("fault", ["w:5:30@9", "w:5:30@4", "w:5:30@0"])
def test_a_fault_outside_the_runs_is_refused_before_any_work(tmp_path, capsys, monkeypatch,
                                                             fault) -> None:
    path = _file(tmp_path)

    def no_work(*_a, **_k):
        raise AssertionError("the request was worked on")

    monkeypatch.setattr(consistency_job, "static_scan", no_work)
    monkeypatch.setattr(consistency_job, "run_job", no_work)
    assert main(["consistency", str(path), "--device", "cpu", "--repeats", "3",
                 "--inject", fault]) == BAD_REQUEST
    captured = capsys.readouterr()
    assert "injected" not in captured.out and "CONSISTENT" not in captured.out
    assert "but the runs are 1 to 3" in captured.err
    spec = ConsistencyRequest(str(path), device="cpu", repeats=3,
                              inject={"key": "w", "index": 5, "bit": 30,
                                      "iteration": int(fault.split("@")[1])})
    with pytest.raises(SandboxError) as refused:
        run_consistency(spec)
    assert refused.value.code == "bad_request"


def test_a_fault_inside_the_runs_is_asked(tmp_path) -> None:
    path = _file(tmp_path)
    for iteration in (1, 3):
        spec = ConsistencyRequest(str(path), device="cpu", repeats=3,
                                  inject={"key": "w", "index": 5, "bit": 30,
                                          "iteration": iteration})
        assert spec.refusal() is None
        assert spec.to_request()["inject"]["iteration"] == iteration


def test_the_apps_pane_refuses_a_fault_after_the_last_run(qtbot, tmp_path) -> None:
    from inspector.gui.panes.consistency_pane import ConsistencyPane

    pane = ConsistencyPane()
    qtbot.addWidget(pane)
    pane.set_file(str(_file(tmp_path)))
    pane.repeats.setValue(3)
    pane.inject_box.setChecked(True)
    pane.inject_key.setText("w")
    pane.inject_run.setValue(3)
    assert pane.request().inject["iteration"] == 3
    pane.inject_run.setValue(4)  # the box offers no run after the last
    assert pane.inject_run.value() == 3 and pane.request().inject["iteration"] == 3
    pane.repeats.setValue(2)
    assert pane.inject_run.value() == 2
    pane.inject_run.setMaximum(4)  # and a request that still asks one is refused, said in a line
    pane.inject_run.setValue(4)
    with pytest.raises(ValueError, match="before run 4, but the runs are 1 to 2"):
        pane.request()


def test_the_hosts_constants_are_the_probes() -> None:
    """The probe's compute dtypes and output columns, which the host cannot import (torch)."""
    from inspector.sandbox.host.claims.consistency_elements import COMPUTED, PROBE_COLUMNS
    from inspector.sandbox.worker.consistency import weights_probe

    assert PROBE_COLUMNS == weights_probe.PROBE_COLUMNS
    assert set(COMPUTED) == {str(d).removeprefix("torch.") for d in weights_probe._COMPUTE}


def test_a_model_run_of_another_factory_is_refuted(tmp_path, hostile, capsys) -> None:
    from pathlib import Path

    import consistency_models

    path = tmp_path / "m.pt"
    torch.save(consistency_models.tiny_mlp().state_dict(), path)
    args = ["consistency", str(path), "--device", "cpu", "--repeats", "2", "--model",
            "consistency_models:tiny_mlp", "--input-shape", "2,16", "--model-path",
            str(Path(__file__).parent)]
    assert main(args) == 0
    assert "model consistency_models:tiny_mlp" in capsys.readouterr().out
    hostile("""
        import inspector.sandbox.worker.consistency.op as op
        real = op.json_safe
        def safe(obj):
            out = real(obj)
            if isinstance(out, dict) and "factory" in out:
                out["factory"] = "torchvision.models:resnet50"
            return out
        op.json_safe = safe
    """)
    assert main(args) == REFUTED
    assert ("factory is consistency_models:tiny_mlp as asked, reported as "
            "torchvision.models:resnet50") in capsys.readouterr().err
