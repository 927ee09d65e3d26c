"""Sigstore keyless signatures checked offline against a trust root the user gives: Sigstore's
`trusted_root.json` (or a client trust config holding one) names the certificate authorities,
certificate transparency logs and transparency logs to trust. The reference library's Sigstore
verifier does every check (the certificate's chain and SCT, the log entry's inclusion proof,
checkpoint and promise, the envelope's signature, the identity and its OIDC issuer); nothing is
fetched. `sigstore` names the public-good instance's trusted root shipped with the pinned
sigstore package. Without a trust root the bundle is named, never passed."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspector.core.strict_json import no_repeats
from inspector.signing.bundle import DEFAULT_NAME, Bundle
from inspector.signing.errors import SignatureError
from inspector.signing.library import reference
from inspector.signing.small_file import read_small

if TYPE_CHECKING:
    from cryptography import x509

TRUSTED_ROOT_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
CLIENT_CONFIG_TYPE = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
SIGNING_CONFIG_TYPE = "application/vnd.dev.sigstore.signingconfig.v0.2+json"
MAX_TRUST_ROOT_BYTES = 16 << 20
PUBLIC_GOOD = "sigstore"
"""`--trust-root sigstore`: the public-good Sigstore instance's trusted root as the installed
(pinned) `sigstore` package ships it, read from disk: current as of that release, so a key the
instance rotated in later is not in it (then pass a newer trusted_root.json)."""
PUBLIC_GOOD_FILE = ("sigstore._store", "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev",
                    "trusted_root.json")
OIDC_ISSUER_OIDS = ("1.3.6.1.4.1.57264.1.8", "1.3.6.1.4.1.57264.1.1")
"""Fulcio's OIDC issuer extensions: v2 (a DER UTF8String) first, then v1 (raw bytes)."""


@dataclass(frozen=True)
class KeylessTrust:
    """What a keyless signature is checked against: the trust root, and the signer trusted
    (the certificate's identity and the OIDC issuer that vouched for it)."""

    trust_root: Path
    identity: str | None = None
    issuer: str | None = None


def signing_certificate(bundle: Bundle) -> x509.Certificate:
    """The leaf certificate a keyless bundle carries (read, not yet trusted)."""
    from cryptography import x509

    material = bundle.document["verificationMaterial"]
    raw = (material.get("certificate") or {}).get("rawBytes") or \
        ((material.get("x509CertificateChain") or {}).get("certificates") or [{}])[0].get(
            "rawBytes")
    try:
        return x509.load_der_x509_certificate(base64.b64decode(raw, validate=True))
    except (ValueError, TypeError) as exc:
        raise SignatureError("not-a-bundle", f"{bundle.path}: its signing certificate cannot "
                             f"be read: {exc}") from exc


def identity_of(certificate: x509.Certificate) -> tuple[list[str], str | None]:
    """The identities a Fulcio certificate names (e-mail, URI) and its OIDC issuer."""
    from cryptography import x509

    names: list[str] = []
    with contextlib.suppress(x509.ExtensionNotFound):
        alt = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = alt.get_values_for_type(x509.RFC822Name) + \
            alt.get_values_for_type(x509.UniformResourceIdentifier)
    for oid in OIDC_ISSUER_OIDS:
        try:
            value = certificate.extensions.get_extension_for_oid(
                x509.ObjectIdentifier(oid)).value.value  # type: ignore[attr-defined]
        except x509.ExtensionNotFound:
            continue
        # v2 is a DER UTF8String (tag 12, one length byte for any URL this short)
        text = value[2:] if oid.endswith(".8") and value[:1] == b"\x0c" else value
        return names, text.decode("utf-8", "replace")
    return names, None


def describe_signer(bundle: Bundle) -> str:
    """Who a keyless bundle says signed it (unverified): identity and issuer."""
    names, issuer = identity_of(signing_certificate(bundle))
    return f"{', '.join(names) or 'no identity'} (issuer {issuer or 'unknown'})"


def no_trust_root(bundle: Bundle) -> str:
    """The one line for a keyless bundle checked without a trust root."""
    return (f"{bundle.path}: a Sigstore keyless signature by {describe_signer(bundle)}; no "
            "trust root was given and none is fetched (no network is assumed), so it is not "
            "verified: pass --trust-root TRUSTED_ROOT.json (the Sigstore instance's trusted "
            "root) with --identity and --identity-provider")


def verify_keyless(bundle: Bundle, trust: KeylessTrust) -> tuple[Any, bytes, str]:
    """The library's verified manifest, the envelope's payload and the signer, for a keyless
    bundle checked against `trust`; SignatureError (`.invalid` when it does not hold)."""
    names, issuer = identity_of(signing_certificate(bundle))
    if not trust.identity or not trust.issuer:
        hint = f" (it names {names[0]}, issuer {issuer})" if names and issuer else ""
        raise SignatureError("no-key", f"{bundle.path}: a keyless signature is trusted for a "
                             f"signer: pass --identity ID and --identity-provider URL{hint}")
    if trust.identity not in names or trust.issuer != issuer:
        raise SignatureError("wrong-key", f"{bundle.path}: wrong signer: signed by "
                             f"{describe_signer(bundle)}, not {trust.identity} (issuer "
                             f"{trust.issuer})")
    sigstore = reference("_signing.sign_sigstore")
    from sigstore.errors import Error as SigstoreError

    with _client_config(trust.trust_root) as config:
        try:
            verifier = sigstore.Verifier(identity=trust.identity, oidc_issuer=trust.issuer,
                                         trust_config=config)
        except (SigstoreError, ValueError) as exc:
            raise SignatureError("bad-trust-root", f"{trust.trust_root}: not a usable trust "
                                 f"root: {_first_line(exc)}") from exc
    signature = _read(bundle, sigstore.Signature)
    signer = f"sigstore {trust.identity} (issuer {trust.issuer})"
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet):
            manifest = verifier.verify(signature)
    except SigstoreError as exc:
        text = _first_line(exc)
        code, what = ("untrusted-certificate", "untrusted certificate") \
            if "chain" in text or "SCT" in text else ("invalid-signature", "invalid signature")
        raise SignatureError(code, f"{bundle.path}: {what}: {text} (checked against "
                             f"{trust.trust_root})") from exc
    except ValueError as exc:
        raise SignatureError("invalid-signature", f"{bundle.path}: invalid signature: "
                             f"{_first_line(exc)}") from exc
    payload = base64.b64decode(bundle.document["dsseEnvelope"]["payload"], validate=True)
    return manifest, payload, signer


def _first_line(exc: Exception, limit: int = 200) -> str:
    """The library's reason, one line, clipped (some reasons embed a whole log entry)."""
    text = " ".join(str(a) for a in exc.args).strip() or type(exc).__name__
    line = text.splitlines()[0]
    return line if len(line) <= limit else line[:limit] + "..."


def _read(bundle: Bundle, reader: Any) -> Any:
    """The library's keyless signature object, read from a private copy of the bytes checked."""
    with tempfile.TemporaryDirectory(prefix="ckpt-inspector-sig-") as tmp:
        copy = Path(tmp, DEFAULT_NAME)
        copy.write_bytes(bundle.data)
        try:
            return reader.read(copy)
        except Exception as exc:  # sigstore's InvalidBundle, pydantic: any shape refused
            raise SignatureError("not-a-bundle", f"{bundle.path}: not a Sigstore keyless "
                                 f"bundle the reference library accepts: {_first_line(exc)}"
                                 ) from exc


@contextlib.contextmanager
def _client_config(path: Path) -> Iterator[Path]:
    """A client trust config file for the library: the one given, or a trusted root wrapped in
    one (the library reads only its trusted root; the signing part is left empty)."""
    document = _read_json(resolve_trust_root(path))
    media = document.get("mediaType")
    if media == CLIENT_CONFIG_TYPE:
        config = document
    elif media == TRUSTED_ROOT_TYPE:
        config = {"mediaType": CLIENT_CONFIG_TYPE, "trustedRoot": document,
                  "signingConfig": {"mediaType": SIGNING_CONFIG_TYPE}}
    else:
        raise SignatureError("bad-trust-root", f"{path}: not a Sigstore trusted root or client "
                             f"trust config (its mediaType is {media!r})")
    with tempfile.TemporaryDirectory(prefix="ckpt-inspector-trust-") as tmp:
        copy = Path(tmp, "trust_config.json")
        copy.write_text(json.dumps(config), encoding="utf-8")
        yield copy


def resolve_trust_root(path: Path) -> Path:
    """The trust root file: the one given, or for `sigstore` the public-good instance's trusted
    root shipped with the installed sigstore package."""
    if str(path) != PUBLIC_GOOD or path.exists():
        return path
    import importlib.resources

    package, *parts = PUBLIC_GOOD_FILE
    try:
        return Path(str(importlib.resources.files(package).joinpath(*parts)))
    except ModuleNotFoundError as exc:
        raise SignatureError("bad-trust-root", "the sigstore package is not installed; "
                             "reinstall checkpoint-inspector with its dependencies") from exc


def _read_json(path: Path) -> dict[str, Any]:
    data = read_small(path, "trust root", MAX_TRUST_ROOT_BYTES, unreadable="bad-trust-root",
                      too_big="bad-trust-root")
    try:
        document = json.loads(data, object_pairs_hook=no_repeats)
    except (ValueError, RecursionError) as exc:
        raise SignatureError("bad-trust-root", f"{path}: the trust root is not JSON: "
                             f"{exc}") from exc
    if not isinstance(document, dict):
        raise SignatureError("bad-trust-root", f"{path}: a trust root is one JSON object")
    return document
