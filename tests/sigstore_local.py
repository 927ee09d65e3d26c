"""A Sigstore instance made in the test, offline: a Fulcio-like root CA, a certificate
transparency log key and a Rekor key, written as a trusted root (and a client trust config for
the reference tool), and keyless bundles made the way Sigstore makes them: a short-lived
code-signing certificate for an OIDC identity with its SCT embedded, the DSSE envelope signed
with its key, and a `dsse` log entry with an inclusion proof, a signed checkpoint and a signed
entry timestamp. Everything is built from its definition here (RFC 6962 SCTs, the transparency
log's leaf hash and signed note), never copied from a real bundle."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

SCT_LIST = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
OIDC_ISSUER = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
START = "2020-01-01T00:00:00Z"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _der(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def _octet_string(data: bytes) -> bytes:
    size = len(data)
    length = bytes([size]) if size < 0x80 else \
        bytes([0x80 | ((size.bit_length() + 7) // 8)]) + size.to_bytes((size.bit_length() + 7)
                                                                        // 8, "big")
    return b"\x04" + length + data


def _log(key: ec.EllipticCurvePrivateKey, url: str) -> dict:
    return {"baseUrl": url, "hashAlgorithm": "SHA2_256",
            "publicKey": {"rawBytes": _b64(_der(key)), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                          "validFor": {"start": START}},
            "logId": {"keyId": _b64(hashlib.sha256(_der(key)).digest())}}


@dataclass
class LocalSigstore:
    """The instance's keys and root certificate."""

    fulcio_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    ct_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    rekor_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    now: datetime.datetime = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).replace(microsecond=0))

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "local"),
                          x509.NameAttribute(NameOID.COMMON_NAME, "local-fulcio")])
        key = self.fulcio_key.public_key()
        self.fulcio = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(days=30))
            .not_valid_after(self.now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key), critical=False)
            .sign(self.fulcio_key, hashes.SHA256()))

    def trusted_root(self) -> dict:
        """The trusted root document (Sigstore's `trusted_root.json`)."""
        return {"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
                "tlogs": [_log(self.rekor_key, "https://rekor.invalid")],
                "certificateAuthorities": [{
                    "subject": {"organization": "local", "commonName": "local-fulcio"},
                    "uri": "https://fulcio.invalid",
                    "certChain": {"certificates": [
                        {"rawBytes": _b64(self.fulcio.public_bytes(serialization.Encoding.DER))}
                    ]},
                    "validFor": {"start": START}}],
                "ctlogs": [_log(self.ct_key, "https://ct.invalid")],
                "timestampAuthorities": []}

    def write_trusted_root(self, path: Path) -> Path:
        """`trusted_root()` written to `path`."""
        path.write_text(json.dumps(self.trusted_root()))
        return path

    def write_client_trust_config(self, path: Path) -> Path:
        """The trusted root inside a client trust config (what `--trust_config` reads)."""
        path.write_text(json.dumps({
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": self.trusted_root(),
            "signingConfig": {"mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                              "caUrls": [], "oidcUrls": [], "rekorTlogUrls": [],
                              "tsaUrls": []}}))
        return path

    def issue(self, key: ec.EllipticCurvePrivateKey, identity: str, issuer: str
              ) -> x509.Certificate:
        """A ten-minute code-signing certificate for `identity` (an e-mail) from `issuer`, with
        the CT log's SCT over its precertificate embedded."""
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(self.fulcio.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(minutes=1))
            .not_valid_after(self.now + datetime.timedelta(minutes=10))
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                         False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.fulcio_key.public_key()), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(identity)]),
                           critical=True)
            .add_extension(x509.UnrecognizedExtension(OIDC_ISSUER, issuer.encode()),
                           critical=False))
        tbs = builder.sign(self.fulcio_key, hashes.SHA256()).tbs_certificate_bytes
        sct = self._sct(tbs)
        sct_list = struct.pack("!H", len(sct)) + sct
        extension = _octet_string(struct.pack("!H", len(sct_list)) + sct_list)
        certificate = builder.add_extension(x509.UnrecognizedExtension(SCT_LIST, extension),
                                            critical=False).sign(self.fulcio_key,
                                                                 hashes.SHA256())
        assert certificate.tbs_precertificate_bytes == tbs  # what the SCT was signed over
        return certificate

    def _sct(self, tbs: bytes) -> bytes:
        """One RFC 6962 v1 SCT for a precertificate entry with TBS `tbs`, signed by the CT key."""
        timestamp = int(self.now.timestamp() * 1000)
        issuer_key_hash = hashlib.sha256(_der(self.fulcio_key)).digest()
        entry = issuer_key_hash + len(tbs).to_bytes(3, "big") + tbs
        signed = struct.pack("!BBQH", 0, 0, timestamp, 1) + entry + struct.pack("!H", 0)
        signature = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return (struct.pack("!B", 0) + hashlib.sha256(_der(self.ct_key)).digest()
                + struct.pack("!QH", timestamp, 0)
                + struct.pack("!BBH", 4, 3, len(signature)) + signature)

    def keyless(self, key_bundle: dict, certificate: x509.Certificate) -> dict:
        """A bundle signed with the certificate's key (as `sign --private-key` writes it) made
        keyless: the certificate instead of the key, and the log entry for its envelope."""
        envelope = key_bundle["dsseEnvelope"]
        payload = base64.b64decode(envelope["payload"])
        pem = certificate.public_bytes(serialization.Encoding.PEM)
        body = json.dumps({"apiVersion": "0.0.1", "kind": "dsse", "spec": {
            "envelopeHash": {"algorithm": "sha256", "value": hashlib.sha256(
                json.dumps(envelope).encode()).hexdigest()},
            "payloadHash": {"algorithm": "sha256",
                            "value": hashlib.sha256(payload).hexdigest()},
            "signatures": [{"signature": s["sig"], "verifier": _b64(pem)}
                           for s in envelope["signatures"]]}}).encode()
        log_id = hashlib.sha256(_der(self.rekor_key)).digest()
        integrated = int(self.now.timestamp())
        promise = self.rekor_key.sign(rfc8785.dumps({
            "body": _b64(body), "integratedTime": integrated, "logID": log_id.hex(),
            "logIndex": 0}), ec.ECDSA(hashes.SHA256()))
        root = hashlib.sha256(b"\x00" + body).digest()  # a one-leaf tree: the leaf is the root
        note = f"rekor.invalid - 1\n1\n{_b64(root)}\n"
        signed = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = f"{note}\n\u2014 rekor.invalid {_b64(log_id[:4] + signed)}\n"
        entry = {"logIndex": "0", "logId": {"keyId": _b64(log_id)},
                 "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                 "integratedTime": str(integrated),
                 "inclusionPromise": {"signedEntryTimestamp": _b64(promise)},
                 "inclusionProof": {"logIndex": "0", "rootHash": _b64(root), "treeSize": "1",
                                    "hashes": [], "checkpoint": {"envelope": checkpoint}},
                 "canonicalizedBody": _b64(body)}
        der = certificate.public_bytes(serialization.Encoding.DER)
        return {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                "verificationMaterial": {"certificate": {"rawBytes": _b64(der)},
                                         "tlogEntries": [entry]},
                "dsseEnvelope": envelope}


def sign_keylessly(folder: Path, scratch: Path, identity: str, issuer: str
                   ) -> tuple[LocalSigstore, Path]:
    """`folder` signed keylessly as `identity` from `issuer` through a new local instance
    (`folder/model.sig`; the ephemeral key and its key bundle in `scratch`), and the instance's
    trusted root written to `scratch/trusted_root.json`."""
    from signing_keys import write_key

    from inspector.cli import main

    instance = LocalSigstore()
    key = ec.generate_private_key(ec.SECP256R1())
    pem, _pub = write_key(scratch, "ephemeral", key)
    assert main(["sign", str(folder), "--private-key", str(pem), "--signature",
                 str(scratch / "key.sig")]) == 0
    bundle = instance.keyless(json.loads((scratch / "key.sig").read_text()),
                              instance.issue(key, identity, issuer))
    (folder / "model.sig").write_text(json.dumps(bundle))
    return instance, instance.write_trusted_root(scratch / "trusted_root.json")
