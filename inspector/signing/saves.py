"""A ledgered checkpoint's signature (`NAME.sig` beside it, written when the run set a signing
key) checked against the digests its record holds: what `run verify` shows, and why `run
latest` and a resume with a key (`resume_choice(refuse=signed_by(key))`) pass a checkpoint over.

The run's types (`run.checkpoints.RunLedger`, `CheckpointCheck`) are read by their attributes
only: this package imports nothing of `run`, and the ledger's reader imports nothing of this.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from inspector.core.vocabulary import CheckpointState, SignatureState
from inspector.signing.check import SignatureVerdict, check_against
from inspector.signing.keys import read_certificates, read_public_key
from inspector.signing.statement import SavePlace, beside

PathLike = str | os.PathLike[str]


class _Ledger(Protocol):
    run_dir: Path

    def resolve(self, record: Any) -> Path: ...

    def chain_of(self, record: Any) -> str | None: ...


class _Check(Protocol):
    state: str
    record: Any


def save_signature(ledger: _Ledger, check: _Check, public_key: PathLike | None = None,
                   certificates: Sequence[PathLike] = ()) -> SignatureVerdict | None:
    """A checkpoint's signature against its record: checked when a key or chain is given or a
    signature lies beside it; None when neither (or the checkpoint is gone by rotation)."""
    if check.state in (CheckpointState.REMOVED, CheckpointState.REPLACED):
        return None
    target = ledger.resolve(check.record)
    if not (public_key or certificates or beside(target).exists()):
        return None
    record = check.record
    expected = {recorded_name(record, f.path): f.sha256 or "" for f in record.files}
    return check_against(beside(target), expected, Path(public_key) if public_key else None,
                         [Path(c) for c in certificates],
                         SavePlace(record.path, record.step, record.seq,
                                   ledger.chain_of(record), str(record.outcome)))


def recorded_name(record: Any, path: str) -> str:
    """A recorded file's name in its save's signature, from the record alone (`.` for a file
    save, else relative to the save's folder, as `signed_name` names them on disk): a folder
    save whose folder is gone is still checked as a folder's signature."""
    return posixpath.relpath(path, record.path)


def refusal(verdict: SignatureVerdict | None) -> str | None:
    """Why a checkpoint must be passed over for its signature (None: it holds, or none asked)."""
    if verdict is None or verdict.state == SignatureState.INTACT:
        return None
    said = ("not signed" if verdict.state == SignatureState.UNSIGNED
            else f"signature {verdict.state}")
    return said + (f": {verdict.reason}" if verdict.reason else "")


def signed_by(public_key: PathLike | None = None, certificates: Sequence[PathLike] = ()
              ) -> Callable[[Any, Any], str | None]:
    """For `resume_choice` / `latest_valid(refuse=...)`: why an intact checkpoint's signature
    does not hold with this key or chain, or it has none. The key and each chain are read now,
    so one that cannot be read is a SignatureError before any checkpoint is judged."""
    if not (public_key or certificates):
        raise ValueError("signed_by needs a public key or a certificate chain")
    if public_key:
        read_public_key(Path(public_key))
    for chain in certificates:
        read_certificates(Path(chain))

    def refuse(ledger: _Ledger, check: _Check) -> str | None:
        return refusal(save_signature(ledger, check, public_key, certificates))

    return refuse


ORPHANS_LOOKED_AT = 4096
"""At most this many signature files of a run folder are checked for a save the journal lost."""


def unrecorded(ledger: Any, public_key: PathLike | None = None,
               certificates: Sequence[PathLike] = ()) -> list[str]:
    """What the signatures in the run folder beside no recorded checkpoint say the journal
    lost (`lost_save`, each `*.sig` of the run folder but those `save_signature` judges)."""
    records = (*ledger.saves, *ledger.untrusted)
    # a signature beside a recorded checkpoint is judged against that record (`save_signature`)
    judged = {beside(ledger.resolve(r)) for r in records}
    found = []
    for sig in sorted(set(ledger.run_dir.rglob("*.sig")) - judged)[:ORPHANS_LOOKED_AT]:
        why = lost_save(ledger, sig, public_key, certificates)
        if why is not None:
            found.append(f"{sig.relative_to(ledger.run_dir)} {why}")
    return found


def lost_save(ledger: Any, sig: Path, public_key: PathLike | None = None,
              certificates: Sequence[PathLike] = ()) -> str | None:
    """What a signature in the run folder beside no recorded checkpoint says the journal lost,
    when it holds with the key or chain and names a save (`SavePlace`): one whose journal
    `seq` no save record has (lines cut from the end of a journal leave no gap to see; a
    signature made for one of them still says it was there), whose line now records another
    path or step (the line was changed), or that names another run's journal (a signed file
    copied in from another run). None when it says none of these, or is not believed."""
    from inspector.signing.bundle import read_bundle
    from inspector.signing.check import check_signature
    from inspector.signing.errors import SignatureError

    try:
        checked = check_signature(read_bundle(sig), Path(public_key) if public_key else None,
                                  [Path(c) for c in certificates])
    except SignatureError:
        return None  # not the key's, or not a signature: nothing it says is believed
    save = checked.statement.save
    if save is None:
        return None
    records = (*ledger.saves, *ledger.untrusted)
    record = {r.seq: r for r in records}.get(save.seq)
    if save.chain is not None and \
            save.chain not in {ledger.chain_of(r) for r in records} | {ledger.journal.head}:
        return (f"is signed for {save.said()} of another run (its journal's chain id is not "
                "this one's): a signed file copied in from it")
    if record is None:
        return f"is signed for {save.said()}, which no journal line records: lines were deleted"
    if (record.path, record.step) != (save.path, save.step):
        return (f"is signed for {save.said()}, but that line now records {record.label} at "
                f"{record.path}: the line was changed")
    return None
