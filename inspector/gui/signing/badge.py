"""`SignatureBadge`: which signature covers an open checkpoint (its folder's `model.sig`, or
the ledger's `NAME.sig` beside it), checked in a background job with the trusted public keys
(`CKPT_INSPECTOR_TRUSTED_KEYS`) or, for a Sigstore keyless signature, the trust root and
signers `CKPT_INSPECTOR_SIGSTORE_TRUST_ROOT` and `CKPT_INSPECTOR_SIGSTORE_SIGNERS` name, shown
as one of: signed and intact, signed but changed (which
file), not signed, signature invalid, not verified (with why). A click opens the statement."""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QMessageBox, QPushButton, QWidget

from inspector.core.badges import GREY
from inspector.core.progress import CancelToken
from inspector.core.vocabulary import FileStatus, SignatureState
from inspector.gui.jobs import EmitFn, Job, JobRunner

if TYPE_CHECKING:  # the signing stack is imported by the job, off the UI thread
    from inspector.signing.bundle import Bundle
    from inspector.signing.folder import SignedCheck
    from inspector.signing.keyless import KeylessTrust

TRUSTED_KEYS_ENV = "CKPT_INSPECTOR_TRUSTED_KEYS"
"""Public keys (PEM files, separated as PATH is) whose signatures the app verifies."""

TRUST_ROOT_ENV = "CKPT_INSPECTOR_SIGSTORE_TRUST_ROOT"
"""A Sigstore trusted root keyless signatures are checked against, offline (`sigstore`: the
public-good instance's, as the installed sigstore package ships it); unset: not verified."""

TRUSTED_SIGNERS_ENV = "CKPT_INSPECTOR_SIGSTORE_SIGNERS"
"""Keyless signers trusted, `IDENTITY=ISSUER` each, separated by spaces."""

LOOKS = {
    SignatureState.INTACT: ("Signed · intact", "#1e8e3e"),
    SignatureState.CHANGED: ("Signed · changed", "#c5221f"),
    SignatureState.INVALID: ("Signature invalid", "#c5221f"),
    SignatureState.UNVERIFIED: ("Signed · not verified", GREY),
    SignatureState.UNSIGNED: ("Not signed", GREY),
}


@dataclass(frozen=True)
class Shown:
    """What the badge shows: the folder, its signature and the check's outcome."""

    folder: Path
    signature: Path | None
    check: SignedCheck | None  # None: no signature covers it
    problems: tuple[tuple[SignatureState, str], ...] = ()
    """What the save record of the path checked fails it for (`signing.ledger_binding`)."""


def covering_signature(path: Path) -> tuple[Path, Path] | None:
    """(what is signed, its signature) for a checkpoint: the rule `verify` and `report` share
    (`signing.locate.covering_signature`); None when nothing signs it."""
    from inspector.signing.locate import covering_signature as covering

    return covering(path)


def trusted_keys() -> list[Path]:
    """The public keys named by `CKPT_INSPECTOR_TRUSTED_KEYS`."""
    return [Path(p) for p in os.environ.get(TRUSTED_KEYS_ENV, "").split(os.pathsep) if p]


def keyless_trust(bundle: Bundle) -> KeylessTrust | None:
    """The trust root and the trusted signer (`IDENTITY=ISSUER`) the certificate of a keyless
    bundle names, from the environment; None without a trust root (then not verified)."""
    from inspector.signing.keyless import KeylessTrust, identity_of, signing_certificate

    root = os.environ.get(TRUST_ROOT_ENV, "")
    if not root:
        return None
    names, issuer = identity_of(signing_certificate(bundle))
    signers = [entry.partition("=") for entry in os.environ.get(TRUSTED_SIGNERS_ENV,
                                                                "").split()]
    for identity, _eq, trusted_issuer in signers:
        if identity in names and trusted_issuer == issuer:
            return KeylessTrust(Path(root), identity, trusted_issuer)
    return KeylessTrust(Path(root))  # no trusted signer: the check says whom it names


def trusted_key(bundle: Bundle, keys: list[Path]) -> Path | None:
    """The trusted key a key bundle is checked with: the one its hint names (its fingerprint),
    or for a bundle that names none (older signers wrote no hint) the first whose check of
    the signature holds; None when no trusted key fits. A key file that cannot be read is
    passed over, not a reason to check none."""
    from inspector.signing.check import check_signature
    from inspector.signing.errors import SignatureError
    from inspector.signing.keys import fingerprint, read_public_key

    hint = bundle.document["verificationMaterial"].get("publicKey")
    wanted = hint.get("hint") if isinstance(hint, dict) else None
    for key in keys:
        try:
            if fingerprint(read_public_key(key)) == wanted:
                return key
            if not wanted:
                check_signature(bundle, key)
                return key
        except SignatureError:
            continue
    return None


def check_path(path: Path, keys: list[Path], cancel: CancelToken | None = None) -> Shown:
    """The signature covering `path`, checked with the trusted key it names (its fingerprint),
    or the trust root and signer trusted for a keyless one, else unverified; every signed file
    is hashed (a background job)."""
    from inspector.core.vocabulary import SignerKind
    from inspector.run.record_check import check_record
    from inspector.signing.bundle import read_bundle
    from inspector.signing.errors import SignatureError
    from inspector.signing.folder import check_folder, check_signed_file
    from inspector.signing.ledger_binding import record_problems

    found = covering_signature(path)
    if found is None:
        return Shown(path if path.is_dir() else path.parent, None, None)
    target, signature = found
    key, keyless = None, None
    try:
        bundle = read_bundle(signature)
        key = trusted_key(bundle, keys) if bundle.kind is SignerKind.KEY else None
        keyless = keyless_trust(bundle) if bundle.kind is SignerKind.SIGSTORE else None
    except SignatureError:
        pass  # check_folder says what is wrong with the signature
    check = check_folder if target.is_dir() else check_signed_file
    checked = check(target, signature, key, keyless=keyless, cancel=cancel)
    # held to the path's save record, as `verify` and `report` hold it
    record = check_record(path, cancel)
    problems = record_problems(record, key, (), signature) if record is not None else []
    return Shown(target, signature, checked, tuple(problems))


def badge_for(shown: Shown, path: Path | None) -> tuple[SignatureState, str]:
    """The state and detail shown for the open checkpoint `path`: the check of the signature
    covering it, and "not signed" when that signature (its folder's `model.sig`) does not
    sign this file, whatever it says of the files it does sign; held to the save record
    (`Shown.problems`: the worse state wins, each reason named)."""
    if shown.check is None:
        return SignatureState.UNSIGNED, "No model.sig covers this checkpoint"
    from inspector.signing.ledger_binding import SEVERITY

    state, detail = _signature_badge(shown, path)
    if not shown.problems:
        return state, detail
    worst = max((state, *(s for s, _ in shown.problems)), key=SEVERITY.index)
    return worst, "; ".join([detail, *(why for _, why in shown.problems)])


def _signature_badge(shown: Shown, path: Path | None) -> tuple[SignatureState, str]:
    """The state and detail of the covering signature's check alone (`badge_for`)."""
    assert shown.check is not None
    verdict = shown.check.verdict
    outside = _not_covered(shown, path)
    if outside is not None:
        return SignatureState.UNSIGNED, outside
    detail = verdict.signer or verdict.reason or ""
    if verdict.state == SignatureState.CHANGED and shown.check.result is not None:
        changed = [f.path for f in shown.check.result.files
                   if f.status not in (FileStatus.OK, FileStatus.EXTRA)]
        detail = f"{', '.join(changed[:3]) or verdict.reason} — signed by {verdict.signer}"
    return SignatureState(verdict.state), detail


def _not_covered(shown: Shown, path: Path | None) -> str | None:
    """Why the open file is not one the folder's signature signs (None when it is, or when the
    signature was not checked: then its own state says so)."""
    from inspector.signing.locate import not_covered

    if shown.check is None or shown.signature is None or path is None:
        return None
    return not_covered(shown.check, shown.folder, shown.signature, path)


_SHORT_PRINT = re.compile(r"(sha256:[0-9a-f]{16})[0-9a-f]{48}")
"""A key's 64-digit fingerprint, shown by its first 16 digits: the whole one cut the badge's line
off at the pane's right edge in a 640-pixel window."""


class SignatureBadge(QPushButton):
    """The badge; `show_path(path)` checks in the background, a click shows the statement."""

    def __init__(self, runner: JobRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.shown: Shown | None = None
        self.state: SignatureState | None = None
        self.covering: tuple[Path, Path] | None = None
        self.path: Path | None = None
        self._job: Job | None = None
        self.setFlat(True)
        self.setAccessibleName("Signature")
        self.clicked.connect(self.show_statement)
        self.hide()

    def show_path(self, path: Path | None) -> Job | None:
        """Check the signature covering `path` (None: hide the badge); another file under the
        same signature keeps the check made (a folder is not hashed again on every switch)."""
        covering = covering_signature(path) if path is not None else None
        self.path = path
        if covering is not None and covering == self.covering:
            if self._job is None and self.shown is not None:
                self._show(self.shown)  # the same check, judged for this file
            return self._job
        self.covering = covering
        if self._job is not None:
            self._job.cancel()
            self._job = None
        if path is None:
            self.hide()
            return None
        keys = trusted_keys()

        def run(_emit: EmitFn, cancel: CancelToken) -> Shown:
            return check_path(path, keys, cancel)

        job = Job(f"signature of {path.name}", run, self)
        job.finished.connect(self._show)
        job.failed.connect(lambda message: self._paint(SignatureState.UNVERIFIED, message))
        self._job = job
        self._paint(None, "")
        return self.runner.start(job)

    def _show(self, shown: Shown) -> None:
        self._job = None
        self.shown = shown
        self._paint(*badge_for(shown, self.path))

    def _paint(self, state: SignatureState | None, detail: str) -> None:
        self.state = state
        word, colour = LOOKS[state] if state is not None else ("Checking the signature…", GREY)
        shown = _SHORT_PRINT.sub(r"\1…", detail)  # the whole fingerprint in the tooltip
        self.setText(f"{word}: {shown}" if detail and state is not None else word)
        self.setToolTip(detail)
        self.setStyleSheet(f"color: {colour}; font-weight: bold; text-align: left;")
        self.show()

    def show_statement(self) -> None:
        """The signed statement: who signed, the signature, and each signed file's state."""
        if self.shown is None or self.shown.check is None:
            return
        QMessageBox.information(self, "Signature", statement_html(self.shown))


def statement_html(shown: Shown) -> str:
    """The detail view's text: the state, the signature, who signed, each signed file."""
    assert shown.check is not None
    verdict, result = shown.check.verdict, shown.check.result
    rows = "".join(f"<tr><td>{html.escape(f.path)}</td><td>{html.escape(str(f.status))}</td>"
                   "</tr>" for f in (result.files if result is not None else []))
    return (f"<p><b>{html.escape(str(verdict.state))}</b> — {html.escape(str(shown.signature))}"
            f"</p><p>Signed by: {html.escape(verdict.signer or 'not verified')}</p>"
            + (f"<p>{html.escape(verdict.reason)}</p>" if verdict.reason else "")
            + (f"<table>{rows}</table>" if rows else ""))
