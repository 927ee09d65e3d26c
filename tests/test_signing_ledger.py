"""The ledger signs each proven save when CKPT_INSPECTOR_SIGNING_KEY names a key, and `run
verify --public-key` checks those signatures beside the hashes: the reference tool accepts them
(a file and a folder), a swapped signature or an unsigned save fails, a changed checkpoint is
named by the hashes while its signature still matches the record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from signing_keys import write_key

from inspector.cli import main

REFERENCE = [sys.executable, "-m", "model_signing"]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path / "keys"
    folder.mkdir()
    return {"alice": write_key(folder, "alice"), "bob": write_key(folder, "bob")}


def _state(seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(16, 16, generator=g), "b": torch.zeros(16)}}


def _reference_accepts(target: Path, pub: Path) -> bool:
    done = subprocess.run([*REFERENCE, "verify", "key", str(target), "--signature",
                           f"{target}.sig", "--public_key", str(pub)],
                          capture_output=True, text=True, timeout=120)
    return done.returncode == 0


def test_a_ledgered_save_is_signed_and_run_verify_checks_it(tmp_path, keys, monkeypatch,
                                                            capsys) -> None:
    from inspector.ledger import save

    pem, pub = keys["alice"]
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    target = run / "ckpt" / "step-1.pt"
    save(_state(1), target, step=1, run_dir=run)
    assert Path(f"{target}.sig").is_file()
    assert _reference_accepts(target, pub)
    assert main(["run", "verify", str(run), "--public-key", str(pub), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [checkpoint] = doc["checkpoints"]
    assert checkpoint["signature"]["state"] == "intact"
    assert checkpoint["signature"]["signer"].startswith("ECDSA P-256 key sha256:")

    assert main(["run", "verify", str(run), "--public-key", str(keys["bob"][1])]) == 1
    assert "wrong key" in capsys.readouterr().out

    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x10
    target.write_bytes(bytes(data))
    assert main(["run", "verify", str(run), "--public-key", str(pub), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    [checkpoint] = doc["checkpoints"]
    assert checkpoint["state"] == "changed"
    assert checkpoint["signature"]["state"] == "intact"  # the record is what was signed
    assert not _reference_accepts(target, pub)


def test_a_folder_save_is_signed_beside_the_folder(tmp_path, keys, monkeypatch) -> None:
    from safetensors.torch import save_file

    from inspector.ledger import save_folder

    pem, pub = keys["alice"]
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    target = tmp_path / "checkpoint-5"

    def write(folder: Path) -> None:
        save_file(_state(5)["model"], str(folder / "model.safetensors"))
        (folder / "config.json").write_text('{"step": 5}')

    save_folder(write, target, step=5, run_dir=tmp_path)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert _reference_accepts(target, pub)
    assert main(["run", "verify", str(tmp_path), "--public-key", str(pub)]) == 0


def test_without_a_key_nothing_is_signed_and_a_keyed_check_fails(tmp_path, keys, monkeypatch,
                                                                 capsys) -> None:
    from inspector.ledger import save

    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY", raising=False)
    target = tmp_path / "step-2.pt"
    save(_state(2), target, step=2, run_dir=tmp_path)
    assert not Path(f"{target}.sig").exists()
    assert main(["run", "verify", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["run", "verify", str(tmp_path), "--public-key", str(keys["alice"][1])]) == 1
    assert "unsigned: no signature at" in capsys.readouterr().out


def test_a_key_that_cannot_sign_is_one_clear_error_after_the_save(tmp_path, monkeypatch):
    from inspector.ledger import LedgerError, save
    from inspector.run.checkpoints import read_ledger

    bad = tmp_path / "rsa.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(bad))
    target = tmp_path / "step-3.pt"
    with pytest.raises(LedgerError) as caught:
        save(_state(3), target, step=3, run_dir=tmp_path)
    assert "saved and ledgered but not signed" in caught.value.message
    assert target.is_file() and len(read_ledger(tmp_path).saves) == 1
    assert not Path(f"{target}.sig").exists()


def _three_saves(run: Path, keys, monkeypatch) -> None:
    """Step 1 signed by alice; then someone who can write the run folder, without alice's key:
    a save of their own, ledgered as any other (its hashes and chain hold), and one signed
    with bob's key."""
    from inspector.ledger import save

    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(keys["alice"][0]))
    save(_state(1), run / "step-1.pt", step=1, run_dir=run)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    save(_state(2), run / "step-2.pt", step=2, run_dir=run)
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(keys["bob"][0]))
    save(_state(3), run / "step-3.pt", step=3, run_dir=run)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")


def test_run_latest_with_a_key_passes_over_what_its_signer_did_not_sign(tmp_path, keys,
                                                                        monkeypatch,
                                                                        capsys) -> None:
    pub = keys["alice"][1]
    run = tmp_path / "run"
    _three_saves(run, keys, monkeypatch)

    assert main(["run", "latest", str(run)]) == 0  # without a key: the newest intact one
    assert capsys.readouterr().out.strip() == str(run / "step-3.pt")
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "step-1.pt")
    skipped = [line for line in out.err.splitlines() if "skipped" in line]
    assert len(skipped) == 2
    assert "step-3.pt" in skipped[0] and "signature invalid" in skipped[0]
    assert "wrong key" in skipped[0]
    assert "step-2.pt" in skipped[1] and "not signed: no signature at" in skipped[1]

    assert main(["run", "latest", str(run), "--public-key", str(keys["bob"][1])]) == 0
    assert capsys.readouterr().out.strip() == str(run / "step-3.pt")


def test_a_resume_in_python_takes_only_what_the_key_signed(tmp_path, keys, monkeypatch) -> None:
    from inspector.run.checkpoints import latest_valid, resume_choice
    from inspector.signing.errors import SignatureError
    from inspector.signing.saves import signed_by

    run = tmp_path / "run"
    _three_saves(run, keys, monkeypatch)
    assert latest_valid(run).step == 3  # hashes and chain alone: the planted saves pass
    assert latest_valid(run, refuse=signed_by(keys["alice"][1])).step == 1
    assert latest_valid(run, refuse=signed_by(str(keys["bob"][1]))).step == 3
    choice = resume_choice(run, refuse=signed_by(keys["alice"][1]))
    assert [(r.step, why.split(":")[0]) for r, why in choice.skipped] == [
        (3, "signature invalid"), (2, "not signed")]
    with pytest.raises(SignatureError, match="cannot read the public key"):
        signed_by(tmp_path / "absent.pub")
    with pytest.raises(ValueError, match="needs a public key"):
        signed_by()


@pytest.mark.parametrize("action", ["latest", "verify"])
def test_a_key_that_cannot_be_read_is_one_clear_error_before_any_check(tmp_path, capsys,
                                                                      action) -> None:
    from inspector.ledger import save

    save(_state(1), tmp_path / "step-1.pt", step=1, run_dir=tmp_path)
    code = main(["run", action, str(tmp_path), "--public-key", str(tmp_path / "absent.pub")])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.strip() == (f"ckpt-inspector run {action}: {tmp_path / 'absent.pub'}: "
                               "cannot read the public key: No such file or directory")


@pytest.mark.parametrize("plant", ["copied-as-step-3", "record-replayed"])
def test_a_signed_save_under_another_name_step_or_line_is_not_that_save(
        tmp_path, keys, monkeypatch, capsys, plant) -> None:
    """Without the signing key, someone who can write the run folder copies step 1's file
    and signature as step 3, or appends step 1's record again so it is the newest: the signed
    bytes hold, but the signature names the save it was made for."""
    import shutil

    from inspector.ledger import save
    from inspector.run import journal
    from inspector.run.checkpoints import latest_valid
    from inspector.signing.saves import signed_by

    pem, pub = keys["alice"]
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    for step in (1, 2):
        save(_state(step), run / f"step-{step}.pt", step=step, run_dir=run)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    path = journal.journal_path(run)
    first = json.loads(path.read_bytes().split(b"\n")[0])
    fields = {k: v for k, v in first.items() if k not in ("seq", "prev", "kind", "seal")}
    if plant == "copied-as-step-3":
        for suffix in ("", ".sig"):
            shutil.copy(run / f"step-1.pt{suffix}", run / f"step-3.pt{suffix}")
        fields = {**fields, "step": 3, "path": "step-3.pt",
                  "files": [{**fields["files"][0], "path": "step-3.pt"}]}
        said = "signed for step 1 at step-1.pt (journal seq 0), but the record is step 3 at " \
               "step-3.pt (journal seq 2)"
    else:
        said = "signed for step 1 at step-1.pt (journal seq 0), but the record is step 1 at " \
               "step-1.pt (journal seq 2)"
    journal.append(path, "ledger.save", fields)
    assert latest_valid(run).seq == 2  # hashes and chain alone: the planted record passes
    assert latest_valid(run, refuse=signed_by(pub)).step == 2
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "step-2.pt")
    assert said in out.err
    assert _reference_accepts(run / "step-2.pt", pub)  # the extra field is the reference's too


def _rechained(path: Path, swap: dict[int, dict]) -> None:
    """The journal at `path` written again line by line with plain SHA-256 seals (what anyone
    who can write the folder can do without the seal key), the fields of `swap` (seq -> a
    record) put in place of those lines'."""
    import os

    from inspector.run import journal

    records = [json.loads(line) for line in path.read_text().splitlines()]
    new = path.with_name("journal.new")
    for rec in records:
        fields = swap.get(rec["seq"], rec)
        journal.append(new, rec["kind"], {k: v for k, v in fields.items()
                                          if k not in ("seq", "prev", "chain", "kind", "seal")})
    os.replace(new, path)


def test_a_save_signed_for_another_run_is_not_this_runs(tmp_path, keys, monkeypatch,
                                                         capsys) -> None:
    """Two runs signed with one key, no seal key: run A's step-3 file and signature copied
    over run B's and B's journal re-chained with A's record of it. Path, step, seq and
    bytes all hold; the signature names A's journal (its chain id), not B's."""
    import shutil

    import torch

    from inspector.ledger import save
    from inspector.run.checkpoints import latest_valid
    from inspector.signing.saves import signed_by

    pem, pub = keys["alice"]
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    runs = {name: tmp_path / name for name in ("a", "b")}
    for seed, run in enumerate(runs.values()):
        for step in (1, 2, 3):
            state = _state(10 * seed + step)
            if run == runs["a"] and step == 3:
                state = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
            save(state, run / "ckpt" / f"step-{step}.pt", step=step, run_dir=run)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    for suffix in ("", ".sig"):
        shutil.copy(runs["a"] / f"ckpt/step-3.pt{suffix}", runs["b"] / f"ckpt/step-3.pt{suffix}")
    theirs = json.loads(journal_lines(runs["a"])[2])
    _rechained(runs["b"] / "journal.jsonl", {2: theirs})

    assert latest_valid(runs["b"]).step == 3  # hashes and chain alone: A's save passes
    assert latest_valid(runs["b"], refuse=signed_by(pub)).step == 2
    assert main(["run", "latest", str(runs["b"]), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(runs["b"] / "ckpt/step-2.pt")
    assert "in another run's journal (chain id" in out.err
    assert main(["run", "verify", str(runs["b"]), "--public-key", str(pub)]) == 1
    out = capsys.readouterr().out
    assert "signature  changed" in out
    assert "latest valid: ckpt/step-2.pt (step 2)" in out  # not the save whose signature fails
    assert main(["run", "verify", str(runs["a"]), "--public-key", str(pub)]) == 0


def journal_lines(run: Path) -> list[str]:
    return (run / "journal.jsonl").read_text().splitlines()


def test_an_unverified_save_edited_to_verified_is_not_what_was_signed(tmp_path, keys,
                                                                      monkeypatch,
                                                                      capsys) -> None:
    """A save recorded `unverified` (its re-read proved nothing against memory) is signed; its
    record edited to `verified` (no seal key: the journal re-chained) would make `run latest`
    choose it. The signature names the outcome it was made for."""
    from inspector.core.vocabulary import SaveOutcome
    from inspector.integrity.hashing import sha256_file
    from inspector.integrity.manifest import FileEntry
    from inspector.ledger import save
    from inspector.ledger.record import append_save

    pem, pub = keys["alice"]
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    save(_state(1), run / "step-1.pt", step=1, run_dir=run)
    target = run / "step-2.pt"
    target.write_bytes(b"bytes the ledger could not prove")
    entry = FileEntry("step-2.pt", sha256_file(target), target.stat().st_size, None, None)
    append_save(run, target, layout="file", fmt=None, writer="test", files=[entry],
                outcome=SaveOutcome.UNVERIFIED, detail="re-read failed", step=2, epoch=None)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "step-1.pt")

    second = json.loads(journal_lines(run)[1])
    _rechained(run / "journal.jsonl", {1: {**second, "outcome": "verified", "verified": True,
                                           "detail": None}})
    assert main(["run", "latest", str(run)]) == 0  # without a key: the edited record passes
    assert capsys.readouterr().out.strip() == str(target)
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "step-1.pt")
    assert "signed as a save unverified at its write, but the record says verified" in out.err


def test_a_signature_made_before_it_named_run_and_outcome_holds_and_says_so(
        tmp_path, keys, monkeypatch, capsys) -> None:
    """An earlier version's save signature (path, step and seq only) is still intact, and
    `run latest` says what it does not bind instead of passing it as fully checked."""
    from inspector.ledger import save
    from inspector.run.checkpoints import read_ledger
    from inspector.signing.make import sign_digests
    from inspector.signing.statement import SavePlace

    pem, pub = keys["alice"]
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    target = run / "step-1.pt"
    save(_state(1), target, step=1, run_dir=run)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    [record] = read_ledger(run).saves
    sign_digests(target, {".": record.sha256}, pem, Path(f"{target}.sig"), overwrite=True,
                 save=SavePlace(record.path, record.step, record.seq))
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(target)
    assert ("signature intact, but made before signatures named its run's journal and its "
            "outcome") in out.err
    assert main(["run", "verify", str(run), "--public-key", str(pub)]) == 0
    assert "made before signatures named" in capsys.readouterr().out


def test_a_signature_beside_no_record_names_what_the_journal_lost(tmp_path, keys, monkeypatch,
                                                                   capsys) -> None:
    """Signatures beside no recorded checkpoint: one whose save's line now records another
    path (the line was changed: re-chained without the seal key), and one of another run
    signed with the same key (copied in), are each named, not passed over as recorded."""
    import shutil

    from inspector.ledger import save

    pem, pub = keys["alice"]
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    run, other = tmp_path / "run", tmp_path / "other"
    for step in (1, 2):
        save(_state(step), run / f"step-{step}.pt", step=step, run_dir=run)
    save(_state(7), other / "step-1.pt", step=1, run_dir=other)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    shutil.copy(other / "step-1.pt.sig", run / "old.pt.sig")
    shutil.copy(run / "step-2.pt", run / "step-9.pt")
    second = json.loads(journal_lines(run)[1])
    _rechained(run / "journal.jsonl", {1: {**second, "step": 9, "path": "step-9.pt",
                                           "files": [{**second["files"][0],
                                                      "path": "step-9.pt"}]}})
    assert main(["run", "verify", str(run), "--public-key", str(pub)]) == 1
    out = capsys.readouterr().out
    assert ("old.pt.sig is signed for step 1 at step-1.pt (journal seq 0) of another run "
            "(its journal's chain id is not this one's)") in out
    assert ("step-2.pt.sig is signed for step 2 at step-2.pt (journal seq 1), but that line "
            "now records step 9 at step-9.pt: the line was changed") in out


@pytest.mark.parametrize("forged", ["rotate", "save-over", "save-over-unhealthy"])
def test_a_line_saying_the_newest_signed_save_is_gone_is_not_believed_while_it_is_there(
        tmp_path, keys, monkeypatch, capsys, forged) -> None:
    """Without a seal key anyone can append a line that calls the newest save gone: a
    `ledger.rotate` naming it, or a save of their own over its path (`replaced`; an unhealthy
    one is passed over before its signature is asked). With --public-key the checkpoint is
    still there and signed, so `run latest` takes it and names the line, and `run verify`
    shows it intact, "yet present"; a journal sealed with a key is believed."""
    from inspector.ledger import save
    from inspector.run import journal
    from inspector.run.checkpoints import ROTATE_KIND, SAVE_KIND, read_ledger

    pem, pub = keys["alice"]
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    for step in (1, 2, 3):
        save(_state(step), run / f"step-{step}.pt", step=step, run_dir=run)
    monkeypatch.delenv("CKPT_INSPECTOR_SIGNING_KEY")
    newest = read_ledger(run).saves[-1]
    if forged == "rotate":
        journal.append(journal.journal_path(run), ROTATE_KIND, {
            "save_seq": newest.seq, "path": newest.path, "step": 3, "reason": "keep=2"})
    else:
        outcome = "unhealthy" if forged == "save-over-unhealthy" else "verified"
        journal.append(journal.journal_path(run), SAVE_KIND, {
            **newest.to_fields(), "step": 4, "outcome": outcome})
    assert main(["run", "latest", str(run)]) == 0  # no key: the journal's word alone
    believed = "step-3.pt" if forged == "save-over" else "step-2.pt"  # (the forged record's)
    assert capsys.readouterr().out.strip() == str(run / believed)

    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "step-3.pt")
    gone = "deleted by rotation, as line 4" if forged == "rotate" else "written over by the save"
    assert f"ignored the journal's word that step 3 (step-3.pt) is {gone}" in out.err
    # a forged save is no signed one: `run verify` fails it, and still shows step 3 intact
    failed = forged != "rotate"
    assert main(["run", "verify", str(run), "--public-key", str(pub), "--json"]) == failed
    doc = json.loads(capsys.readouterr().out)
    third = doc["checkpoints"][2]
    assert third["state"] == "intact" and third["detail"].endswith("yet present and intact")
    assert third["signature"]["state"] == "intact" and doc["latest_valid"]["step"] == 3


def test_a_rotation_sealed_with_the_seal_key_is_believed(tmp_path, keys, monkeypatch,
                                                         capsys) -> None:
    """A line only the seal key's holder can write is the trainer's own: a rotation killed
    before the file went (`ledger.rotate`'s order) leaves it removed, signature or not."""
    from inspector.ledger import save
    from inspector.run import journal
    from inspector.run.checkpoints import ROTATE_KIND, read_ledger

    pem, pub = keys["alice"]
    run = tmp_path / "run"
    monkeypatch.setenv("CKPT_INSPECTOR_SEAL_KEY", "team-seal-key-0123456789")
    monkeypatch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
    for step in (1, 2):
        save(_state(step), run / f"step-{step}.pt", step=step, run_dir=run)
    newest = read_ledger(run).saves[-1]
    journal.append(journal.journal_path(run), ROTATE_KIND, {"save_seq": newest.seq})
    assert main(["run", "latest", str(run), "--public-key", str(pub)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "step-1.pt") and "ignored" not in out.err
