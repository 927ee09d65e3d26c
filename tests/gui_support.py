"""Helpers for the GUI tests: checkpoints built in a subprocess, real drop events, waits.

The GUI process must never import torch, so the test process does not either: every
checkpoint that needs torch is written by a child Python that also records the expected
statistics as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget

from inspector.gui import app as appmod

TESTS = Path(__file__).resolve().parent
LOAD_TIMEOUT_MS = 120_000  # a cold worker start (torch import) on a loaded 2-core machine

_BUILD = r"""
import argparse, json, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
import factories

out = Path(sys.argv[2])
what = sys.argv[3]
expected = {}

def record(name, state):
    expected[name] = {
        k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape),
            "numel": v.numel(), "min": v.float().nan_to_num(posinf=0, neginf=0).min().item(),
            "max": v.float().nan_to_num(posinf=0, neginf=0).max().item(),
            "nan": int(v.isnan().sum()), "inf": int(v.isinf().sum())}
        for k, v in state.items()
    }

if what == "small":
    state = factories.small_state_dict()
    factories.save_state_dict(out / "benign.pt", state)
    record("benign.pt", state)
    bad = {"ok.weight": torch.ones(3, 3),
           "bad.weight": torch.tensor([1.0, float("nan"), float("inf"), -2.0])}
    torch.save(bad, out / "with_nan.pt")
    record("with_nan.pt", bad)
    torch.save({"model": state, "args": argparse.Namespace(lr=0.1, epochs=3)},
               out / "suspicious.pt")
    factories.save_training_checkpoint(out / "training.pt")
    wide = {f"blocks.{i}.layer{j}.weight": torch.full((2,), float(i * 10 + j))
            for i in range(40) for j in range(5)}
    torch.save(wide, out / "wide.pt")
    record("wide.pt", wide)
elif what == "big":
    mb = int(sys.argv[4])
    g = torch.Generator().manual_seed(1)
    n = 1 << 20  # one million float32 = 4 MiB per tensor
    state = {f"layers.{i}.weight": torch.randn(n, generator=g) for i in range(mb // 4)}
    torch.save(state, out / "big.pt")
elif what == "numpy":
    import numpy as np
    torch.save({"model": {"w": torch.ones(2)}, "best": np.float32(0.5), "dtype": np.dtype("f4")},
               out / "with_numpy.pt")
elif what == "radar":  # a 6-layer model with one flipped exponent bit
    state = factories.layered_state_dict(flip=True)
    torch.save(state, out / "flipped.pt")
    record("flipped.pt", state)
elif what == "code":  # a scripted module, and copies whose code/ was edited afterwards
    import re, zipfile
    torch.manual_seed(15)
    scripted = out / "scripted.pt"
    torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 2))), str(scripted))

    def edited(name, line):
        # `line` goes first into the body of the first forward in code/ (unescaped: raw text)
        with zipfile.ZipFile(scripted) as zin, zipfile.ZipFile(out / name, "w") as zout:
            done = False
            for info in zin.infolist():
                data = zin.read(info)
                if not done and "/code/" in "/" + info.filename and info.filename.endswith(".py"):
                    text = data.decode()
                    new = re.sub(r"(\) -> Tensor:\n)", lambda m: m.group(1) + line + "\n",
                                 text, count=1)
                    done = new != text
                    data = new.encode()
                zout.writestr(info, data)
        assert done, name

    edited("os_system.pt", '    os.system("true")')
    edited("tricky.pt", '    # <b>bold</b> \u202e <script>x</script>')
elif what == "damage":  # issue 24: every kind of damaged file, safetensors, two models
    g = torch.Generator().manual_seed(24)
    nan = {"fc.weight": torch.randn(16, 16, generator=g), "fc.bias": torch.randn(16, generator=g)}
    nan["fc.weight"][3, 5] = float("nan")
    torch.save(nan, out / "nan.pt")
    torch.save(factories.layered_state_dict(flip=True), out / "flipped.pt")
    factories.crc_damaged(out / "crc.pt")
    torch.save({"w": torch.randn(64, 64, generator=g)}, out / "whole.pt")
    data = (out / "whole.pt").read_bytes()
    (out / "truncated.pt").write_bytes(data[:len(data) * 2 // 3])
    (out / "whole.pt").unlink()
    factories.save_safetensors(out / "model.safetensors")
    for org in ("alpha", "beta"):
        folder = out / "parent" / org / "tiny-gpt"
        folder.mkdir(parents=True)
        weight_map = {}
        for shard in (1, 2):
            name = f"pytorch_model-{shard:05d}-of-00002.bin"
            state = {f"h.{shard}.{part}": torch.randn(8, 8, generator=g)
                     for part in ("attn.weight", "mlp.weight")}
            torch.save(state, folder / name)
            weight_map.update(dict.fromkeys(state, name))
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
            {"metadata": {"total_size": 4 * 4 * 64}, "weight_map": weight_map}))
(out / f"expected-{what}.json").write_text(json.dumps(expected))
"""


def build(folder: Path, what: str, *extra: str) -> dict:
    """Write the `what` set of checkpoints into `folder`; returns the expected statistics."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", _BUILD, str(TESTS), str(folder), what, *extra],
                   check=True, timeout=600)
    return json.loads((folder / f"expected-{what}.json").read_text())


def drop_files(target: QWidget, paths: list[Path]) -> bool:
    """Deliver a real drag-enter and drop of file URLs to `target`; True if the drop was taken."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    centre = QPointF(target.rect().center())
    enter = QDragEnterEvent(centre.toPoint(), Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(centre, Qt.DropAction.CopyAction, mime,
                      Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)
    return drop.isAccepted()


def worker_pids() -> list[int]:
    """Sandbox workers that are children of this test process."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"inspector.sandbox.worker.main" in cmdline:
            found.append(int(entry.name))
    return found


def wait_loaded(qtbot, doc, states: tuple[str, ...] = ("loaded",)) -> None:
    """Wait until the document's pipeline settles in one of `states` (fail fast otherwise)."""
    final = {"loaded", "load_failed", "blocked", "declined", "cancelled", "error",
             "needs_decision"}
    qtbot.waitUntil(lambda: doc.state in final and (doc.sha256 is not None
                                                      or doc.state == "needs_decision"),
                    timeout=LOAD_TIMEOUT_MS)
    assert doc.state in states, f"{doc.name}: {doc.state} {doc.message}"



def flip_exponent_bit(original: Path, out: Path) -> int:
    """Copy a torch.save checkpoint to `out` with bit 30 (an exponent bit) of its first float32
    storage's first element flipped; returns that element's byte offset in the file."""
    import zipfile

    data = bytearray(original.read_bytes())
    with zipfile.ZipFile(original) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("/data/0"))
    extra_len = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + len(info.filename.encode()) + extra_len
    data[start + 3] ^= 0x40
    out.write_bytes(bytes(data))
    return start


def each_theme(qtbot, settle_ms: int = 100) -> Iterator[str]:
    """Switch the app to the light, then the dark theme, yielding each once it has repainted;
    back to the system theme when the loop ends or fails."""
    try:
        for theme in ("light", "dark"):
            appmod.set_theme(theme)
            QApplication.processEvents()
            qtbot.wait(settle_ms)
            yield theme
    finally:
        appmod.set_theme("system")


def shown_badge(qtbot, path: Path):
    """A `SignatureBadge` that has shown `path`'s signature state (its check run to the end)."""
    from inspector.gui.jobs import JobRunner
    from inspector.gui.signing.badge import SignatureBadge

    runner = JobRunner()
    badge = SignatureBadge(runner)
    qtbot.addWidget(badge)
    badge.show_path(path)
    qtbot.waitUntil(lambda: badge.state is not None, timeout=30_000)
    runner.shutdown()
    return badge

