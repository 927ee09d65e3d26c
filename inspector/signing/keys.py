"""Keys and certificates read and checked before the reference library gets them: a PEM file of
bounded size holding the kind of key OpenSSF Model Signing signs with (ECDSA on P-256, P-384 or
P-521), the fingerprint the bundle records for it, a certificate's identity, and a signing
certificate that names the signing key and may sign."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

from inspector.signing.errors import SignatureError
from inspector.signing.small_file import read_small

if TYPE_CHECKING:
    from cryptography import x509

CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
"""The curves the reference library signs with, and their common names."""

MAX_KEY_BYTES = 1 << 20

MAKE_KEY = ("make one with `openssl ecparam -genkey -name prime256v1 -noout -out key.pem` and "
            "its public half with `openssl ec -in key.pem -pubout -out key.pub`")


def _kind_of(key: object) -> str:
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        return f"an RSA-{key.key_size} key"
    if isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return "an Ed25519 key"
    if isinstance(key, ed448.Ed448PublicKey | ed448.Ed448PrivateKey):
        return "an Ed448 key"
    if isinstance(key, dsa.DSAPublicKey | dsa.DSAPrivateKey):
        return "a DSA key"
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return f"an ECDSA key on {key.curve.name}"
    return f"a {type(key).__name__}"


def _supported(path: Path, key: object) -> None:
    if not isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey) or \
            key.curve.name not in CURVES:
        raise SignatureError("unsupported-key", f"{path}: {_kind_of(key)}; OpenSSF Model "
                             "Signing signs with ECDSA keys on P-256, P-384 or P-521: "
                             f"{MAKE_KEY}")


def read_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    """A PEM public key of a supported kind; SignatureError naming the file otherwise."""
    data = read_small(path, "public key", MAX_KEY_BYTES, too_big="unsupported-key")
    if b"PRIVATE KEY" in data:
        raise SignatureError("unsupported-key", f"{path}: a private key; verify with its "
                             "public half (`openssl ec -in KEY.pem -pubout -out key.pub`)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        hint = " (a certificate: pass it with --certificate)" if b"CERTIFICATE" in data else ""
        raise SignatureError("unsupported-key", f"{path}: not a PEM public key{hint}") from exc
    _supported(path, key)
    return key  # type: ignore[return-value]


def read_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """A PEM private key, unencrypted, of a supported kind; SignatureError otherwise."""
    data = read_small(path, "private key", MAX_KEY_BYTES, too_big="unsupported-key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:  # encrypted, and no password given
        raise SignatureError("unsupported-key", f"{path}: the private key is encrypted; "
                             "decrypt a copy (`openssl ec -in KEY -out plain.pem`)") from exc
    except ValueError as exc:
        what = "a public key; signing needs the private key" if b"PUBLIC KEY" in data else \
            "not a PEM private key"
        raise SignatureError("unsupported-key", f"{path}: {what}") from exc
    except Exception as exc:  # an unsupported algorithm inside a valid PEM
        raise SignatureError("unsupported-key", f"{path}: not a usable private key: "
                             f"{exc}") from exc
    _supported(path, key)
    return key  # type: ignore[return-value]


def fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """SHA-256 of the key's PEM SubjectPublicKeyInfo: the `hint` the bundle records."""
    pem = key.public_bytes(serialization.Encoding.PEM,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def describe_key(key: ec.EllipticCurvePublicKey) -> str:
    """How a person is told which key signed: curve and fingerprint."""
    return f"ECDSA {CURVES.get(key.curve.name, key.curve.name)} key sha256:{fingerprint(key)}"


def certificate_identity(certificate: x509.Certificate) -> str:
    """Who a certificate names: its subject and any e-mail or URI alternative names."""
    from cryptography import x509  # certificates only: a key check never loads X.509

    names = [certificate.subject.rfc4514_string() or "(no subject)"]
    try:
        alt = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += alt.get_values_for_type(x509.RFC822Name)
        names += alt.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        pass
    return ", ".join(names)


def read_certificates(path: Path) -> list[x509.Certificate]:
    """The PEM certificates of one file (a chain, or one certificate); SignatureError otherwise."""
    from cryptography import x509

    data = read_small(path, "certificate", MAX_KEY_BYTES, too_big="unsupported-key")
    try:
        found = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise SignatureError("unsupported-key", f"{path}: not PEM certificates") from exc
    if not found:
        raise SignatureError("unsupported-key", f"{path}: not PEM certificates")
    return found


def read_signing_certificate(path: Path, private_key: Path, chain: Sequence[Path] = ()
                             ) -> x509.Certificate:
    """The certificate that names `private_key`'s public half, valid now and allowed to sign
    (key usage digitalSignature or extended key usage codeSigning, the reference verifier's
    rule), its chain files readable; SignatureError (one line) otherwise."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = read_private_key(private_key)
    certificates = read_certificates(path)
    if len(certificates) != 1:
        raise SignatureError("unsupported-key", f"{path}: {len(certificates)} certificates; "
                             "--certificate is the signing certificate alone, the ones above it "
                             "go in --certificate-chain")
    certificate = certificates[0]
    if certificate.public_key() != key.public_key():
        raise SignatureError("unsupported-key", f"{path}: the certificate names another key "
                             f"than {private_key} ({certificate_identity(certificate)})")
    now = datetime.datetime.now(datetime.UTC)
    if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
        raise SignatureError("unsupported-key", f"{path}: the certificate is valid from "
                             f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M} to "
                             f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now")
    try:
        may_sign = certificate.extensions.get_extension_for_class(
            x509.KeyUsage).value.digital_signature
    except x509.ExtensionNotFound:
        may_sign = False
    with contextlib.suppress(x509.ExtensionNotFound):
        may_sign = may_sign or ExtendedKeyUsageOID.CODE_SIGNING in \
            certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    if not may_sign:
        raise SignatureError("unsupported-key", f"{path}: the certificate may not sign (no "
                             "digitalSignature key usage, no codeSigning extended key usage); "
                             "the reference verifier would refuse the signature")
    for link in chain:
        read_certificates(link)
    return certificate
