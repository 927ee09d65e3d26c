"""`run latest`, `run verify`, `verify CHECKPOINT` through its ledger record, and `report
RUN_DIR` with the ledger's summary."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import torch
from signing_keys import write_key

from inspector.cli import main
from inspector.cli.run.command import ACTIONS
from inspector.layout.torch_save import describe_archive
from inspector.ledger import save
from inspector.report.render_json import load_schema
from inspector.run import journal


def _run(tmp_path, steps=(1, 2, 3)):
    for step in steps:
        save({"enc.weight": torch.full((8, 8), float(step)), "head.bias": torch.ones(3) * step},
             tmp_path / "ckpt" / f"step-{step}.pt", step=step, run_dir=tmp_path)
    return tmp_path


def _flip(path, key):
    data = bytearray(path.read_bytes())
    data[{t.key: t for t in describe_archive(bytes(data))}[key].data_offset] ^= 1
    path.write_bytes(bytes(data))


def test_run_is_a_table_of_actions(capsys):
    assert set(ACTIONS) == {"latest", "verify", "order-diff"}
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in ACTIONS)


def test_run_latest_names_the_newest_intact_checkpoint(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["run", "latest", str(run)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "ckpt" / "step-3.pt")
    assert "step 3, saved" in out.err and "intact since then" in out.err
    _flip(run / "ckpt" / "step-3.pt", "head.bias")
    assert main(["run", "latest", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step"] == 2 and doc["location"] == str(run / "ckpt" / "step-2.pt")
    for step in (1, 2):
        (run / "ckpt" / f"step-{step}.pt").unlink()
    assert main(["run", "latest", str(run)]) == 1
    assert "none of the 3 ledgered checkpoints is still intact" in capsys.readouterr().err


def test_run_without_a_journal_exits_2(tmp_path, capsys):
    assert main(["run", "verify", str(tmp_path)]) == 2
    assert "no journal.jsonl here" in capsys.readouterr().err


def test_run_verify_json_names_states_and_tensors(tmp_path, capsys):
    run = _run(tmp_path)
    _flip(run / "ckpt" / "step-2.pt", "enc.weight")
    (run / "ckpt" / "step-1.pt").unlink()
    assert main(["run", "verify", str(run), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [c["state"] for c in doc["checkpoints"]] == ["missing", "changed", "intact"]
    assert doc["checkpoints"][1]["changed_tensors"] == ["enc.weight"]
    assert doc["latest_valid"]["step"] == 3 and doc["chain_intact"]


def test_verify_without_a_manifest_finds_the_ledger_record(tmp_path, capsys):
    run = _run(tmp_path)
    target = run / "ckpt" / "step-2.pt"
    assert main(["verify", str(target)]) == 0
    out = capsys.readouterr()
    assert "no manifest given; using the ledger record at" in out.err
    assert f"{journal.journal_path(run)}:2 (step 2" in out.err
    assert "NOT IN MANIFEST" not in out.out  # only the checkpoint asked for is checked
    _flip(target, "head.bias")
    assert main(["verify", str(target), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["dialect"] == "ledger"
    assert [t["key"] for t in doc["tensors"] if t["status"] != "ok"] == ["head.bias"]


def test_a_journal_copied_in_beside_a_checkpoint_does_not_stand_in_for_its_runs(
        tmp_path, monkeypatch, capsys):
    """Two runs share one seal key. Run A's sealed journal and its step-3 file copied into
    run B's ckpt/ folder: the nearest journal records the file as it now is, B's own (one
    folder up) records other bytes. Every journal above the file is read, and they disagree."""
    import shutil

    monkeypatch.setenv("CKPT_INSPECTOR_SEAL_KEY", "team-seal-key-0123456789")
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    for step in (1, 2, 3):
        save({"enc.weight": torch.zeros(8, 8) + (step == 3) * 7, "head.bias": torch.ones(3)},
             run_a / f"step-{step}.pt", step=step, run_dir=run_a)
    _run(run_b)
    target = run_b / "ckpt" / "step-3.pt"
    assert main(["verify", str(target)]) == 0  # B's own record, alone
    capsys.readouterr()
    shutil.copy(run_a / "step-3.pt", target)
    shutil.copy(journal.journal_path(run_a), run_b / "ckpt" / "journal.jsonl")
    assert main(["verify", str(target)]) == 1
    err = capsys.readouterr().err
    assert "the journals above it record other bytes for it" in err
    assert f"{run_b / 'ckpt' / 'journal.jsonl'}:3 (step 3)" in err
    assert f"{journal.journal_path(run_b)}:3 (step 3)" in err
    out = tmp_path / "report.json"
    assert main(["report", str(target), "-o", str(out), "--quiet"]) == 1
    [file] = json.loads(out.read_text())["files"]
    assert file["verification"]["status"] == "fail"
    assert "the journals above it record other bytes" in file["verification"]["errors"][0]
    assert main(["run", "verify", str(run_b)]) == 1  # what B's own journal says


def test_report_of_a_run_folder_carries_the_ledger_summary(tmp_path, capsys):
    run = _run(tmp_path, steps=(1, 2))
    journal.append(journal.journal_path(run), "guard.alarm",
                   {"step": 2, "rule": "loss_spike", "value": 9.0, "threshold": 3.0})
    _flip(run / "ckpt" / "step-2.pt", "enc.weight")
    out = tmp_path / "report.json"
    assert main(["report", str(run), "-o", str(out), "--quiet"]) == 1
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    [ledger] = doc["runs"]
    assert (ledger["saves"], ledger["intact"], ledger["changed"]) == (2, 1, 1)
    assert ledger["records"] == {"ledger.save": 2, "guard.alarm": 1}
    assert ledger["latest_valid"]["step"] == 1
    assert any("1 ledgered checkpoint changed since saved" in p for p in doc["problems"])
    by_name = {f["file"]["name"]: f for f in doc["files"]}
    assert "(step 1, saved" in by_name["step-1.pt"]["verification"]["manifest"]
    html = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(html), "--quiet"]) == 1
    page = html.read_text()
    assert "Training run ledger" in page and "guard alarms: 1" in page and "guard.alarm" not in page


def _run_latest(run_dir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inspector", "run", "latest", str(run_dir)],
                          capture_output=True, text=True, check=False)


def _forge_save(run_dir, **fields) -> None:
    """Append a save record as a forger who knows the format (not a seal key) would."""
    from inspector.run.checkpoints import SAVE_KIND
    record = {"path": "x", "size": 1, "sha256": None, "files": [], "outcome": "verified",
              "step": 999, "verified": True, **fields}
    journal.append(journal.journal_path(run_dir), SAVE_KIND, record)


@pytest.mark.parametrize("path", ["../outside.pt", "/etc/passwd", "ckpt/../../outside.pt"])
def test_run_latest_never_names_a_file_outside_the_run_folder(tmp_path, path):
    run_dir = tmp_path / "run"
    save({"w": torch.ones(3)}, run_dir / "ckpt" / "step-1.pt", step=1, run_dir=run_dir)
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"x")
    _forge_save(run_dir, path=path, files=[{"path": path, "size": 1, "sha256": None}])
    out = _run_latest(run_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("step-1.pt")
    assert "run latest: ignored line 2" in out.stderr


@pytest.mark.parametrize("target", ["/dev/zero", "outside.pt"])
def test_a_checkpoint_replaced_by_a_link_out_of_the_run_folder_is_named_and_never_read(
        tmp_path, target):
    run_dir = tmp_path / "run"
    for step in (1, 2):
        save({"w": torch.full((3,), float(step))}, run_dir / f"step-{step}.pt", step=step,
             run_dir=run_dir)
    outside = tmp_path / "outside.pt"
    (run_dir / "step-2.pt").replace(outside)  # the same bytes, now outside
    (run_dir / "step-2.pt").symlink_to(outside if target == "outside.pt" else target)
    out = _run_latest(run_dir)
    assert out.returncode == 0 and out.stdout.strip().endswith("step-1.pt"), out.stderr
    assert "step-2.pt is now a link to" in out.stderr and "outside the run folder" in out.stderr
    verified = subprocess.run([sys.executable, "-m", "inspector", "run", "verify", str(run_dir)],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 1 and "step-2.pt is now a link to" in verified.stdout


def test_run_latest_names_every_newer_checkpoint_it_skipped_and_why(tmp_path):
    run_dir = tmp_path / "run"
    for step in (1, 2, 3):
        save({"w": torch.full((3,), float(step))}, run_dir / "ckpt" / f"step-{step}.pt",
             step=step, run_dir=run_dir)
    damaged = run_dir / "ckpt" / "step-3.pt"
    data = bytearray(damaged.read_bytes())
    data[-30] ^= 0x40
    damaged.write_bytes(bytes(data))
    (run_dir / "ckpt" / "step-2.pt").unlink()
    out = _run_latest(run_dir)
    assert out.returncode == 0 and out.stdout.strip().endswith("step-1.pt")
    assert "skipped step 3 (ckpt/step-3.pt): changed: bytes differ: ckpt/step-3.pt" in out.stderr
    assert "skipped step 2 (ckpt/step-2.pt): missing" in out.stderr
    for line in out.stderr.splitlines():  # each reason says its state's word once
        assert line.count("changed") <= 1 and line.count("missing") <= 1, line


def test_run_latest_ignores_a_record_whose_seal_is_broken(tmp_path):
    from inspector.ledger import save
    run_dir = tmp_path / "run"
    save({"w": torch.ones(3)}, run_dir / "ckpt" / "step-1.pt", step=1, run_dir=run_dir)
    save({"w": torch.ones(3)}, run_dir / "ckpt" / "step-2.pt", step=2, run_dir=run_dir)
    path = journal.journal_path(run_dir)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"step": 2', b'"step": 9')
    path.write_bytes(b"\n".join(lines))
    out = _run_latest(run_dir)
    assert out.returncode == 0 and out.stdout.strip().endswith("step-1.pt")
    assert "ignored line 2: edited, not trusted" in out.stderr


def test_a_record_naming_a_path_with_a_nul_byte_is_a_bad_record_not_a_traceback(tmp_path,
                                                                              capsys):
    journal.append(tmp_path / "journal.jsonl", "ledger.save", {
        "path": "a\0b.pt", "size": 3, "sha256": "0" * 64, "layout": "file", "step": 1,
        "outcome": "verified", "files": [{"path": "a\0b.pt", "size": 3, "sha256": "0" * 64}]})
    for command in ("verify", "latest"):
        assert main(["run", command, str(tmp_path)]) == 1
        captured = capsys.readouterr()
        assert "holds a NUL byte, which no file name can" in captured.out + captured.err
        assert "Traceback" not in captured.err


@pytest.mark.parametrize("keyed", [False, True])
def test_a_journal_read_without_a_seal_key_is_said_to_be_anyones_word(tmp_path, capsys,
                                                                      monkeypatch, keyed):
    if keyed:  # the same key where the run writes and where it is read
        key = tmp_path / "seal.key"
        key.write_bytes(b"the run's secret")
        monkeypatch.setenv(journal.KEY_FILE_ENV, str(key))
    run = _run(tmp_path / "run", steps=(1,))
    said = "the journal is unauthenticated (no seal key)"
    for argv in (["run", "latest", str(run)], ["run", "verify", str(run)],
                 ["verify", str(run / "ckpt" / "step-1.pt")]):
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert (said in err) is not keyed, (argv, err)
    assert journal.read(journal.journal_path(run)).authenticated is keyed
    assert main(["run", "verify", str(run)]) == 0
    sealed = "sealed with the key" if keyed else "no seal key"
    assert f"chain intact ({sealed})" in capsys.readouterr().out
    assert main(["run", "verify", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sealed"] is keyed
    # with --public-key the saves' signatures stand for the record instead: no line then
    _, pub = write_key(tmp_path, "alice")
    assert main(["run", "verify", str(run), "--public-key", str(pub)]) == 1  # unsigned
    assert said not in capsys.readouterr().err
