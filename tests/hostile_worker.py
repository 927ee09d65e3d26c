"""A hostile jailed worker for the tests: code the sandbox's self-test hook runs inside every
worker started after `arm`, so a test can make the loader lie (or die) and show what the host
does with its answer."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

from inspector.sandbox.protocol import PAYLOAD_ENV, SELFTEST_ENV


class Exec:
    """Unpickles as `exec(source)`: the hostile code a payload carries."""

    def __init__(self, source: str) -> None:
        self.source = textwrap.dedent(source)

    def __reduce__(self):
        return exec, (self.source, {})  # one namespace: its functions see its names


def arm(folder: Path, monkeypatch, source: str) -> None:
    """Every worker started from here on first runs `source` inside its jail."""
    payload = folder / "payload.pkl"
    payload.write_bytes(pickle.dumps(Exec(source)))
    monkeypatch.setenv(SELFTEST_ENV, "1")
    monkeypatch.setenv(PAYLOAD_ENV, str(payload))


LOADER_WORD = "as reported by the jailed loader: not checked here, "
"""What every view says of a verdict that rests on the loader's word."""
REASON = "dtype is not a tensor"
"""Why the host cannot read the files `deploy` writes (they hold a `torch.dtype`)."""

REPAIRED = """
    import torch
    import inspector.tensors.describe as d
    real = d.describe_tensors
    def lying(items, emit, *a, **k):
        fixed = []
        for key, t in items:
            if t.is_floating_point() and t.numel() and t.abs().max() > 1e6:
                t = torch.where(t.abs() > 1e6, torch.zeros_like(t), t)
            fixed.append((key, t))
        return real(fixed, emit, *a, **k)
    d.describe_tensors = lying
"""
"""A loader that describes each tensor as if its flipped-exponent outlier were an ordinary
value; the file's bytes still hold it."""


def weights() -> dict:
    """Two small float tensors, the same every time."""
    import torch

    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}


def flipped(w):
    """`w` with one exponent bit flipped in one element."""
    import torch

    t = w.clone()
    t.view(torch.int32)[3, 5] ^= 1 << 30
    return t


def deploy(tmp_path: Path, capsys, with_dtype: bool = True):
    """A manifest of the original (made by the honest worker), the file deployed in its place
    with one exponent bit flipped in `model.w`, and the recorded tensor digests; both files
    hold a `torch.dtype` (which the host cannot read) unless `with_dtype` is off."""
    import json

    import torch

    from inspector.cli import main

    w = weights()
    extra = {"dtype": torch.float16} if with_dtype else {"epoch": 3}
    original, deployed = tmp_path / "orig" / "m.pt", tmp_path / "m.pt"
    original.parent.mkdir()
    torch.save({"model": w, **extra}, original)
    torch.save({"model": {"w": flipped(w["w"]), "b": w["b"]}, **extra}, deployed)
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(original), "-o", str(manifest)]) == 0
    capsys.readouterr()
    recorded = json.loads(manifest.read_text())["files"][0]["tensors"]
    return manifest, deployed, {t["key"]: t["digest"] for t in recorded}


def forge_digests(hostile, digests: dict[str, str]) -> None:
    """The worker reports the manifest's digests whatever the bytes hold."""
    hostile(f"""
        import inspector.tensors.sources as sources
        known = {digests!r}
        real = sources.digest
        sources.digest = lambda source, cancel=None: known.get(source.key) or real(source, cancel)
    """)
