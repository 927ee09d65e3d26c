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

import torch
from hostile_worker import LOADER_WORD, REASON, deploy, forge_digests, weights

from inspector.cli import main


def test_forged_digests_of_an_unreadable_pickle_are_not_ok(tmp_path, hostile, capsys) -> None:
    manifest, deployed, digests = deploy(tmp_path, capsys)
    args = ["verify", "--tensors-only", "-m", str(manifest), str(deployed)]
    # the honest worker finds the flipped weight; its word is still its word
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "tensor MISMATCH" in out and "model.w" in out
    assert "1 mismatch, 1 unchecked" in out
    assert LOADER_WORD in out and REASON in out

    forge_digests(hostile, digests)
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
    manifest, deployed, digests = deploy(tmp_path, capsys)
    deployed.replace(tmp_path / "orig" / "m.pt")  # in the manifest's place
    forge_digests(hostile, digests)
    code = main(["verify", "-m", str(manifest), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1  # the file's SHA-256 is checked here and differs
    assert doc["files"][0]["status"] == "mismatch"
    assert {t["status"] for t in doc["tensors"]} == {"unchecked"}
    assert all(REASON in t["note"] for t in doc["tensors"])


def test_manifest_create_says_which_digests_it_took_on_trust(tmp_path, capsys) -> None:
    path = tmp_path / "m.pt"
    torch.save({"model": weights(), "dtype": torch.float16}, path)
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
    manifest, deployed, _digests = deploy(tmp_path, capsys, with_dtype=False)
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
    manifest, _deployed, digests = deploy(tmp_path, capsys)
    forge_digests(hostile, digests)
    assert main(["verify", "-m", str(manifest), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["files"][0]["status"] == "ok"
    assert [(t["status"], t["note"]) for t in doc["tensors"]] == [("ok", None), ("ok", None)]
