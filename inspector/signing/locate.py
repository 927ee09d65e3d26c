"""Which signature covers a checkpoint, one rule for `verify`, `report` and the app: a file's
own `NAME.sig` beside it (the ledger's, or `model_signing sign key FILE`'s), else its folder's
`model.sig`; a folder's `model.sig`, else the ledger's `NAME.sig` beside it. And whether a
folder's signature signs the file asked about (a folder's check judges the files it names,
not one it leaves out)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.core.termtext import counted
from inspector.core.vocabulary import SignatureState
from inspector.signing.bundle import DEFAULT_NAME
from inspector.signing.statement import beside

if TYPE_CHECKING:  # the app finds the signature on its UI thread: the checks load later
    from inspector.signing.check import SignatureVerdict
    from inspector.signing.folder import SignedCheck
    from inspector.signing.keyless import KeylessTrust
    from inspector.signing.ledger_binding import Held


def covering_signature(path: Path) -> tuple[Path, Path] | None:
    """(what is signed, its signature) for a checkpoint file or folder; None when nothing
    signs it."""
    folder = path if path.is_dir() else path.parent
    places = [(folder, folder / DEFAULT_NAME), (path, beside(path))]
    for target, signature in (places if path.is_dir() else places[::-1]):
        if signature.is_file():
            return target, signature
    return None


def not_covered(check: SignedCheck, folder: Path, signature: Path, path: Path) -> str | None:
    """Why `path` is not a file the signature of `folder` signs (None when it is, when it is
    the folder, or when the signature was not checked: then its own state says so)."""
    if check.result is None or not folder.is_dir() or \
            os.path.abspath(path) == os.path.abspath(folder):
        return None
    name = Path(os.path.relpath(path, folder)).as_posix()
    if name in check.files:
        return None
    state = check.verdict.state
    return (f"{name} is not among the {counted(len(check.files), 'file')} {signature} signs"
            + ("" if state == SignatureState.INTACT else f" (and that signature is {state})"))


Checks = dict[tuple[Path, Path], "SignedCheck"]
"""Checks made, by (what is signed, signature): files under one folder's signature hash it
once."""


def path_verdict(path: Path, public_key: Path | None = None,
                 certificate_chain: Sequence[Path] = (), *,
                 record: Held | None,
                 keyless: KeylessTrust | None = None,
                 made: Checks | None = None) -> SignatureVerdict | None:
    """The signature state of one checkpoint (what the report leads with): the check of the
    signature covering it, `unsigned` when a folder's signature leaves it out, held to its
    save record (`record`: `run.record_check.check_record(path)`, `held_to_record`); None
    when no signature covers it."""
    from inspector.signing.ledger_binding import held_to_record

    verdict = _covering_verdict(path, public_key, certificate_chain, keyless, made)
    if verdict is None:
        return None
    return held_to_record(verdict, record, public_key, certificate_chain)


def _covering_verdict(path: Path, public_key: Path | None,
                      certificate_chain: Sequence[Path], keyless: KeylessTrust | None,
                      made: Checks | None) -> SignatureVerdict | None:
    """The check of the signature covering `path` alone (`path_verdict`)."""
    from inspector.signing.check import SignatureVerdict
    from inspector.signing.folder import check_folder, check_signed_file

    found = covering_signature(path)
    if found is None:
        return None
    target, signature = found
    made = {} if made is None else made
    if found not in made:
        check = check_folder if target.is_dir() else check_signed_file
        made[found] = check(target, signature, public_key, certificate_chain, keyless=keyless)
    outside = not_covered(made[found], target, signature, path)
    if outside is not None:
        return SignatureVerdict(state=SignatureState.UNSIGNED, signature=str(signature),
                                reason=outside)
    return made[found].verdict
