"""Built-in samples, the GUI entry point without a display, and a torch-free GUI process."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

from inspector.core.samples import MARKER_NAME, write_samples
from inspector.scan.engine import scan_file

_LOAD_BOTH = textwrap.dedent("""
    import json, sys, torch
    benign = torch.load(sys.argv[1], weights_only=True, mmap=True)
    out = {"keys": sorted(benign["model"]), "epoch": benign["epoch"], "lr": benign["lr"],
           "shape": list(benign["model"]["encoder.weight"].shape),
           "steps": int(benign["model"]["norm.num_batches_tracked"])}
    try:
        torch.load(sys.argv[2], weights_only=True)
        out["malicious"] = "loaded"
    except Exception as exc:
        out["malicious"] = type(exc).__name__
    print(json.dumps(out))
""")


def test_samples_are_real_checkpoints_written_without_torch(tmp_path, python_exe):
    code = ("import sys; from inspector.core.samples import write_samples; "
            f"write_samples({str(tmp_path)!r}); print('torch' in sys.modules)")
    done = subprocess.run([python_exe, "-I", "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"
    benign, malicious = tmp_path / "sample-benign.pt", tmp_path / "sample-malicious-demo.pt"
    loaded = subprocess.run([python_exe, "-I", "-c", _LOAD_BOTH, str(benign), str(malicious)],
                            capture_output=True, text=True, check=True)
    result = json.loads(loaded.stdout)
    assert result["keys"] == sorted(["encoder.weight", "encoder.bias", "norm.weight",
                                     "norm.bias", "norm.num_batches_tracked",
                                     "decoder.weight", "decoder.bias"])
    assert result["shape"] == [16, 8] and result["epoch"] == 12 and result["steps"] == 1200
    assert result["malicious"] == "UnpicklingError"
    assert not (tmp_path / MARKER_NAME).exists()
    assert scan_file(benign).verdict == "safe"
    scan = scan_file(malicious)
    assert scan.verdict == "dangerous"
    assert [f"{g.module}.{g.name}" for g in scan.globals if g.severity == "dangerous"] == [
        "builtins.open"]


def test_samples_are_rewritten_only_when_changed(tmp_path):
    first = write_samples(tmp_path)
    stamp = first.benign.stat().st_mtime_ns
    original = first.benign.read_bytes()
    again = write_samples(tmp_path)
    assert again.benign.stat().st_mtime_ns == stamp
    first.benign.write_bytes(b"tampered")
    write_samples(tmp_path)
    assert first.benign.read_bytes() == original


def headless_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def test_without_a_display_the_sample_is_inspected_headless(tmp_path, python_exe):
    done = subprocess.run([python_exe, "-m", "inspector", "--sample"], capture_output=True,
                          text=True, env=headless_env(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "needs a display" in done.stderr
    assert "sample-benign.pt" in done.stdout and "model.encoder.weight" in done.stdout
    assert "Traceback" not in done.stderr


def test_without_a_display_a_dangerous_file_is_reported_not_loaded(
        tmp_path, python_exe, canary):
    import factories

    path = factories.mal_builtins_exec(tmp_path / "payload.pt", canary)
    done = subprocess.run([python_exe, "-m", "inspector", str(path)], capture_output=True,
                          text=True, env=headless_env(tmp_path), timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs a display" in done.stderr and "Traceback" not in done.stderr


_GUI_RUN = textwrap.dedent("""
    import json, sys
    from PySide6.QtCore import QTimer
    from inspector.gui.dialogs.about_dialog import AboutDialog
    from inspector.gui.app import create_application
    from inspector.gui.main_window import MainWindow

    app = create_application([])
    window = MainWindow()
    window.show()
    docs = window.open_samples()
    about = []

    def check():
        if not all(d.state in ("loaded", "blocked") and d.sha256 for d in docs):
            QTimer.singleShot(100, check)
        elif not about:
            about.append(AboutDialog(window.runner, window))
            about[0].show()
            QTimer.singleShot(100, check)
        elif not about[0].rows:
            QTimer.singleShot(100, check)
        else:
            window.close()
            print(json.dumps({"states": [d.state for d in docs],
                              "tensors": len(docs[0].tensors),
                              "about_torch": dict(about[0].rows).get("torch", ""),
                              "torch": "torch" in sys.modules,
                              "numpy": "numpy" in sys.modules}))
            app.quit()

    check()
    app.exec()
""")


def test_a_full_inspection_never_imports_torch_in_the_gui_process(tmp_path, python_exe):
    env = headless_env(tmp_path)
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    done = subprocess.run([python_exe, "-c", _GUI_RUN], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["states"] == ["loaded", "blocked"] and result["tensors"] == 7
    assert result["about_torch"].startswith("2.")
    assert result["torch"] is False
    assert not (tmp_path / "cache" / "checkpoint-inspector" / "samples" / MARKER_NAME).exists()
