"""A folder signed with a private key, alone or with the certificate that names it (and the
chain above that): the reference library hashes the folder (as its own `model_signing sign key`
and `sign certificate` do, so the reference verifier accepts the result), this project may add
its per-tensor digests to the statement, the library signs, and the bundle is written
atomically. Every input is checked before anything is written; an existing signature is
replaced only when asked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.core.atomic import write_bytes_atomic
from inspector.integrity.manifest import Manifest, TensorEntry
from inspector.signing.bundle import DEFAULT_NAME, looks_like_signature
from inspector.signing.errors import SignatureError
from inspector.signing.keys import (
    certificate_identity,
    describe_key,
    read_private_key,
    read_signing_certificate,
)
from inspector.signing.library import reference
from inspector.signing.statement import (
    GIT_PATHS,
    SAVE_FIELD,
    TENSORS_FIELD,
    SavePlace,
    name_inside,
    tensor_predicate,
)


@dataclass(frozen=True)
class SigningKey:
    """What signs: a private key, and in certificate mode the certificate naming its public
    half and the certificates above that (which the bundle carries for the verifier)."""

    private_key: Path
    certificate: Path | None = None
    chain: Sequence[Path] = ()

    def describe(self) -> str:
        """Who signs, checked (SignatureError for a key or certificate that cannot sign)."""
        if self.certificate is None:
            if self.chain:
                raise SignatureError("unsupported-key", "--certificate-chain goes with the "
                                     "signing --certificate it completes")
            return describe_key(read_private_key(self.private_key).public_key())
        leaf = read_signing_certificate(self.certificate, self.private_key, self.chain)
        return f"certificate {certificate_identity(leaf)}"

    def library_signer(self) -> object:
        """The reference library's signer for this key (and certificate)."""
        if self.certificate is None:
            return reference("_signing.sign_ec_key").Signer(self.private_key)
        return reference("_signing.sign_certificate").Signer(
            self.private_key, self.certificate, list(self.chain))


@dataclass(frozen=True)
class Signed:
    """What `sign_folder` wrote."""

    signature: Path
    files: int
    tensors: int
    signer: str


def signature_path(folder: Path, signature: Path | None) -> Path:
    """Where the signature goes: the path given, else `model.sig` inside the folder."""
    return signature if signature is not None else folder / DEFAULT_NAME


def check_inputs(folder: Path, key: SigningKey, signature: Path, overwrite: bool) -> str:
    """SignatureError for a folder, key, certificate or destination that cannot be used; the
    signer's description otherwise. Nothing is written."""
    if not folder.is_dir():
        raise SignatureError("not-a-folder", f"{folder}: not a folder; sign the folder that "
                             "holds the model's files")
    signer = key.describe()
    _replaceable(signature, overwrite)
    if not signature.parent.is_dir():
        raise SignatureError("unreadable", f"{signature.parent}: no such folder for the "
                             "signature")
    return signer


def _replaceable(signature: Path, overwrite: bool) -> None:
    """SignatureError unless `signature` may be written: absent, or with `overwrite` a
    signature by its name (`*.sig`) or its bytes (whole or damaged: `looks_like_signature`),
    never another file named by mistake (a model's weights named as the destination were
    replaced by the signature)."""
    if not os.path.lexists(signature):
        return
    if not overwrite:
        raise SignatureError("exists", f"{signature} exists; pass --force to replace it")
    if signature.suffix != ".sig" and not looks_like_signature(signature):
        raise SignatureError("exists", f"{signature} exists and is not a signature; --force "
                             "replaces only a signature: name another destination")


def sign_folder(folder: Path, key: SigningKey, signature: Path | None = None,
                overwrite: bool = False,
                tensors: dict[str, list[TensorEntry]] | None = None,
                expected: Manifest | None = None) -> Signed:
    """Sign every file of `folder` (Git's files and the signature itself left out, as the
    reference tool does); `tensors` (`{file: [tensor records]}`) are signed with them; with
    `expected`, only when every file signed is the one that manifest records."""
    hashing = reference("hashing")
    destination = signature_path(folder, signature)
    signer = check_inputs(folder, key, destination, overwrite)
    # the signature is left out wherever it lands in the folder, a linked path included (an
    # old one replaced by --force would be signed, then changed by this very write)
    own = name_inside(folder, destination)
    config = hashing.Config().set_ignored_paths(paths=[own] if own else [],
                                                ignore_git_paths=True)
    try:
        manifest = config.hash(folder)
    except ValueError as exc:  # a link, a socket, a file that vanished
        raise SignatureError("bad-folder", f"{folder}: cannot be signed: {exc}") from exc
    if expected is not None:
        _as_recorded(folder, manifest, expected)
    return _write_signed(manifest, tensors, key, destination, overwrite, signer)


def sign_digests(target: Path, digests: dict[str, str], private_key: Path, signature: Path,
                 tensors: dict[str, list[TensorEntry]] | None = None,
                 overwrite: bool = False, save: SavePlace | None = None) -> Signed:
    """Sign SHA-256s the caller has just proven (the ledger, after re-reading a save), named as
    the reference library names them for `target` (a file is `.`, a folder's files relative to
    it), so `model_signing verify key TARGET --signature SIG` accepts the result."""
    manifest_module, hashing = reference("manifest"), reference("_hashing.hashing")
    key = SigningKey(private_key)
    signer = key.describe()
    if signature.exists() and not overwrite:
        raise SignatureError("exists", f"{signature} exists; pass --force to replace it")
    serialization = manifest_module.SerializationType.from_args(
        {"method": "files", "hash_type": "sha256", "allow_symlinks": False,
         "ignore_paths": list(GIT_PATHS)})
    items = [serialization.new_item(name, hashing.Digest("sha256", bytes.fromhex(digest)))
             for name, digest in sorted(digests.items())]
    manifest = manifest_module.Manifest(target.name, items, serialization)
    return _write_signed(manifest, tensors, key, signature, overwrite, signer, save)


def _write_signed(manifest: Any, tensors: dict[str, list[TensorEntry]] | None,
                  key: SigningKey, destination: Path, overwrite: bool, signer: str,
                  save: SavePlace | None = None) -> Signed:
    """The library's statement of `manifest` (with the tensors and save fields), signed and
    written."""
    signing = reference("_signing.signing")
    names = {rd.identifier for rd in manifest.resource_descriptors()}
    unknown = sorted(set(tensors or {}) - names)
    if unknown:
        raise SignatureError("bad-folder", f"tensors given for {unknown[0]!r}, which is not a "
                             "file the signature covers")
    payload = signing.Payload(manifest)
    if tensors:
        payload.statement.pb.predicate.update({TENSORS_FIELD: tensor_predicate(tensors)})
    if save is not None:
        payload.statement.pb.predicate.update({SAVE_FIELD: save.to_json()})
    bundle = key.library_signer().sign(payload).bundle  # type: ignore[attr-defined]
    write_bytes_atomic(destination, bundle.to_json().encode("utf-8"), overwrite=overwrite)
    return Signed(signature=destination, files=len(names),
                  tensors=sum(len(t) for t in (tensors or {}).values()), signer=signer)


def _as_recorded(folder: Path, hashed: object, expected: Manifest) -> None:
    """SignatureError unless the files the library hashed are exactly those `expected` lists,
    with its SHA-256s (the manifest itself, when it lies in the folder, is signed unlisted)."""
    want = {os.path.abspath(expected.resolve(e)): e for e in expected.files}
    own = os.path.abspath(expected.source) if expected.source is not None else None
    for rd in hashed.resource_descriptors():  # type: ignore[attr-defined]
        path = os.path.abspath(folder / rd.identifier)
        if path == own:
            continue
        entry = want.pop(path, None)
        if entry is None:
            raise SignatureError("manifest-mismatch", f"{rd.identifier} is in {folder} but not "
                                 f"in {expected.source}; nothing signed")
        if entry.sha256 != rd.digest.digest_hex:
            raise SignatureError("manifest-mismatch", f"{rd.identifier}: its SHA-256 is not "
                                 f"the one {expected.source} records; nothing signed")
    if want:
        missing = next(iter(want.values())).path
        raise SignatureError("manifest-mismatch", f"{expected.source} lists {missing}, which "
                             f"{folder} does not hold (or the signature leaves out); nothing "
                             "signed")
