"""A signature file read and sorted before any key touches it: a regular file of bounded size,
one JSON object without repeated keys, shaped as a Sigstore bundle around a DSSE envelope, and
how it was signed (a key, a certificate chain, or Sigstore's keyless flow), read from its
verification material."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.core.strict_json import no_repeats
from inspector.core.vocabulary import SignerKind
from inspector.integrity.regular_file import open_regular
from inspector.signing.errors import SignatureError
from inspector.signing.library import reference
from inspector.signing.small_file import read_small

DEFAULT_NAME = "model.sig"
"""The name the reference tool gives a folder's signature, and the one `verify` looks for."""

MAX_SIGNATURE_BYTES = 64 << 20
"""A signature larger than this is refused before it is read (one resource costs about 150
bytes: 64 MiB is some 400,000 files)."""

BUNDLE_MEDIA_PREFIX = "application/vnd.dev.sigstore.bundle"


@dataclass(frozen=True)
class Bundle:
    """A signature file as read: its bytes, its parsed JSON and how it was signed."""

    path: Path
    data: bytes
    document: dict[str, Any]
    kind: SignerKind


def read_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read and sort a signature file; SignatureError (one line naming the file) otherwise."""
    source = Path(path)
    data = read_small(source, "signature", MAX_SIGNATURE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SignatureError("not-a-bundle", f"{source}: not a signature (byte {exc.start} is "
                             "not UTF-8; a Sigstore bundle is JSON text)") from exc
    document = _parse_json(source, text)
    return Bundle(path=source, data=data, document=document, kind=_kind(source, document))


def looks_like_signature(path: Path) -> bool:
    """True for a file a signature may replace: empty, or a Sigstore bundle by its first bytes
    (read whole or not: one cut short by a crash is still the signature it was)."""
    try:
        with open_regular(path, "not a signature")[0] as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return not head.strip() or (head.lstrip().startswith(b"{")
                                and BUNDLE_MEDIA_PREFIX.encode() in head)


def _parse_json(source: Path, text: str) -> dict[str, Any]:
    if not text.strip():
        raise SignatureError("truncated", f"{source}: the signature is empty")
    try:
        document = json.loads(text, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip())
        what = "cut short (truncated)" if cut else f"not JSON at line {exc.lineno} column " \
            f"{exc.colno} ({exc.msg})"
        raise SignatureError("truncated" if cut else "not-a-bundle",
                             f"{source}: the signature is {what}; sign the folder again or "
                             "fetch the signature whole") from exc
    except (ValueError, RecursionError) as exc:
        raise SignatureError("not-a-bundle", f"{source}: not a signature: {exc}") from exc
    if not isinstance(document, dict):
        raise SignatureError("not-a-bundle", f"{source}: not a signature (a Sigstore bundle is "
                             "one JSON object)")
    return document


def _kind(source: Path, document: dict[str, Any]) -> SignerKind:
    media = document.get("mediaType")
    if not isinstance(media, str) or not media.startswith(BUNDLE_MEDIA_PREFIX):
        raise SignatureError("not-a-bundle", f"{source}: not a Sigstore bundle (its mediaType "
                             f"is {media!r})")
    envelope = document.get("dsseEnvelope")
    if not isinstance(envelope, dict):
        found = "a signature over one blob" if "messageSignature" in document else "no envelope"
        raise SignatureError("not-a-bundle", f"{source}: holds {found}, not a signed model "
                             "statement (a DSSE envelope)")
    if not isinstance(envelope.get("payload"), str) or not envelope.get("signatures"):
        raise SignatureError("not-a-bundle", f"{source}: its envelope has no payload or no "
                             "signature")
    material = document.get("verificationMaterial")
    if not isinstance(material, dict):
        raise SignatureError("not-a-bundle", f"{source}: has no verification material")
    if "publicKey" in material:
        return SignerKind.KEY
    if material.get("tlogEntries") or "certificate" in material:
        return SignerKind.SIGSTORE
    if "x509CertificateChain" in material:
        return SignerKind.CERTIFICATE
    raise SignatureError("not-a-bundle", f"{source}: its verification material names no key, "
                         "certificate or transparency log entry")


def library_signature(bundle: Bundle) -> Any:
    """The reference library's signature object (of a key or certificate bundle), read from
    exactly the bytes checked here (a private copy, so a file changed since is not what the
    library reads)."""
    reader = reference("_signing.sign_sigstore_pb").Signature
    with tempfile.TemporaryDirectory(prefix="ckpt-inspector-sig-") as tmp:
        copy = Path(tmp, DEFAULT_NAME)
        copy.write_bytes(bundle.data)
        try:
            return reader.read(copy)
        except Exception as exc:  # pydantic, KeyError, TypeError: any shape the library refuses
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SignatureError("not-a-bundle", f"{bundle.path}: the reference library cannot "
                                 f"read this bundle: {first}") from exc
