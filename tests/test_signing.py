"""OpenSSF Model Signing through the real CLI, both ways with the reference tool (`model_signing`
run in a subprocess): a folder it signs verifies with ours, one we sign verifies with its
`verify key`; then one flipped byte, a swapped key, an unsigned file, certificate mode with a
chain the test makes, and bad input (each one line, nothing written). Keys are made here."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from signing_keys import write_key

from inspector.cli import main
from inspector.integrity import hashing
from inspector.signing.folder import check_folder

REFERENCE = [sys.executable, "-m", "model_signing"]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path / "keys"
    folder.mkdir()
    return {"alice": write_key(folder, "alice"),
            "bob": write_key(folder, "bob", ec.generate_private_key(ec.SECP384R1()))}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 512)
    (folder / "config.json").write_text('{"hidden": 8}')
    (folder / "sub" / "tokenizer.txt").write_text("a b c")
    (folder / ".hidden-notes").write_text("signed too")
    return folder


def _reference(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*REFERENCE, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_folder_the_reference_signs_verifies_with_ours(model, keys, capsys) -> None:
    pem, pub = keys["alice"]
    done = _reference("sign", "key", model, "--private_key", pem, "--signature",
                      model / "model.sig")
    assert done.returncode == 0, done.stderr
    # the model.sig inside the folder is found without --signature
    assert main(["verify", str(model), "--public-key", str(pub)]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and "4 files signed" in out and "4 files: 4 ok" in out

    _flip(model / "weights.bin", 70_000)
    assert main(["verify", str(model), "--public-key", str(pub)]) == 1
    out = capsys.readouterr().out
    assert "changed" in out
    assert any(line.startswith("MISMATCH") and "weights.bin" in line
               for line in out.splitlines())


def test_a_folder_we_sign_verifies_with_the_reference(model, keys, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    assert "signed 4 files" in capsys.readouterr().out
    done = _reference("verify", "key", model, "--signature", model / "model.sig",
                      "--public_key", pub)
    assert done.returncode == 0, done.stderr
    assert main(["verify", str(model), "--public-key", str(pub), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "intact" and doc["signature"]["kind"] == "key"
    assert doc["dialect"] == "oms" and doc["ok"] is True

    (model / "config.json").write_text('{"hidden": 9}')
    assert _reference("verify", "key", model, "--signature", model / "model.sig",
                      "--public_key", pub).returncode != 0
    assert main(["verify", str(model), "--public-key", str(pub), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {f["path"]: f["status"] for f in doc["files"]}["config.json"] == "mismatch"
    assert doc["signature"]["state"] == "changed"


def test_the_wrong_key_is_named(model, keys, capsys) -> None:
    pem, _pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    capsys.readouterr()
    assert main(["verify", str(model), "--public-key", str(keys["bob"][1])]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID") and "wrong key" in out
    assert _reference("verify", "key", model, "--signature", model / "model.sig",
                      "--public_key", keys["bob"][1]).returncode != 0


def test_a_signature_changed_after_signing_is_invalid(model, keys, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    sig = model / "model.sig"
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    # the attacker swaps a file's digest (root digest recomputed is not enough without the key)
    statement["predicate"]["resources"][0]["digest"] = "0" * 64
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    sig.write_text(json.dumps(bundle))
    capsys.readouterr()
    assert main(["verify", str(model), "--public-key", str(pub), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "invalid"
    assert "invalid signature" in doc["signature"]["reason"]


def test_an_unsigned_file_is_reported_and_fails_under_strict(model, keys, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    (model / ".sneaky.py").write_text("import os")  # hidden: the reference signs those too
    (model / "extra.bin").write_bytes(b"x")
    capsys.readouterr()
    assert main(["verify", str(model), "--public-key", str(pub), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    extras = sorted(Path(f["path"]).name for f in doc["files"] if f["status"] == "extra")
    assert extras == [".sneaky.py", "extra.bin"]
    assert main(["verify", str(model), "--public-key", str(pub), "--strict"]) == 1
    assert "NOT IN MANIFEST" in capsys.readouterr().out



def test_only_the_files_a_signature_that_holds_covers_are_read(model, keys,
                                                                monkeypatch) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    (model / "extra.bin").write_bytes(b"x" * 4096)
    read: list[str] = []
    whole_file = hashing.sha256_file

    def recorded(path, *args, **kwargs):
        read.append(Path(path).name)
        return whole_file(path, *args, **kwargs)

    monkeypatch.setattr(hashing, "sha256_file", recorded)
    wrong = check_folder(model, model / "model.sig", keys["bob"][1])
    assert wrong.error is not None and wrong.error.code == "wrong-key" and read == []

    held = check_folder(model, model / "model.sig", pub)
    assert held.verdict.state == "intact" and held.result is not None
    assert sorted(read) == [".hidden-notes", "config.json", "tokenizer.txt", "weights.bin"]

def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


@dataclass(frozen=True)
class Chain:
    """PEM files of a chain the test makes: root -> intermediate -> code-signing leaf, the
    leaf's key, and a root that issued none of them."""

    leaf_key: Path
    leaf: Path
    intermediate: Path
    root: Path
    other_root: Path


def _certificate(subject: str, key, issuer: x509.Certificate | None, issuer_key, *, ca: bool,
                 usage: str = "sign") -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    usages = {"sign": (True, False, False, False, False, False, False, False, False),
              "ca": (False, False, False, False, False, True, True, False, False),
              "encrypt": (False, False, True, False, False, False, False, False, False)}
    builder = (x509.CertificateBuilder().subject_name(_name(subject))
               .issuer_name(issuer.subject if issuer else _name(subject))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.KeyUsage(*usages["ca" if ca else usage]), critical=True))
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                        critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.RFC822Name("bot@example.org")]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _chain(folder: Path, usage: str = "sign") -> Chain:
    """A root, an intermediate it issued and a leaf for `usage` the intermediate issued."""
    keys = {name: ec.generate_private_key(ec.SECP256R1())
            for name in ("root", "intermediate", "leaf", "other")}
    root = _certificate("Test Root", keys["root"], None, keys["root"], ca=True)
    other = _certificate("Other Root", keys["other"], None, keys["other"], ca=True)
    middle = _certificate("Test Intermediate", keys["intermediate"], root, keys["root"], ca=True)
    leaf = _certificate("release-bot", keys["leaf"], middle, keys["intermediate"], ca=False,
                        usage=usage)
    paths = {}
    for name, cert in (("leaf", leaf), ("intermediate", middle), ("root", root),
                       ("other", other)):
        paths[name] = folder / f"{name}-{usage}.crt"
        paths[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    leaf_pem, _ = write_key(folder, f"leaf-{usage}", keys["leaf"])
    return Chain(leaf_pem, paths["leaf"], paths["intermediate"], paths["root"], paths["other"])


def test_certificate_mode_with_a_chain_the_test_makes(model, tmp_path, capsys) -> None:
    chain = _chain(tmp_path)
    sig = tmp_path / "cert.sig"
    done = _reference("sign", "certificate", model, "--private_key", chain.leaf_key,
                      "--signing_certificate", chain.leaf, "--certificate_chain",
                      chain.intermediate, "--signature", sig)
    assert done.returncode == 0, done.stderr
    assert main(["verify", str(model), "--signature", str(sig), "--certificate",
                 str(chain.root)]) == 0
    out = capsys.readouterr().out
    assert "certificate CN=release-bot, bot@example.org" in out and "intact" in out
    assert main(["verify", str(model), "--signature", str(sig), "--certificate",
                 str(chain.other_root)]) == 1
    assert "untrusted certificate" in capsys.readouterr().out
    assert main(["verify", str(model), "--signature", str(sig)]) == 2
    assert "pass --certificate" in capsys.readouterr().err


def _reference_verifies_certificate(model: Path, root: Path) -> bool:
    done = _reference("verify", "certificate", model, "--signature", model / "model.sig",
                      "--certificate_chain", root)
    return done.returncode == 0


def test_we_sign_in_certificate_mode_and_the_reference_verifies(model, tmp_path,
                                                                capsys) -> None:
    chain = _chain(tmp_path)
    assert main(["sign", str(model), "--private-key", str(chain.leaf_key), "--certificate",
                 str(chain.leaf), "--certificate-chain", str(chain.intermediate)]) == 0
    assert "with certificate CN=release-bot, bot@example.org" in capsys.readouterr().out
    bundle = json.loads((model / "model.sig").read_text())
    assert len(bundle["verificationMaterial"]["x509CertificateChain"]["certificates"]) == 2
    assert _reference_verifies_certificate(model, chain.root)
    assert main(["verify", str(model), "--certificate", str(chain.root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"]["state"] == "intact" and doc["signature"]["kind"] == "certificate"

    # a chain the signer's root is not in: both refuse the signature
    assert not _reference_verifies_certificate(model, chain.other_root)
    assert main(["verify", str(model), "--certificate", str(chain.other_root)]) == 1
    assert "untrusted certificate" in capsys.readouterr().out

    # an unsigned file: reported, and it fails under --strict
    (model / "extra.bin").write_bytes(b"x")
    assert main(["verify", str(model), "--certificate", str(chain.root)]) == 0
    assert "NOT IN MANIFEST" in capsys.readouterr().out
    assert main(["verify", str(model), "--certificate", str(chain.root), "--strict"]) == 1
    (model / "extra.bin").unlink()
    capsys.readouterr()

    # one flipped byte: both say the folder changed, ours names the file
    _flip(model / "weights.bin", 1234)
    assert not _reference_verifies_certificate(model, chain.root)
    assert main(["verify", str(model), "--certificate", str(chain.root)]) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("MISMATCH") and "weights.bin" in line
               for line in out.splitlines())


def test_a_certificate_that_cannot_sign_is_refused_and_nothing_written(model, tmp_path,
                                                                       capsys) -> None:
    chain, other = _chain(tmp_path), _chain(tmp_path, usage="encrypt")
    before = _snapshot(model)
    cases = [
        (["--private-key", str(chain.leaf_key), "--certificate", str(other.leaf)],
         "names another key"),
        (["--private-key", str(other.leaf_key), "--certificate", str(other.leaf)],
         "may not sign"),
        (["--private-key", str(chain.leaf_key), "--certificate", str(chain.leaf),
          "--certificate-chain", str(chain.leaf_key)], "not PEM certificates"),
        (["--private-key", str(chain.leaf_key), "--certificate-chain", str(chain.root)],
         "goes with the signing --certificate"),
    ]
    for extra, message in cases:
        assert main(["sign", str(model), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert _snapshot(model) == before


def test_signed_tensor_digests_name_the_tensor_that_changed(tmp_path, keys, capsys) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    folder = tmp_path / "st"
    folder.mkdir()
    tensors = {"a": np.arange(64, dtype=np.float32), "b": np.ones((4, 4), dtype=np.float32)}
    save_file(tensors, str(folder / "model.safetensors"))
    pem, pub = keys["alice"]
    assert main(["sign", str(folder), "--private-key", str(pem), "--tensors"]) == 0
    assert "and 2 tensors" in capsys.readouterr().out
    assert _reference("verify", "key", folder, "--signature", folder / "model.sig",
                      "--public_key", pub).returncode == 0  # the extra field is ignored there
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 0x80  # the sign bit of b's last element
    (folder / "model.safetensors").write_bytes(bytes(data))
    assert main(["verify", str(folder), "--public-key", str(pub), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    changed = {t["key"]: t["status"] for t in doc["tensors"]}
    assert changed == {"a": "ok", "b": "mismatch"}


# --- bad input: one line, exit 2, nothing written --------------------------------------------

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_truncated_or_foreign_signature_is_one_line(model, keys, tmp_path, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    capsys.readouterr()
    full = (model / "model.sig").read_bytes()
    cut = tmp_path / "cut.sig"
    cut.write_bytes(full[: len(full) // 2])
    before = _snapshot(model)
    assert main(["verify", str(model), "--signature", str(cut), "--public-key", str(pub)]) == 2
    err = capsys.readouterr().err
    assert "truncated" in err and len(err.strip().splitlines()) == 1
    blob = tmp_path / "blob.sig"
    blob.write_text(json.dumps({"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                                "verificationMaterial": {"publicKey": {"hint": "x"}},
                                "messageSignature": {}}))
    assert main(["verify", str(model), "--signature", str(blob), "--public-key", str(pub)]) == 2
    assert "one blob" in capsys.readouterr().err
    assert _snapshot(model) == before


def test_a_signature_of_another_folder_says_so(model, keys, tmp_path, capsys) -> None:
    pem, pub = keys["alice"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "unrelated.bin").write_bytes(b"other model")
    assert main(["sign", str(other), "--private-key", str(pem)]) == 0
    capsys.readouterr()
    assert main(["verify", str(model), "--signature", str(other / "model.sig"),
                 "--public-key", str(pub)]) == 1
    assert "signature of another folder" in capsys.readouterr().out


def test_files_the_signature_covers_that_are_missing_fail(model, keys, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    (model / "sub" / "tokenizer.txt").unlink()
    capsys.readouterr()
    assert main(["verify", str(model), "--public-key", str(pub)]) == 1
    assert "MISSING        sub/tokenizer.txt" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["rsa", "ed25519", "p224"])
def test_unsupported_key_types_are_refused_and_nothing_written(model, tmp_path, kind,
                                                               capsys) -> None:
    private = {"rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
               "ed25519": ed25519.Ed25519PrivateKey.generate,
               "p224": lambda: ec.generate_private_key(ec.SECP224R1())}[kind]()
    pem, _pub = write_key(tmp_path, kind, private)
    before = _snapshot(model)
    assert main(["sign", str(model), "--private-key", str(pem)]) == 2
    err = capsys.readouterr().err
    assert "OpenSSF Model Signing signs with ECDSA keys" in err
    assert len(err.strip().splitlines()) == 1
    assert _snapshot(model) == before


def test_sign_never_overwrites_unless_asked(model, keys, capsys) -> None:
    pem, _pub = keys["alice"]
    (model / "model.sig").write_text("someone else's signature")
    assert main(["sign", str(model), "--private-key", str(pem)]) == 4
    assert "--force" in capsys.readouterr().err
    assert (model / "model.sig").read_text() == "someone else's signature"
    assert main(["sign", str(model), "--private-key", str(pem), "--force"]) == 0
    assert json.loads((model / "model.sig").read_text())["dsseEnvelope"]


def test_a_public_key_given_to_sign_and_a_private_one_to_verify(model, keys, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pub)]) == 2
    assert "signing needs the private key" in capsys.readouterr().err
    assert not (model / "model.sig").exists()
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    assert main(["verify", str(model), "--public-key", str(pem)]) == 2
    assert "its public half" in capsys.readouterr().err


def test_a_keyless_bundle_says_no_trust_root_is_available_offline(model, keys, tmp_path,
                                                                  capsys) -> None:
    pem, _pub = keys["alice"]
    leaf_cert = _chain(tmp_path).leaf
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    bundle = json.loads((model / "model.sig").read_text())
    der = x509.load_pem_x509_certificate(leaf_cert.read_bytes()).public_bytes(
        serialization.Encoding.DER)
    # the shape Sigstore's keyless flow writes: a short-lived certificate and a log entry
    bundle["verificationMaterial"] = {"certificate": {"rawBytes": base64.b64encode(der).decode()},
                                      "tlogEntries": [{"logIndex": "1"}]}
    (model / "model.sig").write_text(json.dumps(bundle))
    capsys.readouterr()
    assert main(["verify", str(model)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("UNVERIFIED") and "no trust root was given" in out


def test_a_folder_with_a_link_is_not_signed(model, keys, tmp_path, capsys) -> None:
    pem, _pub = keys["alice"]
    (tmp_path / "outside.txt").write_text("not part of the model")
    (model / "link.txt").symlink_to(tmp_path / "outside.txt")
    before = _snapshot(model)
    assert main(["sign", str(model), "--private-key", str(pem)]) == 2
    err = capsys.readouterr().err
    assert "symlink" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(model) == before and not (model / "model.sig").exists()
    assert main(["sign", str(tmp_path / "outside.txt"), "--private-key", str(pem)]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_a_signed_name_that_leaves_the_folder_is_refused(model, keys, tmp_path,
                                                         capsys) -> None:
    import hashlib
    from pathlib import PurePosixPath

    from model_signing import manifest
    from model_signing._hashing import hashing
    from model_signing._signing import sign_ec_key, signing

    pem, pub = keys["alice"]
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the model")
    digest = hashing.Digest("sha256", hashlib.sha256(secret.read_bytes()).digest())
    serialization_ = manifest.SerializationType.from_args(
        {"method": "files", "hash_type": "sha256", "allow_symlinks": False})
    crafted = manifest.Manifest("model", [manifest.FileManifestItem(
        path=PurePosixPath("../secret.txt"), digest=digest)], serialization_)
    bundle = sign_ec_key.Signer(pem).sign(signing.Payload(crafted)).bundle
    sig = tmp_path / "crafted.sig"
    sig.write_text(bundle.to_json())
    assert main(["verify", str(model), "--signature", str(sig), "--public-key", str(pub)]) == 2
    err = capsys.readouterr().err
    assert "lies outside" in err and len(err.strip().splitlines()) == 1


def test_a_bundle_with_a_repeated_key_or_of_no_regular_file_is_refused(model, keys, tmp_path,
                                                                       capsys) -> None:
    import os

    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    text = (model / "model.sig").read_text()
    twice = tmp_path / "twice.sig"
    twice.write_text(text[:-1] + ', "mediaType": "x"}')
    capsys.readouterr()
    assert main(["verify", str(model), "--signature", str(twice), "--public-key", str(pub)]) == 2
    assert "given twice" in capsys.readouterr().err
    fifo = tmp_path / "fifo.sig"
    os.mkfifo(fifo)  # never waited on
    assert main(["verify", str(model), "--signature", str(fifo), "--public-key", str(pub)]) == 2
    assert "regular file" in capsys.readouterr().err


# --- the statement as a manifest, and a manifest as what may be signed -----------------------

def test_a_verified_statement_exports_as_a_manifest_that_verify_and_sha256sum_accept(
        model, keys, tmp_path, capsys) -> None:
    pem, pub = keys["alice"]
    assert main(["sign", str(model), "--private-key", str(pem)]) == 0
    out = tmp_path / "meta" / "SHA256SUMS"
    out.parent.mkdir()
    capsys.readouterr()
    assert main(["manifest", "create", str(model), "-o", str(out), "--signature",
                 str(model / "model.sig"), "--public-key", str(pub)]) == 0
    assert "4 files signed by ECDSA P-256" in capsys.readouterr().out
    names = sorted(line.split("  ", 1)[1] for line in out.read_text().splitlines())
    assert names == ["../model/.hidden-notes", "../model/config.json",
                     "../model/sub/tokenizer.txt", "../model/weights.bin"]
    done = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out.parent,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    _flip(model / "weights.bin", 3)
    assert main(["verify", "-m", str(out), str(model), "--no-tensors"]) == 1
    # a signature that does not verify exports nothing
    other = tmp_path / "other.sha256"
    assert main(["manifest", "create", str(model), "-o", str(other), "--signature",
                 str(model / "model.sig"), "--public-key", str(keys["bob"][1])]) == 2
    assert "wrong key" in capsys.readouterr().err and not other.exists()


def test_sign_with_a_manifest_signs_only_what_it_records(model, keys, tmp_path,
                                                         capsys) -> None:
    pem, pub = keys["alice"]
    sums = tmp_path / "SHA256SUMS"
    assert main(["manifest", "create", str(model), "-o", str(sums)]) == 0
    capsys.readouterr()
    # the manifest skips the hidden file the signature would cover: refused, nothing written
    assert main(["sign", str(model), "--private-key", str(pem), "--manifest", str(sums)]) == 2
    assert ".hidden-notes is in" in capsys.readouterr().err
    (model / ".hidden-notes").unlink()
    _flip(model / "weights.bin", 9)
    assert main(["sign", str(model), "--private-key", str(pem), "--manifest", str(sums)]) == 2
    assert "weights.bin: its SHA-256 is not the one" in capsys.readouterr().err
    assert not (model / "model.sig").exists()
    _flip(model / "weights.bin", 9)
    assert main(["sign", str(model), "--private-key", str(pem), "--manifest", str(sums)]) == 0
    assert _reference("verify", "key", model, "--signature", model / "model.sig",
                      "--public_key", pub).returncode == 0


def test_signing_one_file_says_one_file(tmp_path, keys, capsys) -> None:
    pem, _ = keys["alice"]
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\0" * 64)
    assert main(["sign", str(folder), "--private-key", str(pem)]) == 0
    assert "signed 1 file of " in capsys.readouterr().out


def test_a_signed_statement_naming_a_file_twice_is_refused(model, keys, capsys) -> None:
    """A statement signed over 'weights.bin' and again as 'sub/../weights.bin' with another
    digest: each file is matched to one name, so the second went unchecked ('intact')."""
    from inspector.signing.make import sign_digests

    pem, pub = keys["alice"]
    good = hashing.sha256_file(model / "weights.bin")
    sig = model.parent / "twice.sig"
    sign_digests(model, {"weights.bin": good, "sub/../weights.bin": "0" * 64}, pem, sig)
    assert main(["verify", str(model), "--signature", str(sig), "--public-key", str(pub)]) == 2
    err = capsys.readouterr().err
    assert "the signed statement: 'weights.bin' is listed twice (as 'sub/../weights.bin'" in err
