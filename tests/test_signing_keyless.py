"""Sigstore keyless signatures verified offline against a trust root: a Sigstore instance made
in the test (tests/sigstore_local.py: its own Fulcio-like CA, CT log and Rekor keys) signs a
folder keylessly; the reference tool's `model_signing verify sigstore --trust_config` accepts the
bundle, and so does `verify --trust-root`. Then another instance's trust root, another signer,
a flipped byte, a changed log entry, no trust root, and a trust root that is no trust root."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sigstore_local import LocalSigstore, sign_keylessly

from inspector.cli import main

IDENTITY, ISSUER = "bot@example.org", "https://issuer.example"


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, LocalSigstore, Path]:
    """A folder signed keylessly by IDENTITY through a local instance, and its trusted root."""
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "weights.bin").write_bytes(bytes(range(256)) * 512)
    (model / "sub" / "config.json").write_text('{"hidden": 8}')
    instance, root = sign_keylessly(model, tmp_path, IDENTITY, ISSUER)
    return model, instance, root


def _verify(model: Path, root: Path | None, *extra: str,
            identity: str = IDENTITY, issuer: str = ISSUER) -> list[str]:
    trust = ["--trust-root", str(root), "--identity", identity, "--identity-provider", issuer] \
        if root is not None else []
    return ["verify", str(model), *trust, *extra]


def test_a_keyless_bundle_verifies_against_its_trust_root_here_and_in_the_reference(
        signed, tmp_path, capsys) -> None:
    model, instance, root = signed
    config = instance.write_client_trust_config(tmp_path / "client_trust_config.json")
    done = subprocess.run([sys.executable, "-m", "model_signing", "verify", "sigstore",
                           str(model), "--signature", str(model / "model.sig"), "--identity",
                           IDENTITY, "--identity_provider", ISSUER, "--trust_config",
                           str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    capsys.readouterr()
    assert main(_verify(model, root, "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "intact" and doc["signature"]["kind"] == "sigstore"
    assert doc["signature"]["signer"] == f"sigstore {IDENTITY} (issuer {ISSUER})"
    assert {f["path"]: f["status"] for f in doc["files"]} == {
        "weights.bin": "ok", "sub/config.json": "ok"}
    assert main(_verify(model, config)) == 0  # the client trust config is read as well
    assert "intact" in capsys.readouterr().out

    (model / "weights.bin").write_bytes(b"\x01" + (model / "weights.bin").read_bytes()[1:])
    assert main(_verify(model, root)) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("MISMATCH") and "weights.bin" in line
               for line in out.splitlines())


def test_another_instances_trust_root_or_another_signer_is_invalid(signed, tmp_path,
                                                                   capsys) -> None:
    model, _instance, _root = signed
    other = LocalSigstore().write_trusted_root(tmp_path / "other_root.json")
    capsys.readouterr()
    assert main(_verify(model, other, "--json")) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "invalid"
    assert "untrusted certificate" in doc["signature"]["reason"]
    _model, _instance, root = signed
    assert main(_verify(model, root, identity="mallory@example.org")) == 1
    assert "wrong signer: signed by bot@example.org" in capsys.readouterr().out
    assert main(_verify(model, root, issuer="https://other.example")) == 1
    assert "wrong signer" in capsys.readouterr().out


@pytest.mark.parametrize("part", ["checkpoint", "promise", "body"])
def test_a_changed_log_entry_is_invalid(signed, part, capsys) -> None:
    model, _instance, root = signed
    bundle = json.loads((model / "model.sig").read_text())
    entry = bundle["verificationMaterial"]["tlogEntries"][0]
    if part == "checkpoint":  # the log's signature over its root, one bit changed
        note, signature = entry["inclusionProof"]["checkpoint"]["envelope"].rsplit(" ", 1)
        raw = bytearray(base64.b64decode(signature))
        raw[-1] ^= 1
        entry["inclusionProof"]["checkpoint"]["envelope"] = \
            f"{note} {base64.b64encode(bytes(raw)).decode()}\n"
    elif part == "promise":
        entry["integratedTime"] = str(int(entry["integratedTime"]) + 1)
    else:  # the logged payload hash no longer that of the envelope
        body = json.loads(base64.b64decode(entry["canonicalizedBody"]))
        body["spec"]["payloadHash"]["value"] = "0" * 64
        entry["canonicalizedBody"] = base64.b64encode(json.dumps(body).encode()).decode()
    (model / "model.sig").write_text(json.dumps(bundle))
    capsys.readouterr()
    assert main(_verify(model, root)) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID") and "invalid signature" in out
    assert len(out.strip().splitlines()) == 1


def test_without_a_trust_root_it_is_unverified_in_one_line(signed, capsys) -> None:
    model, _instance, root = signed
    capsys.readouterr()
    assert main(["verify", str(model)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("UNVERIFIED") and "no trust root was given" in out
    assert f"by {IDENTITY} (issuer {ISSUER})" in out and len(out.strip().splitlines()) == 1
    assert main(["verify", str(model), "--trust-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"pass --identity ID and --identity-provider URL (it names {IDENTITY}" in err


def test_a_trust_root_that_is_none_is_refused_in_one_line(signed, tmp_path, capsys) -> None:
    model, _instance, _root = signed
    wrong = tmp_path / "wrong.json"
    for text, message in (("{not json", "not JSON"),
                          (json.dumps({"mediaType": "application/json"}),
                           "not a Sigstore trusted root")):
        wrong.write_text(text)
        capsys.readouterr()
        assert main(_verify(model, wrong)) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_the_packaged_public_good_root_is_used_and_refuses_a_local_ca(signed, capsys) -> None:
    model, _instance, _root = signed
    capsys.readouterr()
    assert main(_verify(model, Path("sigstore"), "--json")) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "invalid"
    assert "untrusted certificate" in doc["signature"]["reason"]
    assert "checked against sigstore" in doc["signature"]["reason"]


def test_the_report_and_sarif_carry_the_keyless_verdict(signed, tmp_path, capsys) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    model, _instance, root = signed
    # a checkpoint for the report to read, added after signing in a folder of its own: an
    # unsigned extra (beside the signed files a loader could pick it: it would fail the check)
    (model / "scratch").mkdir()
    save_file({"w": np.arange(8, dtype=np.float32)}, str(model / "scratch" / "extra.safetensors"))
    out, sarif = tmp_path / "report.json", tmp_path / "scan.sarif"
    trust = ["--trust-root", str(root), "--identity", IDENTITY, "--identity-provider", ISSUER]
    assert main(["report", str(model), "-o", str(out), *trust]) == 0
    [verdict] = json.loads(out.read_text())["signatures"]
    assert verdict["state"] == "intact" and verdict["kind"] == "sigstore"
    assert verdict["signer"] == f"sigstore {IDENTITY} (issuer {ISSUER})"
    assert main(["report", str(model), "-o", str(out), "--force"]) == 1  # not intact: fails
    [verdict] = json.loads(out.read_text())["signatures"]
    assert verdict["state"] == "unverified" and "no trust root was given" in verdict["reason"]
    main(["scan", str(model), "--sarif", str(sarif), *trust[:2], "--identity",
          "mallory@example.org", "--identity-provider", ISSUER])
    run = json.loads(sarif.read_text())["runs"][0]
    assert run["properties"]["signatures"][0]["state"] == "invalid"
    assert any(r["ruleId"] == "signature/invalid" for r in run["results"])
