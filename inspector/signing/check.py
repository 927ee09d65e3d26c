"""A signature checked with the key or certificate chain the user trusts, by the reference
library: the signed statement when it holds, else a SignatureError saying which of wrong key,
changed signature or untrusted certificate it is. Keyless Sigstore bundles need Sigstore's trust
root: checked against the one given (`signing.keyless`), else named, never passed."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import exceptions
from cryptography.hazmat.primitives.asymmetric import ec

from inspector.core.json_record import JsonRecord
from inspector.core.vocabulary import SignatureState, SignerKind
from inspector.signing.bundle import Bundle, library_signature, read_bundle
from inspector.signing.errors import SignatureError
from inspector.signing.keyless import KeylessTrust, no_trust_root, verify_keyless
from inspector.signing.keys import (
    CURVES,
    certificate_identity,
    describe_key,
    fingerprint,
    read_certificates,
    read_public_key,
)
from inspector.signing.library import reference
from inspector.signing.statement import SavePlace, SignedStatement, from_library

if TYPE_CHECKING:
    from cryptography import x509

UNCHECKED_CODES = frozenset({"keyless-offline", "no-key"})
"""Failures that leave a signature unverified here (no trust root offline, no key given); any
other failure is a signature that does not hold or cannot be read: invalid."""


@dataclass
class SignatureVerdict(JsonRecord):
    """The `signature` record of the verify contract: the state, who signed, how, and why."""

    state: str
    signature: str
    kind: str | None = None
    signer: str | None = None
    files_signed: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Checked:
    """A signature that holds: who signed it and what it says."""

    signer: str
    statement: SignedStatement


def check_signature(bundle: Bundle, public_key: Path | None = None,
                    certificate_chain: Sequence[Path] = (),
                    keyless: KeylessTrust | None = None) -> Checked:
    """Verify the bundle with the key, chain or keyless trust root given; SignatureError
    otherwise (`.invalid` when the signature was checked and does not hold)."""
    if bundle.kind is SignerKind.SIGSTORE:
        if keyless is None:
            raise SignatureError("keyless-offline", no_trust_root(bundle))
        manifest, payload, signer = verify_keyless(bundle, keyless)
        return Checked(signer=signer, statement=from_library(manifest, payload, bundle.path))
    if bundle.kind is SignerKind.KEY and public_key is None:
        hint = _hint(bundle)
        raise SignatureError("no-key", f"{bundle.path}: signed with a key"
                             f"{f' (sha256:{hint})' if hint else ''}; pass --public-key KEY.pub")
    if bundle.kind is SignerKind.CERTIFICATE and not certificate_chain:
        raise SignatureError("no-key", f"{bundle.path}: signed with a certificate "
                             f"({_bundle_identity(bundle)}); pass --certificate CHAIN.pem")
    signature = library_signature(bundle)
    if bundle.kind is SignerKind.KEY:
        assert public_key is not None
        verifier, signer = _key_verifier(bundle, public_key)
    else:
        verifier, signer = _certificate_verifier(bundle, certificate_chain)
    manifest = _verify(bundle, verifier, signer, signature)
    payload = signature.bundle.dsse_envelope.payload
    return Checked(signer=signer, statement=from_library(manifest, payload, bundle.path))


def _hint(bundle: Bundle) -> str | None:
    key = bundle.document["verificationMaterial"].get("publicKey")
    hint = key.get("hint") if isinstance(key, dict) else None
    return hint if isinstance(hint, str) else None


def _key_verifier(bundle: Bundle, public_key: Path) -> tuple[Any, str]:
    sign_ec_key = reference("_signing.sign_ec_key")
    key = read_public_key(public_key)
    hint = _hint(bundle)
    if hint and hint != fingerprint(key):
        # the hint is not signed: it is the bundle's word, refused as the reference refuses it
        raise SignatureError("wrong-key", f"{bundle.path}: wrong key: the signature names the "
                             f"key sha256:{hint}, not {public_key} (sha256:{fingerprint(key)})")
    return sign_ec_key.Verifier(public_key), describe_key(key)


def _certificates(bundle: Bundle) -> list[x509.Certificate]:
    import base64

    from cryptography import x509  # certificates only: a key check never loads X.509

    chain = bundle.document["verificationMaterial"].get("x509CertificateChain")
    try:
        return [x509.load_der_x509_certificate(base64.b64decode(c["rawBytes"]))
                for c in chain["certificates"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise SignatureError("not-a-bundle", f"{bundle.path}: its certificate chain cannot be "
                             f"read: {exc}") from exc


def _bundle_identity(bundle: Bundle) -> str:
    certificates = _certificates(bundle)
    return certificate_identity(certificates[0]) if certificates else "no certificate"


def _certificate_verifier(bundle: Bundle, chain: Sequence[Path]) -> tuple[Any, str]:
    sign_certificate = reference("_signing.sign_certificate")
    certificates = _certificates(bundle)
    if not certificates:
        raise SignatureError("not-a-bundle", f"{bundle.path}: its certificate chain is empty")
    key = certificates[0].public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in CURVES:
        raise SignatureError("unsupported-key", f"{bundle.path}: the signing certificate holds "
                             "a key OpenSSF Model Signing does not sign with (ECDSA P-256, "
                             "P-384 or P-521 only)")
    for path in chain:
        read_certificates(path)
    identity = certificate_identity(certificates[0])
    return sign_certificate.Verifier([Path(p) for p in chain]), f"certificate {identity}"


def _verify(bundle: Bundle, verifier: Any, signer: str, signature: Any) -> Any:
    # pyOpenSSL (the certificate verifier's chain check) only where a chain is checked
    untrusted: tuple[type[Exception], ...] = ()
    if bundle.kind is SignerKind.CERTIFICATE:
        from OpenSSL import crypto

        untrusted = (crypto.X509StoreContextError,)
    quiet = io.StringIO()  # the library prints a warning for old bundles on stdout
    try:
        with contextlib.redirect_stdout(quiet):
            return verifier.verify(signature)
    except exceptions.InvalidSignature as exc:
        other = "" if _hint(bundle) or bundle.kind is SignerKind.CERTIFICATE else \
            " (or it was signed by another key: this bundle names none)"
        raise SignatureError("invalid-signature", f"{bundle.path}: invalid signature: it does "
                             f"not verify with {signer}; the signed statement or the signature "
                             f"was changed after signing{other}") from exc
    except untrusted as exc:
        raise SignatureError("untrusted-certificate", f"{bundle.path}: untrusted certificate: "
                             f"{signer} does not chain to the certificates given ({exc})"
                             ) from exc
    except ValueError as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else "refused"
        code = "untrusted-certificate" if "certificate" in text.lower() else "invalid-signature"
        raise SignatureError(code, f"{bundle.path}: invalid signature: {text}") from exc
    except Exception as exc:  # a bundle of the right shape with contents the library trips on
        raise SignatureError("not-a-bundle", f"{bundle.path}: the reference library cannot "
                             f"check this bundle: {type(exc).__name__}: {exc}") from exc


def verdict_for(bundle_path: Path, error: SignatureError | None = None,
                checked: Checked | None = None, kind: SignerKind | None = None,
                changed: bool = False) -> SignatureVerdict:
    """The contract record for a signature that failed (`error`) or held (`checked`)."""
    if checked is not None:
        state = SignatureState.CHANGED if changed else SignatureState.INTACT
        return SignatureVerdict(state=state, signature=str(bundle_path), kind=kind,
                                signer=checked.signer,
                                files_signed=len(checked.statement.resources))
    assert error is not None
    state = SignatureState.UNVERIFIED if error.code in UNCHECKED_CODES else \
        SignatureState.INVALID
    return SignatureVerdict(state=state, signature=str(bundle_path), kind=kind,
                            reason=error.message)


def check_against(signature: Path, expected: dict[str, str], public_key: Path | None = None,
                  certificate_chain: Sequence[Path] = (),
                  save: SavePlace | None = None) -> SignatureVerdict:
    """A checkpoint's signature against the digests its record holds (`signed_name`) and, when
    it was signed for a ledger save, against that save's place, run and outcome (`save`):
    intact when it verifies and signs exactly those, else why not (never raises for bad
    input: a damaged signature is a verdict here)."""
    if not signature.exists():
        return SignatureVerdict(state=SignatureState.UNSIGNED, signature=str(signature),
                                reason=f"no signature at {signature}")
    kind = None
    try:
        bundle = read_bundle(signature)
        kind = bundle.kind
        checked = check_signature(bundle, public_key, certificate_chain)
    except SignatureError as exc:
        return verdict_for(signature, error=exc, kind=kind)
    verdict = verdict_for(signature, checked=checked, kind=kind)
    signed = {r.name: r.digest for r in checked.statement.resources}
    differ = sorted(set(signed) ^ set(expected) | {n for n in signed
                                                   if n in expected and signed[n] != expected[n]})
    if differ:
        verdict.state = SignatureState.CHANGED
        verdict.reason = (f"the signed statement and the record disagree on {differ[0]!r}"
                          + (f" and {len(differ) - 1} more" if len(differ) > 1 else ""))
    elif save is not None and checked.statement.save is None:
        # made before signatures named their save: the bytes hold, nothing else is bound
        verdict.reason = ("the signature names no save (made before signatures did): it binds "
                          "the bytes, not this save's path, step, journal or outcome")
    elif save is not None and (why := checked.statement.save.mismatch(save)):
        # the same signed bytes under another name, step, journal line, run or outcome: a
        # copy or an edit, not that save
        verdict.state = SignatureState.CHANGED
        verdict.reason = why
    elif save is not None:
        verdict.reason = checked.statement.save.unbound()
    return verdict
