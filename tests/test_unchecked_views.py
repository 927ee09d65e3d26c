"""Every view of a verdict that rests on the jailed loader's word says so.

A pickle that also holds a `torch.dtype` cannot be read by the user's process, so the tensor
digests and statistics the jailed worker reports for it are its word alone, and a worker the
input took over can hand back whatever it likes (here: the manifest's own digests for weights
whose exponent bit flipped, or repaired statistics). `verify` and `report` already mark such
verdicts; these tests hold the other places to the same: `report`'s terminal summary, `verify`'s
note beside the file's verdicts (a signed folder's too), the GUI's Integrity pane and `run
verify`'s naming of changed tensors.
"""

from __future__ import annotations

import json

import torch
from gui_support import LOAD_TIMEOUT_MS, drop_files, wait_loaded
from hostile_worker import LOADER_WORD, REASON, REPAIRED, deploy, flipped, forge_digests, weights
from signing_keys import write_key

from inspector.cli import main
from inspector.gui.panes.integrity_pane import ManifestDropZone
from inspector.ledger import save

pytest_plugins = ("gui_fixtures",)  # fixtures: window


# The loaded tensors as the original's: `inspect` describes (and digests) model.w as it was
# before its exponent bit flipped, so the GUI's digests are the manifest's.
RESTORED = """
    import torch
    import inspector.tensors.describe as d
    real = d.describe_tensors
    def lying(items, emit, *a, **k):
        original = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
        fixed = [(key, original if key == "model.w" else t) for key, t in items]
        return real(fixed, emit, *a, **k)
    d.describe_tensors = lying
"""


def _before_totals(out: str, totals: str) -> str:
    """The lines printed before the totals line that starts with `totals`."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(totals))
    return "\n".join(lines[:at])


# --- report: the terminal summary ------------------------------------------------------------

def test_report_summary_line_says_how_many_verdicts_are_the_loaders_word(tmp_path, hostile,
                                                                        fast_env, capsys):
    path = tmp_path / "dt.pt"
    w = weights()
    torch.save({"model": {"w": flipped(w["w"]), "b": w["b"]},
                "dtype": torch.float16}, path)
    hostile(REPAIRED)
    out = tmp_path / "r.json"
    assert main(["report", str(path), "-o", str(out), "--quiet"]) == 0  # the loader's SAFE
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("SAFE: 1 file, 0 problems; report written to")
    assert printed[1] == ("  1 verdict rests on the jailed loader's word, not checked here; "
                          "the report says which and why")
    assert len(json.loads(out.read_text())["unchecked"]) == 1


def test_report_summary_of_files_checked_here_says_nothing_of_the_loader(tmp_path, fast_env,
                                                                        capsys):
    path = tmp_path / "plain.pt"
    torch.save({"model": weights(), "epoch": 3}, path)
    assert main(["report", str(path), "-o", str(tmp_path / "r.json"), "--quiet"]) == 0
    assert "jailed loader" not in capsys.readouterr().out


# --- verify: the note stays with the file's verdicts -----------------------------------------

def test_verify_says_whose_word_beside_the_tensor_verdicts(tmp_path, hostile, capsys):
    manifest, deployed, digests = deploy(tmp_path, capsys)
    forge_digests(hostile, digests)
    assert main(["verify", "--tensors-only", "-m", str(manifest), str(deployed)]) == 3
    head = _before_totals(capsys.readouterr().out, "0 files; 2 tensors: 2 unchecked")
    assert head.splitlines()[-1] == f"  2 tensor verdicts of {deployed}: {LOADER_WORD}" + (
        "the archive holds more than tensors and plain values (dtype is not a tensor)")


def test_a_signed_folder_says_whose_word_its_tensor_verdicts_are(tmp_path, hostile, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    w = weights()
    torch.save({"model": w, "dtype": torch.float16}, folder / "m.pt")
    pem, pub = write_key(tmp_path, "k")
    assert main(["sign", str(folder), "--private-key", str(pem), "--tensors"]) == 0
    capsys.readouterr()
    torch.save({"model": {"w": flipped(w["w"]), "b": w["b"]},
                "dtype": torch.float16}, folder / "m.pt")
    # the SHA-256 differs (checked here); which tensors changed is the loader's word
    hostile("pass")  # an honest loader: its word is still its word
    assert main(["verify", str(folder), "--public-key", str(pub)]) == 1
    out = capsys.readouterr().out
    head = _before_totals(out, "1 file: 1 mismatch; 2 tensors: 1 mismatch, 1 unchecked")
    assert "  tensor MISMATCH               model.w (m.pt)" in head
    assert head.splitlines()[-1].startswith(f"  2 tensor verdicts of m.pt: {LOADER_WORD}")
    assert REASON in head.splitlines()[-1]

    assert main(["verify", str(folder), "--public-key", str(pub), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["files"][0]["status"] == "mismatch"
    assert {t["key"]: t["status"] for t in doc["tensors"]} == {"model.w": "mismatch",
                                                               "model.b": "unchecked"}
    assert all(t["note"].startswith(LOADER_WORD) for t in doc["tensors"])


# --- run verify: no tensor named on the loader's word ----------------------------------------

def _run_with_dtype(tmp_path):
    for step in (1, 2):
        save({"enc.weight": torch.full((8, 8), float(step)), "head.bias": torch.ones(3) * step,
              "dtype": torch.float16}, tmp_path / "ckpt" / f"step-{step}.pt", step=step,
             run_dir=tmp_path)
    target = tmp_path / "ckpt" / "step-2.pt"
    data = bytearray(target.read_bytes())
    at = bytes(data).find(bytes([0, 0, 0, 0x40]) * 64)  # enc.weight's 2.0s
    assert at > 0
    data[at] ^= 1
    target.write_bytes(bytes(data))
    return tmp_path


def test_run_verify_names_no_tensor_on_the_loaders_word(tmp_path, hostile, capsys):
    run = _run_with_dtype(tmp_path)
    hostile("pass")  # the honest loader: head.bias is equal on its word, enc.weight differs
    assert main(["run", "verify", str(run), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    changed = doc["checkpoints"][1]
    assert changed["state"] == "changed" and changed["changed_files"] == ["ckpt/step-2.pt"]
    assert changed["changed_tensors"] == []  # neither named on its word
    assert changed["detail"] == "bytes differ: ckpt/step-2.pt"  # the SHA-256, checked here

    # a lying loader names the tensor it likes: nothing of it reaches the verdict
    hostile("""
        import inspector.tensors.sources as sources
        real = sources.digest
        sources.digest = lambda source, cancel=None: (
            "0" * 64 if source.key == "head.bias" else real(source, cancel))
    """)
    assert main(["run", "verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "CHANGED          step 2  ckpt/step-2.pt  (bytes differ: ckpt/step-2.pt)" in out
    assert "head.bias" not in out and "enc.weight" not in out


# --- the GUI's Integrity pane ----------------------------------------------------------------

def test_integrity_pane_shows_why_a_tensor_is_unchecked(window, qtbot, tmp_path, hostile,
                                                        capsys, artifacts):
    manifest, deployed, _digests = deploy(tmp_path, capsys)
    hostile(RESTORED)
    (doc,) = window.open_paths([deployed])
    wait_loaded(qtbot, doc)
    window.tabs.setCurrentWidget(window.integrity)
    assert drop_files(window.integrity.findChild(ManifestDropZone), [manifest])
    qtbot.waitUntil(lambda: doc.verify is not None, timeout=LOAD_TIMEOUT_MS)
    model = window.integrity.model
    rows = {r[0]: r for r in model.rows}
    (file_row,) = [r for r in model.rows if r[1] == "file"]
    assert file_row[2] == "mismatch"  # the SHA-256, computed here
    for key in ("model.w", "model.b"):  # equal on the loader's word alone: never ok
        assert rows[key][2] == "unchecked", rows[key]
        assert rows[key][5] == f"float32; {LOADER_WORD}{doc.result.claims.reason}"
        index = model.index(model.rows.index(rows[key]), 5)
        assert REASON in index.data()  # the visible Details cell, not only its tooltip
    text = window.integrity.summary.toPlainText()
    assert "Does not match" in text
    assert "1 of 1 file and 0 of 2 tensors differ; 2 not checked here." in text
    assert f"m.pt: 2 tensor verdicts {LOADER_WORD}" in text and REASON in text
    qtbot.waitUntil(lambda: not window.cancel_button.isVisible(), timeout=LOAD_TIMEOUT_MS)
    window.grab().save(str(artifacts / "gui" / "integrity-unchecked.png"))


def test_integrity_pane_tensors_only_unchecked_is_no_match(window, qtbot, tmp_path, hostile,
                                                           capsys):
    """Against tensor digests alone (no SHA-256 to check here), the loader's equal digests
    are no match and no difference: the summary says so."""
    manifest, deployed, _digests = deploy(tmp_path, capsys)
    record = json.loads(manifest.read_text())
    del record["files"][0]["sha256"]
    record["files"][0]["path"] = deployed.name
    manifest.write_text(json.dumps(record))
    hostile(RESTORED)
    (doc,) = window.open_paths([deployed])
    wait_loaded(qtbot, doc)
    assert drop_files(window.integrity.findChild(ManifestDropZone), [manifest])
    qtbot.waitUntil(lambda: doc.verify is not None, timeout=LOAD_TIMEOUT_MS)
    statuses = {r[0]: r[2] for r in window.integrity.model.rows}
    assert statuses["model.w"] == statuses["model.b"] == "unchecked"
    text = window.integrity.summary.toPlainText()
    assert "Matches" not in text
    assert ("Not checked against" in text and "nothing differs, but 2 of 2 tensors match only "
            "on the jailed loader's word (not a pass)") in text

    written = tmp_path / "again.json"  # a manifest made here says whose word its digests are
    job = window.integrity.write_manifest(written)
    qtbot.waitUntil(lambda: written.exists() and not job.running, timeout=LOAD_TIMEOUT_MS)
    text = window.integrity.summary.toPlainText()
    assert f"with 2 tensor hashes ({LOADER_WORD}" in text and REASON in text
