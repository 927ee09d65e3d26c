"""A signature on a ledgered save is held to that save's record (`signing.ledger_binding`):
`verify PATH --public-key`, `report` and the app's badge believed the signature alone while the
run ledger's own checks failed the save. Three wrong answers, each beside its intact twin: a
file added to a ledger-signed folder save (the signature route took it as a tolerated extra),
another run's signed save copied in under the same name with its NAME.sig (same key, same
path: only the path's tail was compared), and a ledgered folder's files replaced by another
folder signed by `ckpt-inspector sign` with the same key, its model.sig inside (which outranked
the ledger's signature and record). `run verify` and `run latest` with the key failed all three
already and still do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from signing_keys import write_key

from inspector.cli import main
from inspector.core.vocabulary import SignatureState
from inspector.gui.signing.badge import badge_for, check_path

SEAL = "rt57-seal"


def _tensors(seed: int) -> dict:
    import torch

    return {"w": torch.randn(8, 8, generator=torch.Generator().manual_seed(seed))}


def _weights(folder: Path, seed: int) -> None:
    from safetensors.torch import save_file

    save_file(_tensors(seed), str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"model_type": "rt57"}')


def _folder_run(run: Path, seed: int = 1) -> Path:
    from inspector.ledger import save_folder

    save_folder(lambda tmp: _weights(tmp, seed), run / "ckpt", expected=_tensors(seed),
                step=1, run_dir=run)
    return run / "ckpt"


def _file_run(run: Path, seed: int, step: int = 1) -> Path:
    import torch

    from inspector.ledger import save

    g = torch.Generator().manual_seed(seed)
    target = run / f"step-{step}.pt"
    save({"w": torch.randn(4, 4, generator=g)}, target, step=step, run_dir=run)
    return target


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Each case's checkpoint (`NAME`) beside its twin (`NAME-twin`), the runs signed by one
    key as the ledger signs (`CKPT_INSPECTOR_SIGNING_KEY`), their journals sealed."""
    root = tmp_path_factory.mktemp("rt57")
    (root / "keys").mkdir()
    pem, pub = write_key(root / "keys", "signer")
    paths = {"pub": pub}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CKPT_INSPECTOR_SIGNING_KEY", str(pem))
        patch.setenv("CKPT_INSPECTOR_SEAL_KEY", SEAL)
        paths["added-twin"] = _folder_run(root / "folder")
        shutil.copytree(root / "folder", root / "added")
        paths["added"] = root / "added" / "ckpt"
        (paths["added"] / "notes").mkdir()
        (paths["added"] / "notes" / "extra.txt").write_text("put here after the save\n")

        _file_run(root / "runA", 1)
        paths["swapped-twin"] = _file_run(root / "runB", 2)
        shutil.copytree(root / "runB", root / "swapped")
        for name in ("step-1.pt", "step-1.pt.sig"):
            shutil.copy(root / "runA" / name, root / "swapped" / name)
        paths["swapped"] = root / "swapped" / "step-1.pt"
        # a save of runA's that runB never made, copied in with its signature: no line of
        # runB's journal records it, and the signature names runA's journal
        paths["copied-twin"] = _file_run(root / "runA", 3, step=2)
        shutil.copytree(root / "runB", root / "copied")
        for name in ("step-2.pt", "step-2.pt.sig"):
            shutil.copy(root / "runA" / name, root / "copied" / name)
        paths["copied"] = root / "copied" / "step-2.pt"

        other = root / "other"
        other.mkdir()
        _weights(other, 7)
        assert main(["sign", str(other), "--private-key", str(pem)]) == 0
        shutil.copytree(root / "folder", root / "modelsig")
        shutil.rmtree(root / "modelsig" / "ckpt")
        shutil.copytree(other, root / "modelsig" / "ckpt")
        paths["modelsig"] = root / "modelsig" / "ckpt"
        paths["modelsig-twin"] = paths["added-twin"]
    return paths


@pytest.fixture(autouse=True)
def _sealed(monkeypatch) -> None:
    monkeypatch.setenv("CKPT_INSPECTOR_SEAL_KEY", SEAL)


CASES = ["added", "swapped", "modelsig", "copied"]


def _verify(path: Path, pub: Path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["verify", str(path), "--public-key", str(pub), "--json", "--quiet"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("case", CASES)
def test_verify_with_the_key_holds_the_signature_to_the_save_record(built, case, capsys):
    code, doc = _verify(built[f"{case}-twin"], built["pub"], capsys)
    assert (code, doc["signature"]["state"], doc["ok"]) == (0, "intact", True)

    code, doc = _verify(built[case], built["pub"], capsys)
    assert code == 1
    assert doc["signature"]["state"] == "changed"
    assert "journal.jsonl" in doc["signature"]["reason"]
    assert any("journal.jsonl" in error for error in doc["errors"])


def test_a_signed_save_no_line_records_is_named_another_runs(built, capsys):
    _code, doc = _verify(built["copied"], built["pub"], capsys)
    assert "of another run" in doc["signature"]["reason"]


def test_each_reason_is_named_for_another_runs_save(built, capsys):
    _code, doc = _verify(built["swapped"], built["pub"], capsys)
    reason = doc["signature"]["reason"]
    assert "bytes differ: step-1.pt" in reason  # the bytes against the record
    assert "step-1.pt.sig against its save record" in reason  # the signature against it


def _report_states(path: Path, pub: Path, capsys) -> list[str]:
    capsys.readouterr()
    main(["report", str(path), "--public-key", str(pub), "-o", "-", "--quiet"])
    return [v["state"] for v in json.loads(capsys.readouterr().out)["signatures"]]


@pytest.mark.parametrize("case", CASES)
def test_the_report_holds_the_signature_to_the_save_record(built, case, capsys):
    assert _report_states(built[f"{case}-twin"], built["pub"], capsys) == ["intact"]
    assert _report_states(built[case], built["pub"], capsys) == ["changed"]


def test_the_report_holds_a_signature_named_with_signature_too(built, capsys):
    def states(path: Path) -> list[str]:
        capsys.readouterr()
        main(["report", str(path), "--public-key", str(built["pub"]), "--signature",
              f"{path}.sig", "-o", "-", "--quiet"])
        return [v["state"] for v in json.loads(capsys.readouterr().out)["signatures"]]

    assert states(built["swapped-twin"]) == ["intact"]
    assert states(built["swapped"]) == ["changed"]


@pytest.mark.parametrize("case", CASES)
def test_the_badge_holds_the_signature_to_the_save_record(built, case):
    def badge(path: Path) -> SignatureState:
        return badge_for(check_path(path, [built["pub"]]), path)[0]

    assert badge(built[f"{case}-twin"]) == SignatureState.INTACT
    assert badge(built[case]) == SignatureState.CHANGED


@pytest.mark.parametrize("case", CASES)
def test_run_latest_and_run_verify_with_the_key_still_fail_them(built, case, capsys):
    def run_dir(path: Path) -> Path:
        return path.parent

    # runB's own step 1 is still the latest valid save of the run `copied` was copied into
    for command in ("verify",) if case == "copied" else ("latest", "verify"):
        assert main(["run", command, str(run_dir(built[f"{case}-twin"])), "--public-key",
                     str(built["pub"])]) == 0
        assert main(["run", command, str(run_dir(built[case])), "--public-key",
                     str(built["pub"])]) == 1
