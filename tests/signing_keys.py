"""Signing keys for the signing tests, written as PEM files (private PKCS#8, public SPKI)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def write_key(folder: Path, name: str, private=None) -> tuple[Path, Path]:
    """`name`.pem and `name`.pub in `folder` for `private` (default: a new P-256 key)."""
    private = private if private is not None else ec.generate_private_key(ec.SECP256R1())
    pem, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    pem.write_bytes(private.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    pub.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pem, pub
