"""A tensor digest the user's process could not check is never presented as checked.

`verify` compares tensor digests the jailed worker reports; the user's process checks them
against the file's own bytes (`sandbox.host.claims`) where its readers can locate every
tensor. A pickle that holds more than tensors and plain values (here a `torch.dtype` leaf)
cannot be read there, so the digests are the worker's word alone: a worker the input took
over can then hand back the manifest's digests for weights it changed. Such a verdict is
`unchecked` (exit 3), says why, and `manifest create` says which digests it recorded so.
"""

from __future__ import annotations

import json
import pickle
import textwrap

import pytest
import torch

from inspector.cli import main
from inspector.sandbox.protocol import PAYLOAD_ENV, SELFTEST_ENV

LOADER_WORD = "as reported by the jailed loader: not checked here, "
REASON = "dtype is not a tensor"


class _Exec:
    """Unpickles as `exec(source)`: the hostile code a payload carries."""

    def __init__(self, source: str) -> None:
        self.source = textwrap.dedent(source)

    def __reduce__(self):
        return exec, (self.source, {})


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """Every worker started from here on first runs `source` inside its jail."""
    def arm(source: str) -> None:
        payload = tmp_path / "payload.pkl"
        payload.write_bytes(pickle.dumps(_Exec(source)))
        monkeypatch.setenv(SELFTEST_ENV, "1")
        monkeypatch.setenv(PAYLOAD_ENV, str(payload))

    return arm


def _weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}


def _flipped(w: torch.Tensor) -> torch.Tensor:
    t = w.clone()
    t.view(torch.int32)[3, 5] ^= 1 << 30  # one exponent bit
    return t


def _deploy(tmp_path, capsys, with_dtype: bool = True):
    """A manifest of the original (made by the honest worker), and the file deployed in its
    place with one exponent bit flipped in `model.w`."""
    weights = _weights()
    extra = {"dtype": torch.float16} if with_dtype else {"epoch": 3}
    original, deployed = tmp_path / "orig" / "m.pt", tmp_path / "m.pt"
    original.parent.mkdir()
    torch.save({"model": weights, **extra}, original)
    torch.save({"model": {"w": _flipped(weights["w"]), "b": weights["b"]}, **extra}, deployed)
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(original), "-o", str(manifest)]) == 0
    capsys.readouterr()
    recorded = json.loads(manifest.read_text())["files"][0]["tensors"]
    return manifest, deployed, {t["key"]: t["digest"] for t in recorded}


def _forge(hostile, digests: dict[str, str]) -> None:
    """The worker reports the manifest's digests whatever the bytes hold."""
    hostile(f"""
        import inspector.tensors.sources as sources
        known = {digests!r}
        real = sources.digest
        sources.digest = lambda source, cancel=None: known.get(source.key) or real(source, cancel)
    """)


def test_forged_digests_of_an_unreadable_pickle_are_not_ok(tmp_path, hostile, capsys) -> None:
    manifest, deployed, digests = _deploy(tmp_path, capsys)
    args = ["verify", "--tensors-only", "-m", str(manifest), str(deployed)]
    # the honest worker finds the flipped weight; its word is still its word
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "tensor MISMATCH" in out and "model.w" in out
    assert "1 mismatch, 1 unchecked" in out
    assert LOADER_WORD in out and REASON in out

    _forge(hostile, digests)
    assert main(args) == 3  # nothing here says they differ, nor that they are equal
    out = capsys.readouterr().out
    assert "2 tensors: 2 unchecked" in out
    assert "ok" not in out.split("2 tensors:")[1].split("\n")[0]
    assert f"  2 tensor verdicts of {deployed}: {LOADER_WORD}" in out
    assert REASON in out

    assert main([*args, "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert [t["status"] for t in doc["tensors"]] == ["unchecked", "unchecked"]
    for t in doc["tensors"]:
        assert t["note"].startswith(LOADER_WORD) and REASON in t["note"]


def test_forged_digests_against_the_whole_manifest_are_not_ok(tmp_path, hostile,
                                                              capsys) -> None:
    manifest, deployed, digests = _deploy(tmp_path, capsys)
    deployed.replace(tmp_path / "orig" / "m.pt")  # in the manifest's place
    _forge(hostile, digests)
    code = main(["verify", "-m", str(manifest), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1  # the file's SHA-256 is checked here and differs
    assert doc["files"][0]["status"] == "mismatch"
    assert {t["status"] for t in doc["tensors"]} == {"unchecked"}
    assert all(REASON in t["note"] for t in doc["tensors"])


def test_manifest_create_says_which_digests_it_took_on_trust(tmp_path, capsys) -> None:
    path = tmp_path / "m.pt"
    torch.save({"model": _weights(), "dtype": torch.float16}, path)
    out = tmp_path / "m.json"
    assert main(["manifest", "create", str(path), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert ("2 tensors (2 of their digests as reported by the jailed loader: not checked here)"
            in captured.out)
    assert f"m.pt: 2 tensor digests recorded {LOADER_WORD}" in captured.err
    assert REASON in captured.err
    assert "unchecked" not in out.read_text()  # the manifest's format is unchanged

    assert main(["manifest", "create", str(path), "-o", "-"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays the manifest alone
    assert LOADER_WORD in captured.err


def test_a_readable_file_is_checked_here_and_says_nothing_of_the_loader(tmp_path,
                                                                       capsys) -> None:
    manifest, deployed, _digests = _deploy(tmp_path, capsys, with_dtype=False)
    assert "jailed loader" not in capsys.readouterr().err
    args = ["verify", "--tensors-only", "-m", str(manifest), str(deployed)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "1 mismatch, 1 ok" in out and "jailed loader" not in out
    (tmp_path / "orig" / "m.pt").replace(deployed)
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and {t["note"] for t in doc["tensors"]} == {None}


def test_a_file_whose_hash_matches_vouches_for_its_tensors(tmp_path, hostile, capsys) -> None:
    """The SHA-256 computed here is the record's: the bytes are the recorded ones, whatever
    the loader says of their digests."""
    manifest, _deployed, digests = _deploy(tmp_path, capsys)
    _forge(hostile, digests)
    assert main(["verify", "-m", str(manifest), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["files"][0]["status"] == "ok"
    assert [(t["status"], t["note"]) for t in doc["tensors"]] == [("ok", None), ("ok", None)]
