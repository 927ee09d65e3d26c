"""A proven save signed as it is sealed, when a signing key is configured: the digests the
ledger has just re-read are signed as an OpenSSF Model Signing statement (with the record's
per-tensor digests), written beside the checkpoint as `NAME.sig`, which the reference tool's
`model_signing verify key NAME --signature NAME.sig` accepts and `run verify` checks."""

from __future__ import annotations

import os
from pathlib import Path

from inspector.core.vocabulary import SaveOutcome
from inspector.run.checkpoints import LedgerError, SaveRecord

SIGNED_OUTCOMES = (SaveOutcome.VERIFIED, SaveOutcome.UNVERIFIED)
"""Saves whose recorded bytes are signed: proven against memory, or recorded with nothing in
memory to compare (the signature attests the bytes on record, the record says how proven)."""

SIGNING_KEY_ENV = "CKPT_INSPECTOR_SIGNING_KEY"
"""The PEM private key (ECDSA P-256/384/521) each proven save is signed with; unset: none is."""


def sign_save(run_dir: Path, target: Path, record: SaveRecord, chain: str | None
              ) -> Path | None:
    """Sign a save's recorded digests, with its place, its journal's chain id (`chain`: which
    run) and its outcome, when a key is configured; the signature's path, or None.
    LedgerError when the key cannot sign (the save itself stands, ledgered)."""
    key = os.environ.get(SIGNING_KEY_ENV)
    if not key or record.outcome not in SIGNED_OUTCOMES:
        return None
    # imported here: a training run without a key never pays for the cryptography stack
    from inspector.signing.errors import SignatureError
    from inspector.signing.make import sign_digests
    from inspector.signing.statement import SavePlace, beside, signed_name

    named = {signed_name(target, run_dir / Path(*f.path.split("/"))): f for f in record.files}
    digests = {name: f.sha256 or "" for name, f in named.items()}
    tensors = {name: f.tensors for name, f in named.items() if f.tensors}
    try:
        return sign_digests(target, digests, Path(key), beside(target), tensors or None,
                            overwrite=True,
                            save=SavePlace(record.path, record.step, record.seq, chain,
                                           str(record.outcome))).signature
    except SignatureError as exc:
        raise LedgerError("signing_failed", f"{target}: saved and ledgered but not signed: "
                          f"{exc.message} ({SIGNING_KEY_ENV})") from exc
